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

from volley.algorithm import Algorithm
from volley.algorithm_configs import TRPOConfig
from volley.errors import ConfigError
from volley.models import ActorCriticPolicy, Distribution
from volley.optim import Adam, Optimizer
from volley.rollout.advantages import explained_variance, gae_columns
from volley.rollout.batch import Batch
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
        rows = batch.slice(slice(None, None, cfg.sub_sampling_factor))
        obs = torch.as_tensor(rows["obs"], device=self.device)
        actions = torch.as_tensor(rows["actions"], device=self.device)
        advantages = torch.as_tensor(rows["advantages"], device=self.device)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        with torch.no_grad():
            old_dist = self.policy.distribution(obs)
        old_logp = old_dist.log_prob(actions)

        def surrogate_and_kl() -> tuple[torch.Tensor, torch.Tensor, Distribution]:
            dist = self.policy.distribution(obs)
            ratio = (dist.log_prob(actions) - old_logp).exp()
            kl = old_dist.kl(dist)  # one policy's: always the same kind
            return (ratio * advantages).mean(), kl.mean(), dist

        # natural gradient: s = F⁻¹ g by conjugate gradient, F the KL's Hessian
        surrogate, _, dist = surrogate_and_kl()
        gradient = flat_grad(surrogate, params, retain_graph=True)
        if not self.update_is_finite(surrogate, gradient.norm()):
            return {"policy_loss": -surrogate.item(), "surrogate_improvement": 0.0, "kl": 0.0,
                    "entropy": math.nan, "line_search_fraction": 0.0}
        fvp = fisher_vector_product(
            dist.inputs, lambda inputs: old_dist.kl(dist.with_inputs(*inputs)).mean(),
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
                "kl": new_kl.item(), "entropy": dist.entropy().mean().item(),
                "line_search_fraction": fraction}

    def update_value_function(self, batch: Batch) -> dict[str, float]:
        """Minibatch Adam epochs on the squared error to the GAE value targets.

        Reports the explained variance of the value targets before the fit (the values
        the workers used for GAE) and after it, as modular_rl does.
        """
        cfg = self.config
        obs = torch.as_tensor(batch["obs"], device=self.device)
        targets = torch.as_tensor(batch["value_targets"], device=self.device)
        losses = []
        for _ in range(cfg.vf_epochs):
            for mb in Batch.minibatches({"obs": obs, "targets": targets}, cfg.vf_minibatch_size, self.rng):
                values = self.policy.value(mb["obs"])
                vf_loss = ((values - mb["targets"]) ** 2).mean()
                self.vf_optimizer.zero_grad()
                vf_loss.backward()
                self.optimizer_step(self.vf_optimizer, vf_loss, cfg.grad_clip)
                losses.append(vf_loss.item())
        with torch.no_grad():
            values_after = self.policy.value(obs)
        return {"vf_loss": float(np.mean(losses)),
                "ev_before": explained_variance(batch["values"], batch["value_targets"]),
                "ev_after": explained_variance(values_after.cpu().numpy(), batch["value_targets"])}
