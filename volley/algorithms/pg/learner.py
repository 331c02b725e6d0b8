"""Vanilla policy gradient (REINFORCE, Williams 1992) the way Karpathy's Pong agent trains.

Per update: play ``batch_episodes`` whole episodes, compute discounted returns,
standardise them (over the batch, or over each episode as Karpathy's script does), and
take one RMSProp step on ``-Σ_t A_t · log π(a_t|s_t)``. The gradient is summed over the
batch's steps, as Karpathy's is, with his 1e-5 in RMSProp's denominator: RMSProp divides
the gradient by its running RMS, so its scale only matters against that epsilon, and a
mean over Pong's ~12,000 steps per batch with torch's 1e-8 shrank early first-layer
steps by a third. Two ways to share the work (``mode``):

- ``"samples"``: workers return their episodes; the learner computes the gradient.
- ``"gradients"``: workers keep their episodes and return gradient pieces; the
  learner combines them into the very same gradient. Standardising with the whole
  batch's mean μ and deviation σ stays exact because the loss is linear in the
  returns: ∇L = -(g₁ - μ·g₀) / σ with g₁ = Σ G_t ∇log π_t and g₀ = Σ ∇log π_t.
  Returns standardised per episode are the worker's own business: ∇L = -g₁ alone,
  one backward pass instead of two.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from volley.algorithm import Algorithm
from volley.algorithms.pg.config import PGConfig
from volley.algorithms.pg.loss import reinforce_loss
from volley.config import AlgorithmConfig
from volley.errors import ConfigError
from volley.optim import RMSprop
from volley.rollout.advantages import returns_columns
from volley.rollout.batch import Batch
from volley.rollout.sequences import Sequences
from volley.torch_networks.custom_model import adds_custom_loss, model_metrics, with_custom_loss
from volley.torch_networks.policy import ActorCriticPolicy

Pieces = tuple[np.ndarray, np.ndarray | None, np.ndarray]


def gradient_pieces(policy: ActorCriticPolicy, batch: Batch, config: AlgorithmConfig) -> Pieces:
    """Worker-side, mode "gradients": ``g₁ = Σ G_t ∇log π_t``, ``g₀ = Σ ∇log π_t`` (None when the
    learner does not standardise over the batch) and the sums ``(N, ΣG, ΣG², ΣG·log π, Σlog π)``:
    all the learner needs for the standardised gradient."""
    params = policy.policy_parameters()
    data = Sequences.of(batch).map(torch.as_tensor)
    logp = policy.distribution(**data.inputs).log_prob(data["actions"])
    returns = torch.as_tensor(batch["returns"])
    weighted, plain = data.sum(data["returns"] * logp), data.sum(logp)
    needs_g0 = cast(PGConfig, config).standardizes_batch
    g1 = torch.autograd.grad(weighted, params, retain_graph=needs_g0)
    g0 = torch.autograd.grad(plain, params) if needs_g0 else None
    sums = np.array([len(returns), returns.double().sum().item(), (returns.double() ** 2).sum().item(),
                     weighted.item(), plain.item()])
    return flat(g1), flat(g0) if g0 is not None else None, sums


def flat(grads: tuple[torch.Tensor, ...]) -> np.ndarray:
    return torch.cat([g.reshape(-1) for g in grads]).double().numpy()


class PG(Algorithm):
    """REINFORCE with batch-standardised returns and RMSProp."""

    config_class = PGConfig
    config: PGConfig
    policy: ActorCriticPolicy
    averages_gradients = True
    adds_custom_loss = True

    # worker-side: Monte-Carlo returns (torch-free, so a samples-mode worker never imports torch)
    postprocess = staticmethod(returns_columns)

    def setup(self) -> None:
        if self.config.mode == "gradients" and adds_custom_loss(self.policy):
            raise ConfigError("the custom model's custom_loss() needs PG's mode='samples' (the learner computes "
                              "the loss there); mode='gradients' has the workers compute the gradients")
        self.optimizer = RMSprop(self.policy.policy_parameters(), lr=self.scheduled("lr"),
                                 alpha=self.config.decay_rate, eps=1e-5)

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
        # as RLlib's learner after an update
        return {"policy_loss": loss, "lr": self.schedule_lr(self.optimizer), **model_metrics(self.policy)}

    def _standardizer(self, count: float, total: float, total_sq: float) -> tuple[float, float]:
        """Mean and scale of the returns over the whole batch (0 and 1 when the learner does not
        standardise: not at all, or the workers did, per episode)."""
        if not self.config.standardizes_batch:
            return 0.0, 1.0
        mean = total / count
        return mean, float(np.sqrt(max(total_sq / count - mean**2, 0.0))) + 1e-8

    def loss(self, batch: Batch) -> torch.Tensor:
        """``-Σ_t A_t · log π(a_t|s_t)`` with A the standardised returns (mode "samples")."""
        returns = torch.as_tensor(batch["returns"], dtype=torch.float64, device=self.device)
        mean, scale = self._standardizer(len(returns), returns.sum().item(), (returns**2).sum().item())
        data = self.sequences(batch, ("obs", "actions", "returns"))  # rows, or padded sequences
        logp = self.policy.distribution(**data.inputs).log_prob(data["actions"])
        return with_custom_loss(self.policy, reinforce_loss(logp, data["returns"], mean, scale, data.sum),
                                data.columns)

    def combine_gradients(self, pieces: list[Pieces]) -> float:
        """Set the policy's gradient from the workers' pieces (mode "gradients"); return the loss."""
        g1 = np.sum([g1 for g1, _, _ in pieces], axis=0)
        count, total, total_sq, weighted, plain = np.sum([sums for _, _, sums in pieces], axis=0).tolist()
        mean, scale = self._standardizer(count, total, total_sq)
        centred = g1 if mean == 0.0 else g1 - mean * np.sum([g0 for _, g0, _ in pieces if g0 is not None], axis=0)
        grad = torch.as_tensor(-centred / scale, dtype=torch.float32)
        offset = 0
        for param in self.policy.policy_parameters():
            param.grad = grad[offset:offset + param.numel()].view_as(param).to(param.device)
            offset += param.numel()
        return -(weighted - mean * plain) / scale
