"""PPO's loss as pure functions on tensors: the clipped surrogate, the (optionally clipped) value
loss, and RLlib's adaptive KL coefficient; tested against hand computations."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

Mean = Callable[[torch.Tensor], torch.Tensor]  # a mean over a minibatch's steps (masked for sequences)


class PPOLoss(NamedTuple):
    total: torch.Tensor  # what the optimizer minimises
    policy: torch.Tensor  # the clipped surrogate, negated
    value: torch.Tensor
    entropy: torch.Tensor
    kl: torch.Tensor  # mean((r - 1) - log r), an estimate of KL(old ‖ new)
    clip_fraction: torch.Tensor  # of steps whose ratio r left [1 - clip, 1 + clip] (no gradient)


def ppo_value_loss(values: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor, *,
                   vf_clip_param: float | None = None, clip_range_vf: float | None = None,
                   mean: Mean = torch.mean) -> torch.Tensor:
    """``½ mean((V - V_targ)²)``, with two clippings that peers mean by "value clipping".

    ``clip_range_vf`` (SB3's key; CleanRL's ``clip_vloss``, PPO2's): the pessimistic
    ``max((V - V_targ)², (V_clip - V_targ)²)`` per step, ``V_clip = V_old + clamp(V - V_old, ±clip)``,
    so that no update moves a value far from the one that was sampled.
    ``vf_clip_param`` (RLlib's key and meaning): each step's squared error capped at it, so
    that a step whose error is past the cap gives the value function no gradient; with returns
    far above the cap, this is what keeps RLlib's tuned examples' value loss from swamping a
    layer the policy shares.
    """
    loss = (values - targets) ** 2
    if clip_range_vf is not None:
        clipped = old_values + (values - old_values).clamp(-clip_range_vf, clip_range_vf)
        loss = torch.max(loss, (clipped - targets) ** 2)
    if vf_clip_param is not None:
        loss = loss.clamp(max=vf_clip_param)
    return 0.5 * mean(loss)


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip_param: float,
                      mean: Mean = torch.mean) -> tuple[torch.Tensor, torch.Tensor]:
    """``mean(max(-A r, -A clamp(r, 1 ± clip_param)))``, the clipped surrogate (Schulman et al., 2017,
    eq. 7) negated, whatever ratio ``r`` it is given (APPO's is taken against a target network),
    and the fraction of steps whose ratio left the range (no gradient)."""
    loss = mean(torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_param, 1 + clip_param)))
    with torch.no_grad():
        clip_fraction = mean(((ratio - 1).abs() > clip_param).float())
    return loss, clip_fraction


def ppo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, values: torch.Tensor,
             old_values: torch.Tensor, value_targets: torch.Tensor, entropy: torch.Tensor, *, clip_param: float,
             vf_clip_param: float | None, clip_range_vf: float | None = None, vf_loss_coeff: float,
             entropy_coeff: float,
             kl_coeff: float | None = None, mean: Mean = torch.mean) -> PPOLoss:
    """PPO's loss on one minibatch (each tensor ``[B]``, or padded ``[S, T]`` with a masked ``mean``).

    With ``r = exp(log π - log π_old)``: :func:`clipped_surrogate`, plus ``vf_loss_coeff`` times
    :func:`ppo_value_loss`, less ``entropy_coeff`` times the mean entropy, plus ``kl_coeff`` times
    the KL estimate when a penalty weight is given.
    """
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    policy, clip_fraction = clipped_surrogate(ratio, advantages, clip_param, mean)
    value = ppo_value_loss(values, old_values, value_targets, vf_clip_param=vf_clip_param,
                           clip_range_vf=clip_range_vf, mean=mean)
    mean_entropy = mean(entropy)
    kl = mean((ratio - 1) - log_ratio)
    total = policy + vf_loss_coeff * value - entropy_coeff * mean_entropy
    if kl_coeff is not None:
        total = total + kl_coeff * kl
    return PPOLoss(total, policy, value, mean_entropy, kl, clip_fraction)


def adapt_kl_coeff(kl_coeff: float, sampled_kl: float, kl_target: float) -> float:
    """The KL penalty's weight for the next iteration, by RLlib's rule.

    x1.5 when the iteration's sampled KL(old ‖ new) was above ``2 · kl_target``, x0.5 when it
    was below ``kl_target / 2``, else unchanged. The PPO paper (Schulman et al., 2017,
    section 4) states the idea with other constants: β x 2 when d > 1.5 · d_targ, β / 2 when
    d < d_targ / 1.5. volley uses RLlib's, so that a config ported from RLlib adapts as it did.
    """
    if sampled_kl > 2.0 * kl_target:
        return kl_coeff * 1.5
    if sampled_kl < 0.5 * kl_target:
        return kl_coeff * 0.5
    return kl_coeff
