"""SAC's losses as functions on tensors and networks: soft targets, the critics', actor's and
temperature's losses (section 5 of the paper), each tested against a hand computation."""

from __future__ import annotations

from typing import NamedTuple

import torch

from volley.torch_networks.squashed_gaussian import SquashedGaussianActor, StackedQ


@torch.no_grad()
def critic_targets(actor: SquashedGaussianActor, target_critics: StackedQ, alpha: torch.Tensor,
                   returns: torch.Tensor, next_obs: torch.Tensor, discounts: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The soft Bellman targets ``y = R + discount·(min_i Q̂_i(s', a') − α·log π(a'|s'))`` ``[B]``,
    ``a'`` drawn from the current policy: the smaller of the twin targets keeps either critic's
    overestimates out (clipped double Q, Fujimoto et al., 2018); ``discount`` is ``γ^m`` after
    ``m`` rewards, 0 where the episode terminated."""
    next_actions, next_logp = actor.distribution(next_obs).rsample(generator)
    return soft_targets(returns, discounts, target_critics(next_obs, next_actions), alpha, next_logp)


def soft_targets(returns: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor, alpha: torch.Tensor,
                 next_logp: torch.Tensor) -> torch.Tensor:
    """``R + discount·(min_i next_q_i − α·log π(a'|s'))`` ``[B]``, ``next_q`` ``[k, B]``."""
    return returns + discounts * (next_q.min(0).values - alpha * next_logp)


def critic_loss(q: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``½ Σ_i mean_b w_b (Q_i(s, a) − y)²`` of the critics' ``q`` ``[k, B]``."""
    return 0.5 * (weights * (q - targets).square()).mean(-1).sum()


def actor_loss(alpha: torch.Tensor, log_prob: torch.Tensor, q_policy: torch.Tensor) -> torch.Tensor:
    """``mean(α·log π(ã|s) − min_i Q_i(s, ã))``, ``ã`` the policy's reparameterised draw, ``q_policy`` ``[k, B]``."""
    return (alpha * log_prob - q_policy.min(0).values).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``−mean(log α · (log π(ã|s) + H̄))``: α grows while the entropy is below the target ``H̄``
    (Haarnoja et al., 2018b, eq. 18, on log α); the log-probability carries no gradient."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


class Losses(NamedTuple):
    critic: torch.Tensor  # ½ Σ_i mean_b w_b (Q_i(s, a) − y)²
    actor: torch.Tensor
    alpha: torch.Tensor
    td_errors: torch.Tensor  # [B] mean over the critics of |Q_i(s, a) − y|: new replay priorities
    log_prob: torch.Tensor  # [B] log π(ã|s)
    q: torch.Tensor  # [k, B] Q_i(s, a)


def sac_losses(actor: SquashedGaussianActor, critics: StackedQ, target_critics: StackedQ,
               log_alpha: torch.Tensor, target_entropy: float, batch: dict[str, torch.Tensor],
               generator: torch.Generator | None = None) -> Losses:
    """SAC's three losses on one minibatch (``obs``, ``actions``, ``returns``, ``next_obs``,
    ``discounts``, importance ``weights``), each with gradients for its own parameters only:
    the critics' loss reads detached targets, the actor's reads the critics through detached
    weights (the gradient reaches the actions, never the critics), the temperature's reads a
    detached log-probability. So one ``backward()`` of their sum gives every network its own
    gradient. The actions ``a'`` and ``ã`` are drawn from ``generator`` (None: torch's global one)."""
    alpha = log_alpha.detach().exp()
    targets = critic_targets(actor, target_critics, alpha, batch["returns"], batch["next_obs"], batch["discounts"],
                             generator)
    q = critics(batch["obs"], batch["actions"])  # [k, B], every critic in one pass
    actions, log_prob = actor.distribution(batch["obs"]).rsample(generator)
    return Losses(critic_loss(q, targets, batch["weights"]),
                  actor_loss(alpha, log_prob, critics(batch["obs"], actions, frozen=True)),
                  temperature_loss(log_alpha, log_prob, target_entropy),
                  (q.detach() - targets).abs().mean(0), log_prob.detach(), q.detach())
