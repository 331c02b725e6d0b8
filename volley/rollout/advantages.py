"""Discounted returns and generalized advantage estimation (Schulman et al., 2016).

Both work on arrays whose first axis is time (``[T]`` or ``[T, N]``). Each step
``t`` carries ``next_values[t]``, the value of the state that follows it: the next
step's value inside an episode, the value of the final observation at a time-limit
truncation or at the end of a fragment, and 0 after a true terminal. ``cuts[t]``
marks a step after which the sequence does not continue (episode end or fragment
end), so a recursion never runs across it.
"""

from __future__ import annotations

from typing import Protocol, cast

import numpy as np

from volley.config import AlgorithmConfig


def discounted_returns(rewards: np.ndarray, next_values: np.ndarray, cuts: np.ndarray,
                       gamma: float) -> np.ndarray:
    """``G[t] = r[t] + gamma * (next_values[t] if cuts[t] else G[t+1])``."""
    returns = np.zeros_like(rewards, dtype=np.float32)
    following = np.zeros_like(rewards[0], dtype=np.float32)
    for t in reversed(range(len(rewards))):
        following = rewards[t] + gamma * np.where(cuts[t], next_values[t], following)
        returns[t] = following
    return returns


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, cuts: np.ndarray,
        gamma: float, lam: float) -> np.ndarray:
    """Advantages ``A[t] = delta[t] + gamma * lam * A[t+1]``, restarting after each cut.

    ``delta[t] = r[t] + gamma * next_values[t] - values[t]``; value targets are
    ``A + values``.
    """
    deltas = rewards + gamma * next_values - values
    advantages = np.zeros_like(deltas, dtype=np.float32)
    following = np.zeros_like(deltas[0], dtype=np.float32)
    for t in reversed(range(len(deltas))):
        following = deltas[t] + gamma * lam * np.where(cuts[t], 0.0, following)
        advantages[t] = following
    return advantages


class GAEConfig(Protocol):
    """What :func:`gae_columns` reads from an algorithm's config."""

    gamma: float
    gae_lambda: float


def gae_columns(columns: dict[str, np.ndarray], config: AlgorithmConfig) -> dict[str, np.ndarray]:
    """A worker fragment reduced to what actor-critic updates read, with GAE advantages.

    The worker-side ``postprocess`` of PPO and TRPO. Returns ``obs``, ``actions``,
    ``logp``, ``values``, ``advantages``, ``value_targets`` (advantages + values) and
    ``valid``, all time-major like the input.
    """
    advantages = gae(columns["rewards"], columns["values"], columns["next_values"],
                     columns["cuts"], config.gamma, cast(GAEConfig, config).gae_lambda)
    return {"obs": columns["obs"], "actions": columns["actions"], "logp": columns["logp"],
            "values": columns["values"], "advantages": advantages,
            "value_targets": advantages + columns["values"], "valid": columns["valid"]}


def explained_variance(predicted: np.ndarray, targets: np.ndarray) -> float:
    """``1 - Var[target - prediction] / Var[target]``: how much of the return the critic explains.

    1 is a perfect fit, 0 is no better than predicting the mean, negative is worse.
    """
    variance = np.var(targets)
    return float("nan") if variance == 0 else float(1 - np.var(targets - predicted) / variance)
