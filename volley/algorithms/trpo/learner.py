"""Trust Region Policy Optimization (Schulman et al., 2015), as in John Schulman's modular_rl.

Per iteration: sample whole episodes from every worker with the current weights
(workers compute GAE advantages on their own fragments), then

1. policy: maximise the surrogate ``mean(π/π_old · A)`` subject to
   ``mean KL(π_old ‖ π) ≤ max_kl``. The natural-gradient direction ``s = F⁻¹ g`` comes
   from conjugate gradient on Fisher-vector products; it is scaled to the edge of the
   trust region, ``sqrt(2 · max_kl / sᵀF s)``, and a backtracking line search keeps the
   first fraction of it that improves the surrogate within the KL limit;
2. value function: a separate network regressed on the GAE value targets with
   minibatch Adam.

The next ``sample()`` ships the new weights.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from volley.action_dists import Distribution
from volley.algorithm import Algorithm
from volley.algorithms.trpo.config import TRPOConfig
from volley.algorithms.trpo.loss import trpo_surrogate
from volley.errors import ConfigError
from volley.optim import Adam, Optimizer
from volley.rollout.advantages import explained_variance, gae_columns
from volley.rollout.batch import Batch
from volley.torch_networks.policy import ActorCriticPolicy
from volley.trust_region import (
    backtracking_line_search,
    conjugate_gradient,
    fisher_vector_product,
    flat_grad,
)


class TRPO(Algorithm):
    """Synchronous TRPO: gather samples, update on the learner, broadcast weights."""

    config_class = TRPOConfig
    config: TRPOConfig
    policy: ActorCriticPolicy

    postprocess = staticmethod(gae_columns)  # worker-side: GAE advantages and value targets

    def setup(self) -> None:
        if not self.policy.value_parameters():
            raise ConfigError(f"custom model {self.config.model.custom_model!r} has no value-function "
                              "parameters of its own: TRPO's natural-gradient step moves every parameter "
                              "the action distribution depends on and fits the value function apart, so "
                              "give value_function() a branch or at least a head of its own")
        self.vf_optimizer = Adam(self.policy.value_parameters(), lr=self.config.vf_lr)

    def optimizers(self) -> dict[str, Optimizer]:
        return {"vf_optimizer": self.vf_optimizer}

    def training_step(self) -> dict[str, float]:
        batch = self.sample()
        return {**self.update_policy(batch), **self.update_value_function(batch)}

    def update_policy(self, batch: Batch) -> dict[str, float]:
        """One natural-gradient step on the surrogate, line-searched inside the KL trust region, on
        every ``sub_sampling_factor``-th row of the batch (every row by default)."""
        cfg = self.config
        params = self.policy.policy_parameters()
        # every k-th row (or sequence) of the batch's rows (or a recurrent policy's padded sequences)
        data = self.sequences(batch, ("obs", "actions", "advantages")).every(cfg.sub_sampling_factor)
        actions = data["actions"]
        advantages = data.standardized(data["advantages"])
        with torch.no_grad():
            old_dist = self.policy.distribution(**data.inputs)
        old_logp = old_dist.log_prob(actions)

        def surrogate_and_kl() -> tuple[torch.Tensor, torch.Tensor, Distribution]:
            dist = self.policy.distribution(**data.inputs)
            kl = old_dist.kl(dist)  # one policy's: always the same kind
            return trpo_surrogate(dist.log_prob(actions), old_logp, advantages, data.mean), data.mean(kl), dist

        # natural gradient: s = F⁻¹ g by conjugate gradient, F the KL's Hessian
        surrogate, _, dist = surrogate_and_kl()
        gradient = flat_grad(surrogate, params, retain_graph=True)
        if not self.update_is_finite(surrogate, gradient.norm()):
            return {"policy_loss": -surrogate.item(), "surrogate_improvement": 0.0, "kl": 0.0,
                    "entropy": math.nan, "line_search_fraction": 0.0}
        fvp = fisher_vector_product(
            dist.inputs, lambda inputs: data.mean(old_dist.kl(dist.with_inputs(*inputs))),
            params, cfg.cg_damping)
        direction = conjugate_gradient(fvp, gradient, cfg.cg_iters)
        # largest step along s with ½ sᵀF s = max_kl
        full_step = direction * torch.sqrt(2 * cfg.max_kl / (direction @ fvp(direction)))
        expected_improvement = (gradient @ full_step).item()

        def evaluate() -> tuple[float, float]:
            with torch.no_grad():
                new_surrogate, new_kl, _ = surrogate_and_kl()
            return new_surrogate.item(), new_kl.item()

        _, fraction = backtracking_line_search(
            params, full_step, evaluate, surrogate.item(), expected_improvement, cfg.max_kl,
            cfg.max_backtracks, cfg.accept_ratio)

        with torch.no_grad():
            new_surrogate, new_kl, dist = surrogate_and_kl()
        return {"policy_loss": -new_surrogate.item(),
                "surrogate_improvement": new_surrogate.item() - surrogate.item(),
                "kl": new_kl.item(), "entropy": data.mean(dist.entropy()).item(),
                "line_search_fraction": fraction}

    def update_value_function(self, batch: Batch) -> dict[str, float]:
        """Minibatch Adam epochs on the squared error to the GAE value targets.

        Reports the explained variance of the value targets before the fit (the values
        the workers used for GAE) and after it, as modular_rl does.
        """
        cfg = self.config
        data = self.sequences(batch, ("obs", "value_targets"))
        losses = []
        for _ in range(cfg.vf_epochs):
            for mb in data.minibatches(cfg.vf_minibatch_size, self.rng):
                values = self.policy.value(**mb.inputs)
                vf_loss = mb.mean((values - mb["value_targets"]) ** 2)
                self.vf_optimizer.zero_grad()
                vf_loss.backward()
                self.optimizer_step(self.vf_optimizer, vf_loss, cfg.grad_clip)
                losses.append(vf_loss.item())
        with torch.no_grad():
            values_after = data.real(self.policy.value(**data.inputs))
        return {"vf_loss": float(np.mean(losses)),
                "ev_before": explained_variance(batch["values"], batch["value_targets"]),
                "ev_after": explained_variance(values_after.cpu().numpy(), batch["value_targets"])}
