"""Action distributions in numpy: how many inputs a policy's head has for an action space, and
each distribution's draw (one random stream per environment) and log-probabilities.

Every network acts through a :class:`Head` after its forward pass, whether that pass ran in numpy
(:mod:`volley.acting`) or in torch (a custom model or the CNN): sampling is one function per
distribution, wherever the network runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import gymnasium as gym
import numpy as np

from volley.errors import ConfigError, VolleyError
from volley.spaces import MASKED, ActionLayout, action_layout


def policy_outputs(action_space: gym.Space) -> tuple[int, int]:
    """Outputs of volley's policy head for ``action_space`` (its distribution's inputs, a float Box's
    means without log-stds) and the size of the learned log-std beside them (0 without a float
    Box); a ConfigError naming a space volley cannot take (:mod:`volley.spaces`)."""
    layout = action_layout(action_space)
    return layout.inputs(log_stds=False).width, layout.dims


def q_outputs(action_space: gym.Space) -> int:
    """Q-values of a Q-network for ``action_space``; a VolleyError unless it is Discrete."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise VolleyError(f"action space {action_space} is not supported by Q-learning: "
                          "DQN takes Discrete actions")
    return int(action_space.n)


def squashed_outputs(action_space: gym.Space) -> int:
    """Action dimensions of a tanh-squashed Gaussian policy (SAC) for ``action_space``; a
    ConfigError naming the space unless it is a one-dimensional float Box with finite bounds."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1 \
            or action_space.dtype.kind != "f":
        raise ConfigError(f"action space {action_space} is not supported by SAC: it takes a one-dimensional "
                          "float Box (continuous actions); for Discrete and composite actions use ppo "
                          "(dqn for Discrete)")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ConfigError(f"action space {action_space} has infinite bounds: SAC squashes its actions with "
                          "tanh into the bounds, so they must be finite (wrap the environment with "
                          "gymnasium.wrappers.ClipAction on a bounded Box)")
    return int(action_space.shape[0])


class RandomStreams(Protocol):
    """One random stream per environment (see RolloutWorker), and for a custom action distribution,
    which draws in torch, the state of one torch generator for them all (None before the first
    draw: it starts from ``torch_seed``)."""

    torch_seed: int
    torch_state: Any

    def gumbel(self, n: int) -> np.ndarray: ...  # float64 [N, n]
    def normal(self, dim: int) -> np.ndarray: ...  # float32 [N, dim]


def gumbel_max(log_weights: np.ndarray, streams: RandomStreams) -> np.ndarray:
    """One categorical draw per row of unnormalised log-probabilities ``[B, n]``: the argmax of
    each row plus its environment's Gumbel noise (Gumbel, 1954; the "Gumbel-max trick"). Two
    numpy calls a step: no softmax, no cumulative sum, and the noise comes in blocks."""
    return (log_weights + streams.gumbel(log_weights.shape[-1])).argmax(-1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def pick(values: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``values[..., a]`` for each action ``a`` of ``actions`` ``[...]`` (``values`` ``[..., n]``)."""
    return np.take_along_axis(values, actions[..., None].astype(np.intp), -1)[..., 0]


# A squashed Gaussian's log-std is clipped to this range (SB3's and RLlib's bounds): e^-20 keeps
# the log-density finite, e^2 keeps exploration from saturating tanh at every step
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def uniform_actions(streams: RandomStreams, dim: int) -> np.ndarray:
    """Actions ``[N, dim]`` uniform in (-1, 1), each environment's from its own stream (SAC's warm-up,
    as SB3 acts before learning starts): ``exp(-exp(-g))`` is uniform on (0, 1) when ``g`` is
    Gumbel-distributed (its distribution function), so the draw reuses the Gumbel blocks."""
    return (2.0 * np.exp(-np.exp(-streams.gumbel(dim))) - 1.0).astype(np.float32)


