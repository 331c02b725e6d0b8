"""IMPALA's and APPO's losses as pure functions on tensors: V-trace's policy and value terms, APPO's
clipped surrogate on IMPACT's ratio."""

from __future__ import annotations

import torch

from volley.algorithms.ppo.loss import clipped_surrogate


def vtrace_policy_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """IMPALA's policy-gradient loss ``−mean(A_s log π(a_s|x_s))`` (eq. 2's direction, negated), with
    V-trace's advantages, whose importance weight ``min(ρ̄_pg, π/μ)`` is in them."""
    return -(logp * advantages).mean()


def vtrace_value_loss(values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``½ mean((v_s − V(x_s))²)``, the value function regressed on V-trace's targets ``v_s``."""
    return 0.5 * ((values - targets) ** 2).mean()


def appo_surrogate(logp: torch.Tensor, behaviour_logp: torch.Tensor, target_logp: torch.Tensor,
                   advantages: torch.Tensor, *, clip_param: float,
                   target_worker_clipping: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's :func:`~volley.algorithms.ppo.loss.clipped_surrogate` on IMPACT's ratio
    ``r = min(μ/π_target, target_worker_clipping) · π/μ`` (each tensor ``[B]``), and its clip fraction."""
    weight = (behaviour_logp - target_logp).exp().clamp(0.0, target_worker_clipping)
    return clipped_surrogate(weight * (logp - behaviour_logp).exp(), advantages, clip_param)
