"""A2C's loss as a pure function on tensors (SB3's form: means over the batch's steps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

Mean = Callable[[torch.Tensor], torch.Tensor]  # a mean over the steps (masked for padded sequences)


class A2CLoss(NamedTuple):
    total: torch.Tensor  # what the optimizer minimises
    policy: torch.Tensor  # -mean(A · log π(a|s))
    value: torch.Tensor  # mean((R - V)²)
    entropy: torch.Tensor  # mean(H[π(·|s)])


def a2c_loss(logp: torch.Tensor, advantages: torch.Tensor, values: torch.Tensor, value_targets: torch.Tensor,
             entropy: torch.Tensor, *, vf_loss_coeff: float, entropy_coeff: float,
             mean: Mean = torch.mean) -> A2CLoss:
    """The advantage actor-critic loss (Mnih et al., 2016, synchronous):
    ``-mean(A log π) + vf_loss_coeff · mean((R - V)²) - entropy_coeff · mean(H)``, each tensor
    ``[B]``; the advantages carry no gradient (they come from the workers' GAE)."""
    policy = -mean(advantages * logp)
    value = mean((value_targets - values) ** 2)
    entropy_mean = mean(entropy)
    return A2CLoss(policy + vf_loss_coeff * value - entropy_coeff * entropy_mean, policy, value, entropy_mean)