def squashed_gaussian_logp(mean: np.ndarray, log_std: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``log π(a)`` ``[...]`` of squashed actions ``a = tanh(u)``, ``u ~ N(mean, std)``: the Gaussian's
    density of ``u = atanh(a)`` less ``Σ log(1 − a²)``, tanh's log-determinant (Haarnoja et al.,
    2018, appendix C). Actions at ±1 (tanh rounds there in float32) are taken 1e-6 inside."""
    a = np.clip(actions.astype(np.float64), -1 + 1e-6, 1 - 1e-6)
    z = (np.arctanh(a) - mean) / np.exp(log_std)
    gaussian = -0.5 * z * z - log_std - 0.5 * np.log(2 * np.pi)
    return (gaussian - np.log1p(-a * a)).sum(-1).astype(np.float32)


def epsilon_greedy_logp(q_values: np.ndarray, epsilon: float, masked: bool = False) -> np.ndarray:
    """Log-probabilities ``[..., n]`` of ε-greedy acting: ``ε/n + (1 - ε)·[a = argmax Q]``. With
    ``masked``, the actions whose Q-value is :data:`~volley.spaces.MASKED` are not drawn: ``ε`` is
    shared by the ``m`` allowed ones (``ε/m``) and the masked ones keep MASKED."""
    n = q_values.shape[-1]
    greedy = q_values.argmax(-1)[..., None]
    tiny = np.finfo(q_values.dtype).tiny  # a log-probability finite at ε = 0
    if not masked:
        probs = np.full(q_values.shape, epsilon / n, q_values.dtype)
        np.put_along_axis(probs, greedy, epsilon / n + 1 - epsilon, -1)
        return np.log(np.maximum(probs, tiny))
    allowed = q_values > MASKED
    probs = np.where(allowed, epsilon / np.maximum(allowed.sum(-1, keepdims=True), 1), 0).astype(q_values.dtype)
    np.put_along_axis(probs, greedy, np.take_along_axis(probs, greedy, -1) + (1 - epsilon), -1)
    return np.where(allowed, np.log(np.maximum(probs, tiny)), MASKED)


def masked_logits(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``logits`` ``[B, n]`` with those ``mask`` ``[B, n]`` forbids (0) at :data:`~volley.spaces.MASKED`."""
    return np.where(mask != 0, logits, MASKED)


LogProbFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (distribution inputs, actions) -> log π(a)

DrawFn = Callable[[np.ndarray, RandomStreams, bool], np.ndarray]  # (dist inputs, streams, explore) -> actions


class Head(NamedTuple):
    """An action distribution in numpy, from its inputs ``[B, ...]``: each environment's draw (or,
    without ``explore``, the most likely action) and a fragment's log-probabilities. Every network
    acts through one, after its forward pass in numpy or in torch: sampling is one function."""

    draw: DrawFn
    log_prob: LogProbFn


