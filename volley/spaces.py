"""Action spaces as a product of parts: how actions travel in batches, what a network outputs
for them, and how they reach the environment.

Every action space volley's policies take is a product of *leaves*: ``Discrete``,
``MultiDiscrete``, ``MultiBinary`` and ``Box`` (any shape), nested in ``Tuple`` and ``Dict``
spaces as RLlib's nested action spaces are. A leaf is one or more categoricals (a
``Discrete``; each element of a ``MultiDiscrete``, ``MultiBinary`` or integer ``Box``) or a
block of Gaussian values (a float ``Box``). A composite action's log-probability is the sum of
its parts', and its entropy and KL likewise (:mod:`volley.action_dists`, and the numpy heads
of :mod:`volley.heads`).

Actions in batches (the flat layout), ``B`` rows:

- ``Discrete``: ``[B]`` int64, the index from 0 (the space's ``start`` is added for the env);
- a one-dimensional float ``Box``: ``[B, d]`` float32;
- any other space: ``[B, W]``, the leaves' columns side by side in the space's order (a
  ``Dict``'s keys in its own order, depth first): one column per categorical (its index from
  0: the ``start`` of a ``Discrete`` or ``MultiDiscrete``, the ``low`` of an integer ``Box``,
  are added for the env) and ``prod(shape)`` columns for a float ``Box`` (row-major). int64,
  or float32 when a float ``Box`` is among the leaves (the indices are exact in it). This is
  RLlib's flattened action, which custom action distributions read
  (``actions[:, 0]``, ``actions[:, 1]`` for ``Tuple(Discrete, Discrete)``).

A network's outputs, the inputs of the action distribution (RLlib's sizes), leaf after leaf:
one logit per choice of every categorical (``Discrete(n)``: n; ``MultiDiscrete``:
``sum(nvec)``; ``MultiBinary``: 2 per element, a categorical over {0, 1} as sb3-contrib counts
its masks; an integer ``Box``: ``high - low + 1`` per element, RLlib's), and for a float
``Box`` its ``d`` means, then (a custom model's outputs, RLlib's ``DiagGaussian``) its ``d``
log-stds; volley's own networks learn a state-independent log-std instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from volley.errors import ConfigError

# a masked choice's logit: the dtype's minimum, not -inf, so that entropies and KLs stay finite
# (0 · min is 0, where 0 · -inf is NaN); its probability is exactly 0
MASKED = np.finfo(np.float32).min

TAKES = "Discrete, MultiDiscrete, MultiBinary, Box, and Tuple or Dict of these"


@dataclass(frozen=True)
class Leaf:
    """One part of an action space that is not a Tuple or Dict."""

    space: gym.Space
    categories: tuple[int, ...]  # each of its categoricals' choices; () for a float Box
    offset: np.ndarray  # added to each categorical's index for the environment (start, low)
    dims: int  # a float Box's values (0 for categoricals)

    @property
    def columns(self) -> int:
        """Its columns in the flat actions."""
        return len(self.categories) or self.dims


def _leaf(space: gym.Space, where: str) -> Leaf:
    """The leaf ``space`` is; a ConfigError naming it (``where``: the whole space and its place there)
    if volley cannot take it."""
    none = np.zeros(0, np.int64)
    if isinstance(space, gym.spaces.Discrete):
        return Leaf(space, (int(space.n),), np.array([int(space.start)]), 0)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return Leaf(space, tuple(int(n) for n in space.nvec.ravel()), np.asarray(space.start).ravel().astype(np.int64), 0)
    if isinstance(space, gym.spaces.MultiBinary):
        size = int(np.prod(space.shape))
        return Leaf(space, (2,) * size, np.zeros(size, np.int64), 0)
    if isinstance(space, gym.spaces.Box) and space.dtype.kind in "iu":
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise ConfigError(f"{where}action space {space} is an integer Box without finite bounds: volley "
                              "takes its elements as categoricals from low to high")
        sizes = (space.high - space.low + 1).ravel()
        return Leaf(space, tuple(int(n) for n in sizes), space.low.ravel().astype(np.int64), 0)
    if isinstance(space, gym.spaces.Box) and space.dtype.kind == "f":
        return Leaf(space, (), none, int(np.prod(space.shape)))
    raise ConfigError(f"{where}action space {space} is not supported: volley's policies take {TAKES}")


def _leaves(space: gym.Space, whole: gym.Space, path: str = "") -> Iterator[Leaf]:
    if isinstance(space, gym.spaces.Dict):
        for key, subspace in space.spaces.items():
            yield from _leaves(subspace, whole, f"{path}[{key!r}]")
    elif isinstance(space, gym.spaces.Tuple):
        for i, subspace in enumerate(space.spaces):
            yield from _leaves(subspace, whole, f"{path}[{i}]")
    else:
        yield _leaf(space, f"in {whole}, the part {path}: " if path else "")


class Inputs(NamedTuple):
    """Where each part of a distribution's inputs sits (index arrays into their last axis)."""

    width: int
    logits: np.ndarray  # [L]: every categorical's logits, leaf after leaf
    means: np.ndarray  # [D]: every float Box's means
    log_stds: np.ndarray | None  # [D]: their log-stds, where the inputs hold them (custom models)


