"""REINFORCE's loss as a pure function on tensors."""

from __future__ import annotations

from collections.abc import Callable

import torch


def reinforce_loss(logp: torch.Tensor, returns: torch.Tensor, mean: float, scale: float,
                   total: Callable[[torch.Tensor], torch.Tensor] = torch.sum) -> torch.Tensor:
    """REINFORCE's ``-Σ_t A_t · log π(a_t|s_t)`` with ``A = (G - mean) / scale``, standardised in
    float64 (a batch's sums of squares lose digits in float32) and multiplied in float32; ``total``
    sums over the steps (a masked sum for padded sequences)."""
    advantages = ((returns.double() - mean) / scale).float()
    return -total(advantages * logp)