def categorical_head() -> Head:
    """Categorical over logits ``[..., n]``: Gumbel-max draws, log-softmax log-probabilities."""
    def draw(logits: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        return gumbel_max(logits, streams) if explore else logits.argmax(-1)
    return Head(draw, lambda logits, actions: pick(log_softmax(logits), actions))


def gaussian_head(log_std: np.ndarray | None) -> Head:
    """Diagonal Gaussian: inputs are the means ``[..., d]`` and ``log_std`` ``[d]`` is fixed (volley's
    own networks), or with ``log_std`` None the inputs hold the means then the log-stds ``[..., 2d]``
    (RLlib's DiagGaussian, what a custom model outputs)."""
    if log_std is None:
        def split(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            dim = inputs.shape[-1] // 2  # slices, not np.split: a step's draw costs a few µs less
            return inputs[..., :dim], inputs[..., dim:]

        def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
            mean, log_stds = split(inputs)
            return mean + np.exp(log_stds) * streams.normal(mean.shape[-1]) if explore else mean

        def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
            mean, log_stds = split(inputs)
            z = (actions - mean) / np.exp(log_stds)
            return (-0.5 * z * z - log_stds).sum(-1) - np.float32(0.5 * mean.shape[-1] * np.log(2 * np.pi))
        return Head(draw, log_prob)
    log_std = log_std.astype(np.float64)
    std = np.exp(log_std).astype(np.float32)
    log_norm = np.float32(-(log_std.sum() + 0.5 * len(log_std) * np.log(2 * np.pi)))

    def draw_fixed(mean: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        return mean + std * streams.normal(len(std)) if explore else mean

    def log_prob_fixed(mean: np.ndarray, actions: np.ndarray) -> np.ndarray:
        z = (actions - mean) / std  # log N(a; mean, std) = -½‖z‖² - Σ log std - ½·d·log 2π
        return log_norm - np.float32(0.5) * (z * z).sum(-1)
    return Head(draw_fixed, log_prob_fixed)


def epsilon_greedy_head(epsilon: float, masked: bool = False) -> Head:
    """ε-greedy over Q-values ``[..., n]``: a uniformly random action with probability ε (drawn as a
    categorical, each environment's own noise), else the greedy one, which is also the mode. With
    ``masked``, Q-values at :data:`~volley.spaces.MASKED` are never drawn (see :func:`epsilon_greedy_logp`)."""
    def draw(q: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        return gumbel_max(epsilon_greedy_logp(q, epsilon, masked), streams) if explore else q.argmax(-1)
    return Head(draw, lambda q, actions: pick(epsilon_greedy_logp(q, epsilon, masked), actions))


def composite_head(layout: ActionLayout, log_std: np.ndarray | None) -> Head:
    """The product of a composite space's parts (:mod:`volley.spaces`): every categorical drawn at
    once on the padded view of the logits (Gumbel-max, padding at MASKED), the float Boxes' values
    as one diagonal Gaussian, their log-probabilities summed. ``log_std`` as :func:`gaussian_head`:
    volley's network's, or None where the inputs hold the log-stds (a custom model's)."""
    where = layout.inputs(log_stds=log_std is None)
    num, widest = layout.padded.shape
    categorical, gaussian = layout.categorical_columns, layout.gaussian_columns
    half_log_2pi = np.float32(0.5 * layout.dims * np.log(2 * np.pi))

    def padded_logits(inputs: np.ndarray) -> np.ndarray:  # [..., K, widest]
        logits = inputs[..., where.logits]
        padding = np.full((*logits.shape[:-1], 1), MASKED, logits.dtype)
        return np.concatenate([logits, padding], -1)[..., layout.padded]

    def mean_and_log_std(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean = inputs[..., where.means]
        if where.log_stds is not None:
            return mean, inputs[..., where.log_stds]
        assert log_std is not None
        return mean, np.broadcast_to(log_std, mean.shape)

    def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        actions = np.empty((len(inputs), layout.width), layout.dtype)
        if num:
            logits = padded_logits(inputs)
            noise = streams.gumbel(num * widest).reshape(-1, num, widest) if explore else 0.0
            actions[:, categorical] = (logits + noise).argmax(-1)
        if layout.dims:
            mean, log_stds = mean_and_log_std(inputs)
            actions[:, gaussian] = mean + np.exp(log_stds) * streams.normal(layout.dims) if explore else mean
        return actions

    def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        total = np.zeros(inputs.shape[:-1], np.float32)
        if num:
            total += pick(log_softmax(padded_logits(inputs)), actions[..., categorical]).sum(-1)
        if layout.dims:
            mean, log_stds = mean_and_log_std(inputs)
            z = (actions[..., gaussian] - mean) / np.exp(log_stds)
            total += (-0.5 * z * z - log_stds).sum(-1) - half_log_2pi
        return total
    return Head(draw, log_prob)


def action_head(layout: ActionLayout, log_std: np.ndarray | None) -> Head:
    """The numpy head of a policy over ``layout``'s space: categorical for ``Discrete``, Gaussian for a
    one-dimensional float ``Box`` (today's two fast paths), else the product of the parts."""
    if layout.kind == "discrete":
        return categorical_head()
    if layout.kind == "box":
        return gaussian_head(log_std)
    return composite_head(layout, log_std)


def squashed_gaussian_head(uniform: bool) -> Head:
    """SAC's squashed Gaussian over inputs ``[..., 2d]`` (the means, then the log-stds, clipped to
    [LOG_STD_MIN, LOG_STD_MAX]): ``tanh(mean + std·ε)`` when exploring, else ``tanh(mean)``; with
    ``uniform`` (the warm-up before learning starts) actions uniform in (-1, 1) when exploring,
    of density ``2^-d``."""
    def split(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dim = inputs.shape[-1] // 2
        return inputs[..., :dim], np.clip(inputs[..., dim:], LOG_STD_MIN, LOG_STD_MAX)

    def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        mean, log_std = split(inputs)
        if not explore:
            return np.tanh(mean)
        if uniform:
            return uniform_actions(streams, mean.shape[-1])
        return np.tanh(mean + np.exp(log_std) * streams.normal(mean.shape[-1]))

    def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        if uniform:
            return np.full(actions.shape[:-1], -actions.shape[-1] * np.log(2.0), np.float32)
        return squashed_gaussian_logp(*split(inputs), actions)
    return Head(draw, log_prob)