class ActionLayout:
    """An action space as leaves: the flat actions' columns, the distribution inputs' widths, the
    padded view that draws every categorical at once, and the way back to the space's structure."""

    def __init__(self, space: gym.Space) -> None:
        self.space = space
        self.leaves = list(_leaves(space, space))
        self.kind = ("discrete" if isinstance(space, gym.spaces.Discrete) else
                     "box" if isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and space.dtype.kind == "f"
                     else "composite")  # the first two are today's fast paths: actions [B] and [B, d]
        self.categories = tuple(n for leaf in self.leaves for n in leaf.categories)  # K categoricals
        self.num_logits = sum(self.categories)  # L
        self.dims = sum(leaf.dims for leaf in self.leaves)  # D Gaussian values
        self.width = sum(leaf.columns for leaf in self.leaves)  # W flat action columns
        self.dtype = np.dtype(np.float32 if self.dims else np.int64)
        columns = np.arange(self.width)
        is_categorical = np.concatenate([np.full(leaf.columns, bool(leaf.categories)) for leaf in self.leaves])
        self.categorical_columns, self.gaussian_columns = columns[is_categorical], columns[~is_categorical]
        # [K, max n] indices into the logits (a padding entry points one past them): every categorical
        # of a composite drawn, scored and summed at once, where a loop would take one call per part
        widest = max(self.categories, default=0)
        starts = self.starts = np.cumsum((0, *self.categories))[:-1]  # each categorical's first logit
        self.padded = np.full((len(self.categories), widest), self.num_logits, np.int64)
        for k, (start, n) in enumerate(zip(starts, self.categories, strict=True)):
            self.padded[k, :n] = np.arange(start, start + n)
        self.offsets = np.concatenate([leaf.offset for leaf in self.leaves]) if self.categories else np.zeros(0)

    def inputs(self, log_stds: bool) -> Inputs:
        """Where the logits, means (and with ``log_stds``, a custom model's log-stds) sit in the inputs."""
        logits: list[int] = []
        means: list[int] = []
        stds: list[int] = []
        at = 0
        for leaf in self.leaves:
            if leaf.categories:
                logits += range(at, at + sum(leaf.categories))
                at += sum(leaf.categories)
            else:
                means += range(at, at + leaf.dims)
                stds += range(at + leaf.dims, at + 2 * leaf.dims) if log_stds else []
                at += leaf.dims * (2 if log_stds else 1)
        return Inputs(at, np.array(logits, np.int64), np.array(means, np.int64),
                      np.array(stds, np.int64) if log_stds else None)

    def describe_inputs(self, log_stds: bool) -> str:
        """What the inputs are, for error messages."""
        if self.kind == "discrete":
            return "one logit per action"
        if self.kind == "box" and log_stds:
            return f"a Gaussian's {self.dims} means, then its {self.dims} log-stds"
        parts = [f"{sum(leaf.categories)} logits" if leaf.categories else
                 f"{leaf.dims} means" + (f" and {leaf.dims} log-stds" if log_stds else "") for leaf in self.leaves]
        return f"for {self.space}: {', '.join(parts)}"

    def mask_width(self) -> int:
        """How many entries an action mask for this space has: one per logit; a ConfigError for a
        space with a float Box among its leaves, whose values a mask cannot forbid."""
        if self.dims:
            raise ConfigError(f"an action mask needs discrete actions (Discrete, MultiDiscrete, MultiBinary, "
                              f"and Tuple or Dict of these), but the action space is {self.space}")
        return self.num_logits

    def mask_problem(self, masks: np.ndarray, acting: np.ndarray) -> tuple[int, str] | None:
        """The first row of ``masks`` ``[N, L]`` that is not a mask (an entry other than 0 and 1), or of
        the rows ``acting`` ``[N]`` that allows no choice for one of the categoricals, and why; None
        when all are sound: the usual case, a few numpy calls a step."""
        if np.count_nonzero(masks * (masks - 1)):  # 0 only where every entry is 0 or 1
            bad = ((masks != 0) & (masks != 1)).any(-1)
            return int(np.flatnonzero(bad)[0]), "an action mask holds 0 and 1 (False and True) only"
        allows = (masks.any(-1) if len(self.categories) == 1 else
                  np.maximum.reduceat(masks, self.starts, axis=-1).all(-1))  # each categorical's largest entry
        if allows.all():
            return None
        empty = acting & ~allows
        if not empty.any():
            return None
        return int(np.flatnonzero(empty)[0]), "it allows no action" + (
            "" if len(self.categories) == 1 else " for one of the action's parts")

    # -- to the environment ------------------------------------------------------------------

    def to_env(self, actions: np.ndarray, normalize: bool, clip: bool) -> Any:
        """What the environments receive for flat ``actions`` ``[N, W]``: each leaf in its space's
        shape and dtype (categorical indices plus their offsets; float Boxes rescaled from [-1, 1]
        with ``normalize``, else clipped to their bounds with ``clip``); for a Tuple or Dict
        space, a list of ``N`` structured actions, one per environment."""
        actions = actions.reshape(len(actions), -1)
        parts, at = [], 0
        for leaf in self.leaves:
            values = actions[:, at:at + leaf.columns]
            at += leaf.columns
            shape = (len(actions), *(leaf.space.shape or ()))
            if leaf.categories:
                parts.append((values.astype(np.int64) + leaf.offset).reshape(shape).astype(leaf.space.dtype))
                continue
            assert isinstance(leaf.space, gym.spaces.Box)
            low, high = leaf.space.low.ravel(), leaf.space.high.ravel()
            if normalize:
                values = low + (np.clip(values, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
            elif clip:
                values = np.minimum(np.maximum(values, low), high)
            parts.append(values.reshape(shape).astype(leaf.space.dtype))
        if len(self.leaves) == 1 and not isinstance(self.space, (gym.spaces.Tuple, gym.spaces.Dict)):
            return parts[0]
        boxes = [not leaf.categories for leaf in self.leaves]  # a Box leaf's row as an array, even of shape ()
        return [_structured(self.space, iter([np.asarray(part[i]) if box else part[i]
                                              for part, box in zip(parts, boxes, strict=True)]))
                for i in range(len(actions))]

    def check_normalizable(self, env: str) -> None:
        """A ConfigError unless ``normalize_actions`` can rescale every float Box (finite bounds)."""
        for leaf in self.leaves:
            space = leaf.space
            if leaf.dims and not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):  # type: ignore[attr-defined]
                raise ConfigError(f"normalize_actions=True needs finite action bounds, but environment '{env}' "
                                  f"has {space}; set normalize_actions=False")


def _structured(space: gym.Space, leaves: Iterator[Any]) -> Any:
    """One environment's action in the structure of ``space``, from its leaves in order."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _structured(subspace, leaves) for key, subspace in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_structured(subspace, leaves) for subspace in space.spaces)
    return next(leaves)


_LAYOUTS: dict[int, tuple[gym.Space, ActionLayout]] = {}


def action_layout(space: gym.Space) -> ActionLayout:
    """The layout of ``space``, made once per space object (workers convert actions every step)."""
    cached = _LAYOUTS.get(id(space))
    if cached is None or cached[0] is not space:
        cached = _LAYOUTS[id(space)] = (space, ActionLayout(space))
    return cached[1]
