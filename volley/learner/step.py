"""The gradient step every algorithm takes: gradients averaged over MPI replicas, the finite
check that skips a NaN/inf update, clipping, and the schedules (``lr``, ``entropy_coeff``) read
at the steps sampled so far."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch

from volley.errors import TrainingError
from volley.learner.base import LearnerBase
from volley.optim import Optimizer
from volley.schedules import value_at


class GradientSteps(LearnerBase):
    """``optimizer_step`` and the schedules, on the learner's counters."""

    def replica_mean(self, value: float) -> float:
        """``value`` averaged over data-parallel replicas (MPI allreduce mode), else ``value``: what
        replicas adapt from their own data (PPO's KL penalty) they must adapt alike."""
        return float(self.workers.average_over_replicas(np.array([value]))[0])

    def reduce_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """Called between ``backward()`` and the optimizer step: averages the gradients over
        data-parallel replicas where there are some (the MPI engine's allreduce mode)."""
        self.workers.average_gradients(list(parameters))

    def optimizer_step(self, optimizer: Optimizer, loss: torch.Tensor | float, grad_clip: float | None) -> bool:
        """After ``backward()``: average the gradients of ``optimizer``'s parameters over replicas,
        clip them to ``grad_clip`` and step, unless the loss or the gradient is NaN/inf (see
        :meth:`update_is_finite`).

        Every optimizer step of every algorithm goes through here. The check costs one
        gradient norm, which clipping needs anyway. Returns whether the step was taken.
        """
        params = [p for p in optimizer.params if p.grad is not None]
        self.reduce_gradients(params)  # first: replicas check the same averaged gradient
        # nn.utils.clip_grad_norm_'s arithmetic for one device and dtype, without its grouping
        # of the tensors by both on every step
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        if not self.update_is_finite(loss, norm):
            return False
        if grad_clip is not None:
            torch._foreach_mul_(grads, torch.clamp(grad_clip / (norm + 1e-6), max=1.0))
        optimizer.step()
        return True

    def update_is_finite(self, loss: torch.Tensor | float, gradient_norm: torch.Tensor | float) -> bool:
        """False (and the update counted in ``num_skipped_updates``) if ``loss`` or the gradient's
        norm is NaN/inf: such a step would write NaN into every weight. A TrainingError ends the
        run after ``max_consecutive_skips`` such updates in a row: the data or the step size is
        broken, not one batch. The run's checkpoints are written after good iterations only,
        so the last one stays as it was."""
        total = torch.as_tensor(loss).detach() + gradient_norm  # NaN or inf in either spreads
        if math.isfinite(float(total)):  # one device sync
            self._skips_in_a_row = 0
            return True
        self.num_skipped_updates += 1
        self._skips_in_a_row += 1
        if self._skips_in_a_row >= self.config.max_consecutive_skips:
            raise TrainingError(
                f"{self._skips_in_a_row} updates in a row had a non-finite loss ({float(loss)}) or "
                f"gradient norm ({float(gradient_norm)}), max_consecutive_skips="
                f"{self.config.max_consecutive_skips}; lower lr, scale the rewards, or check the "
                f"environment's observations (iteration {self.iteration + 1})")
        return False

    def scheduled(self, key: str) -> float:
        """``key``'s value now (``lr``, ``entropy_coeff``): a number as it is, a schedule (RLlib's
        ``[[t, v], ...]``, or the old stack's ``<key>_schedule``, which overrides it) at the
        environment steps sampled so far, this iteration's included (``volley.schedules``)."""
        old_stack = getattr(self.config, f"{key}_schedule", None)
        value = old_stack if old_stack is not None else getattr(self.config, key)
        return value_at(value, self.timesteps_total + self._steps_this_iter)

    def schedule_lr(self, optimizer: Optimizer) -> float:
        """After an update, as RLlib's learners do: ``optimizer``'s learning rate becomes ``lr`` at the
        steps sampled so far, for the next update. Returns it (RLlib reports this one)."""
        lr = self.scheduled("lr")
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr
