"""DQN's loss as pure functions on tensors: n-step bootstrapped targets and the weighted Huber loss."""

from __future__ import annotations

import torch
from torch import nn


def bootstrapped_targets(returns: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor,
                         chooser_q: torch.Tensor | None = None) -> torch.Tensor:
    """``R + discount · Q̂(s', a*)`` ``[B]`` from the target network's ``next_q`` ``[B, A]``:
    ``a* = argmax_a`` of the online network's ``chooser_q`` with double Q-learning (van Hasselt et
    al., 2016), which keeps Q̂'s own overestimates out of the choice; of ``next_q`` itself without.
    Under an action mask both are over the actions ``s'`` allows (the others' Q-values are the
    dtype's minimum); a next state that allows none (a finished game's) bootstraps nothing."""
    chooser = next_q if chooser_q is None else chooser_q
    best = next_q.gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)
    return returns + discounts * torch.where(best > torch.finfo(best.dtype).min, best, 0.0)


def dqn_loss(q: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The importance-weighted Huber loss ``mean(w · huber(Q(s, a) - y))`` (δ = 1), each ``[B]``."""
    return (weights * nn.functional.huber_loss(q, targets, reduction="none")).mean()
