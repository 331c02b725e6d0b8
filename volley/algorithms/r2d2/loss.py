"""R2D2's loss as pure functions on tensors: the value rescaling h, its inverse, and the masked
sequence loss with double-Q targets."""

from __future__ import annotations

import torch
from torch import nn


def h(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The value rescaling ``h(x) = sign(x)(sqrt(|x| + 1) - 1) + εx`` (Pohlen et al., 2018)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def h_inverse(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The inverse of :func:`h`, in closed form."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root * root - 1.0)


def sequence_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_q_target: torch.Tensor,
                     next_q_online: torch.Tensor | None, gamma: float, h_eps: float | None) -> torch.Tensor:
    """One-step targets ``[S, T]`` of each step of ``S`` sequences: ``r + γ(1 - terminated) Q̂(s', a*)``
    from the target network's Q-values of the next steps ``next_q_target`` ``[S, T, n]``, with ``a*``
    chosen by the online network's ``next_q_online`` (double Q) or by ``next_q_target`` itself (None);
    with ``h_eps`` the value rescaling: ``h(r + γ(1 - terminated) h⁻¹(Q̂(s', a*)))``."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = next_q_target.gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)
    if h_eps is None:
        return rewards + gamma * (1.0 - terminated) * best
    return h(rewards + gamma * (1.0 - terminated) * h_inverse(best, h_eps), h_eps)


def r2d2_loss(q: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor
              ) -> torch.Tensor:
    """The Huber loss (δ = 1) of ``Q(s, a)`` ``[S, T]`` against ``targets``, averaged over the steps
    ``mask`` ``[S, T]`` keeps (neither burn-in nor padding), each sequence weighted by ``weights`` ``[S]``."""
    losses = nn.functional.huber_loss(q, targets.detach(), reduction="none") * mask * weights[:, None]
    return losses.sum() / mask.sum().clamp(min=1.0)


def sequence_priorities(td_errors: torch.Tensor, mask: torch.Tensor, eta: float = 0.9) -> torch.Tensor:
    """Each sequence's replay priority ``η·max|δ| + (1 - η)·mean|δ|`` over its kept steps (the paper's η 0.9)."""
    errors = td_errors.abs() * mask
    mean = errors.sum(-1) / mask.sum(-1).clamp(min=1.0)
    return eta * errors.max(-1).values + (1.0 - eta) * mean
