"""TRPO's surrogate as a pure function on tensors."""

from __future__ import annotations

from collections.abc import Callable

import torch


def trpo_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mean: Callable[[torch.Tensor], torch.Tensor] = torch.mean) -> torch.Tensor:
    """TRPO's surrogate ``mean(π/π_old · A)`` (Schulman et al., 2015, eq. 14), which the step maximises."""
    return mean((logp - old_logp).exp() * advantages)
