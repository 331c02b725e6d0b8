"""Vanilla policy gradient (REINFORCE, Williams 1992) the way Karpathy's Pong agent trains.

Per update: play ``batch_episodes`` whole episodes, compute discounted returns,
standardise them over the batch, and take one RMSProp step on
``-mean(A_t · log π(a_t|s_t))``. Two ways to share the work (``mode``):

- ``"samples"``: workers return their episodes; the learner computes the gradient.
- ``"gradients"``: workers keep their episodes and return gradient pieces; the
  learner combines them into the very same gradient. Standardising with the whole
  batch's mean μ and deviation σ stays exact because the loss is linear in the
  returns: ∇L = -(g₁ - μ·g₀) / (N·σ) with g₁ = Σ G_t ∇log π_t and g₀ = Σ ∇log π_t.
"""

from __future__ import annotations

import numpy as np
import torch

from volley.algorithm import Algorithm
from volley.algorithm_configs import PGConfig
from volley.config import AlgorithmConfig
from volley.models import ActorCriticPolicy
from volley.optim import RMSprop
from volley.rollout.advantages import returns_columns
from volley.rollout.batch import Batch


def gradient_pieces(policy: ActorCriticPolicy, batch: Batch, config: AlgorithmConfig
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Worker-side, mode "gradients": ``g₁ = Σ G_t ∇log π_t``, ``g₀ = Σ ∇log π_t`` and the sums
    ``(N, ΣG, ΣG², ΣG·log π, Σlog π)``: all the learner needs for the standardised gradient."""
    params = policy.policy_parameters()
    logp = policy.distribution(torch.as_tensor(batch["obs"])).log_prob(torch.as_tensor(batch["actions"]))
    returns = torch.as_tensor(batch["returns"])
    weighted, plain = (returns * logp).sum(), logp.sum()
    g1 = torch.autograd.grad(weighted, params, retain_graph=True)
    g0 = torch.autograd.grad(plain, params)
    flat = [torch.cat([g.reshape(-1) for g in grads]).double().numpy() for grads in (g1, g0)]
    sums = np.array([len(returns), returns.double().sum().item(), (returns.double() ** 2).sum().item(),
                     weighted.item(), plain.item()])
    return flat[0], flat[1], sums


class PG(Algorithm):
    """REINFORCE with batch-standardised returns and RMSProp."""

    config_class = PGConfig
    config: PGConfig
    policy: ActorCriticPolicy
    averages_gradients = True

    # worker-side: Monte-Carlo returns (torch-free, so a samples-mode worker never imports torch)
    postprocess = staticmethod(returns_columns)

    def setup(self) -> None:
        self.optimizer = RMSprop(self.policy.policy_parameters(), lr=self.scheduled("lr"),
                                 alpha=self.config.decay_rate)

    def training_step(self) -> dict[str, float]:
        if self.config.mode == "samples":
            batch = self.sample(self.config.batch_episodes)
            self.optimizer.zero_grad()
            loss_tensor = self.loss(batch)
            loss_tensor.backward()
            loss = loss_tensor.item()
        else:
            pieces = self.sample_and_apply(gradient_pieces, self.config.batch_episodes)
            loss = self.combine_gradients(pieces)
        self.optimizer_step(self.optimizer, loss, self.config.grad_clip)
        return {"policy_loss": loss, "lr": self.schedule_lr(self.optimizer)}  # as RLlib's learner after an update

    def _standardizer(self, count: float, total: float, total_sq: float) -> tuple[float, float]:
        """Mean and scale of the returns over the whole batch (scale 1 when not standardising)."""
        if not self.config.standardize_returns:
            return 0.0, 1.0
        mean = total / count
        return mean, float(np.sqrt(max(total_sq / count - mean**2, 0.0))) + 1e-8

    def loss(self, batch: Batch) -> torch.Tensor:
        """``-mean(A_t · log π(a_t|s_t))`` with A the standardised returns (mode "samples")."""
        returns = torch.as_tensor(batch["returns"], dtype=torch.float64, device=self.device)
        mean, scale = self._standardizer(len(returns), returns.sum().item(), (returns**2).sum().item())
        advantages = ((returns - mean) / scale).float()
        dist = self.policy.distribution(torch.as_tensor(batch["obs"], device=self.device))
        logp = dist.log_prob(torch.as_tensor(batch["actions"], device=self.device))
        return -(advantages * logp).mean()

    def combine_gradients(self, pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> float:
        """Set the policy's gradient from the workers' pieces (mode "gradients"); return the loss."""
        g1, g0, sums = (np.sum([p[i] for p in pieces], axis=0) for i in range(3))
        count, total, total_sq, weighted, plain = sums.tolist()
        mean, scale = self._standardizer(count, total, total_sq)
        flat = torch.as_tensor(-(g1 - mean * g0) / (count * scale), dtype=torch.float32)
        offset = 0
        for param in self.policy.policy_parameters():
            param.grad = flat[offset:offset + param.numel()].view_as(param).to(param.device)
            offset += param.numel()
        return -(weighted - mean * plain) / (count * scale)
