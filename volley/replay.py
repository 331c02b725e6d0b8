"""Experience replay: a uniform ring buffer, prioritized replay, and n-step returns.

The buffers are plain classes over numpy arrays: the synchronous DQN learner owns
one, and the replay-shard actors (``volley/engines/async_actors.py``) host the same class.
Rows arrive in chunks (a worker's batch) and leave as a :class:`Batch` of sampled
rows plus their buffer ``indices`` and importance ``weights``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np

from volley.config import AlgorithmConfig
from volley.rollout.batch import Batch


class ReplayBuffer:
    """Uniform replay: the newest ``capacity`` rows in a ring of numpy columns.

    Columns are allocated on the first :meth:`add`, with that chunk's dtypes and row shapes.
    """

    def __init__(self, capacity: int, rng: np.random.Generator) -> None:
        self.capacity = capacity
        self.rng = rng
        self.columns: dict[str, np.ndarray] = {}  # each [capacity, *row_shape]
        self.size = 0
        self.next_index = 0  # the slot the next row goes to: the oldest row once full

    def __len__(self) -> int:
        return self.size

    def add(self, rows: Mapping[str, np.ndarray]) -> np.ndarray:
        """Append a chunk of rows, overwriting the oldest once full; returns the slots written."""
        count = len(next(iter(rows.values())))
        if not self.columns:
            self.columns = {key: np.empty((self.capacity, *value.shape[1:]), value.dtype)
                            for key, value in rows.items()}
        keep = min(count, self.capacity)  # of a chunk larger than the buffer, its newest rows
        slots = (self.next_index + np.arange(keep)) % self.capacity
        for key, column in self.columns.items():
            column[slots] = rows[key][count - keep:]
        self.next_index = (self.next_index + keep) % self.capacity
        self.size = min(self.size + keep, self.capacity)
        return slots

    def sample(self, size: int) -> Batch:
        """``size`` rows drawn uniformly with replacement, with their ``indices`` and unit ``weights``."""
        indices = self.rng.integers(self.size, size=size)
        return self._rows(indices, np.ones(size, np.float32))

    def oldest_first(self) -> np.ndarray:
        """The slots holding rows, oldest row first."""
        start = self.next_index if self.size == self.capacity else 0
        return (start + np.arange(self.size)) % self.capacity

    def state(self) -> dict[str, np.ndarray]:
        """The rows, oldest first, as columns (what a checkpoint stores)."""
        slots = self.oldest_first()
        return {key: column[slots] for key, column in self.columns.items()}

    def load_state(self, columns: Mapping[str, np.ndarray]) -> None:
        """Append rows saved by :meth:`state` (into any capacity: the newest rows fit)."""
        if columns and len(next(iter(columns.values()))):
            self.add(columns)

    def _rows(self, indices: np.ndarray, weights: np.ndarray) -> Batch:
        return Batch({**{key: column[indices] for key, column in self.columns.items()},
                      "indices": indices, "weights": weights})


class SumTree:
    """Sums over a complete binary tree of ``capacity`` non-negative leaves.

    Setting leaves and finding the leaf where a prefix sum falls both take O(log n),
    vectorised over a batch. Node ``1`` is the root, node ``i`` has children ``2i`` and
    ``2i + 1``, and the leaves are the last ``leaves`` nodes.
    """

    def __init__(self, capacity: int) -> None:
        self.depth = (capacity - 1).bit_length()  # levels below the root
        self.leaves = 1 << self.depth  # the power of two >= capacity
        self.nodes = np.zeros(2 * self.leaves)

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[indices + self.leaves]

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        nodes = indices + self.leaves
        self.nodes[nodes] = values
        for _ in range(self.depth):  # a level at a time, leaves to root
            nodes = np.unique(nodes // 2)
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find_prefix(self, targets: np.ndarray) -> np.ndarray:
        """For each target in ``[0, total)``, the leaf ``i`` with ``sum(leaves[:i]) <= target <
        sum(leaves[:i + 1])``."""
        nodes = np.ones(len(targets), np.int64)
        remaining = np.array(targets, np.float64)
        for _ in range(self.depth):
            left = 2 * nodes
            go_right = remaining >= self.nodes[left]
            remaining -= np.where(go_right, self.nodes[left], 0.0)
            nodes = left + go_right
        return nodes - self.leaves


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al., 2016).

    Row ``i`` is drawn with probability ``P(i) = p_i^α / Σ_k p_k^α``, where the priority
    ``p_i = |δ_i| + eps`` comes from its last TD error ``δ_i``; new rows get the largest
    priority seen so far, so each is replayed soon at least once. The importance weight
    ``w_i = (N · P(i))^-β`` undoes the bias of drawing by priority; like the paper, weights
    are divided by the largest one (the buffer's, ``(N · min P)^-β``) so that they only
    ever scale an update down. A batch is stratified: one draw from each of ``size``
    equal slices of the total priority.
    """

    def __init__(self, capacity: int, rng: np.random.Generator, alpha: float, beta: float,
                 eps: float) -> None:
        super().__init__(capacity, rng)
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.tree = SumTree(capacity)  # p_i^α
        self.max_priority = 1.0  # the largest p_i so far

    def add(self, rows: Mapping[str, np.ndarray]) -> np.ndarray:
        slots = super().add(rows)
        self.tree.set(slots, np.full(len(slots), self.max_priority**self.alpha))
        return slots

    def sample(self, size: int) -> Batch:
        """``size`` rows drawn by priority, with their ``indices`` and normalised importance ``weights``."""
        total = self.tree.total
        targets = (np.arange(size) + self.rng.random(size)) * (total / size)
        # float rounding in the sums can send a target past the last row; keep it on that row
        indices = np.minimum(self.tree.find_prefix(targets), self.size - 1)
        probs = self.tree.get(indices) / total
        min_prob = self.tree.get(np.arange(self.size)).min() / total  # O(N), cheap next to an update
        weights = (probs / min_prob) ** -self.beta  # (N·P(i))^-β / (N·min P)^-β
        return self._rows(indices, weights.astype(np.float32))

    def state(self) -> dict[str, np.ndarray]:
        """The rows, oldest first, plus ``priority_alpha`` (each row's ``p_i^α``, exactly) and
        ``max_priority`` (one value)."""
        return {**super().state(), "priority_alpha": self.tree.get(self.oldest_first()),
                "max_priority": np.array([self.max_priority])}

    def load_state(self, columns: Mapping[str, np.ndarray]) -> None:
        rows = dict(columns)
        priority_alpha, max_priority = rows.pop("priority_alpha", None), rows.pop("max_priority", None)
        if max_priority is not None:
            self.max_priority = max(self.max_priority, float(max_priority[0]))
        if not rows or not len(next(iter(rows.values()))):
            return
        slots = self.add(rows)
        if priority_alpha is not None:  # rows saved from a uniform buffer keep the new-row priority
            self.tree.set(slots, priority_alpha[len(priority_alpha) - len(slots):])

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priorities of rows ``indices`` (as returned by :meth:`sample`) from their new TD errors."""
        priorities = np.abs(td_errors).astype(np.float64) + self.eps
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.set(indices, priorities**self.alpha)


@dataclass(frozen=True)
class Prioritization:
    """The settings of proportional prioritized replay (:class:`PrioritizedReplayBuffer`)."""

    alpha: float  # how much priorities count (0 is uniform)
    beta: float  # importance-weight exponent (1 corrects the bias fully)
    eps: float  # added to |TD error| so no row has priority 0


def make_replay_buffer(capacity: int, rng: np.random.Generator,
                       prioritization: Prioritization | None = None) -> ReplayBuffer:
    """A uniform buffer, or a prioritized one with ``prioritization`` (a learner's, or a shard's)."""
    if prioritization is None:
        return ReplayBuffer(capacity, rng)
    return PrioritizedReplayBuffer(capacity, rng, prioritization.alpha, prioritization.beta,
                                   prioritization.eps)


def n_step_returns(rewards: np.ndarray, terminated: np.ndarray, cuts: np.ndarray, gamma: float,
                   n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns over a time-major worker fragment (arrays ``[T, N]``).

    The window of step ``t`` sums ``m <= n`` rewards, ``R[t] = Σ_{k<m} γ^k r[t+k]``, and
    stops early after a cut (an episode end or the fragment's last step, which must be
    one). ``ends[t] = t + m - 1`` is the step whose next observation bootstraps the
    target ``R[t] + discounts[t] · max_a Q(s', a)``: ``discounts[t] = γ^m``, or 0 where
    the window ended in a termination. A truncation (a time limit) still bootstraps.

    Returns ``returns``, ``discounts`` (float32) and ``ends`` (int64), each ``[T, N]``.
    """
    steps = len(rewards)
    t = np.arange(steps).reshape((steps,) + (1,) * (rewards.ndim - 1))  # broadcasts over envs
    returns = np.zeros(rewards.shape, np.float32)
    ends = np.broadcast_to(t, rewards.shape).copy()
    running = np.ones(rewards.shape, bool)  # the window of step t has not passed a cut yet
    for k in range(n):
        later = np.minimum(np.arange(steps) + k, steps - 1)  # past the end only where not running
        returns += np.where(running, gamma**k * rewards[later], 0.0).astype(np.float32)
        ends = np.where(running, t + k, ends)
        running &= ~cuts[later]
    bootstraps = ~np.take_along_axis(terminated, ends, axis=0)
    discounts = (gamma ** (ends - t + 1) * bootstraps).astype(np.float32)
    return returns, discounts, ends


class NStepConfig(Protocol):
    """What :func:`n_step_columns` reads from an algorithm's config."""

    gamma: float
    n_step: int


def n_step_columns(columns: dict[str, np.ndarray], config: AlgorithmConfig) -> dict[str, np.ndarray]:
    """A worker fragment reduced to transitions ``(s, a, R, s', discount)`` with n-step returns
    ``R`` (:func:`n_step_returns`): the worker-side ``postprocess`` of DQN and Ape-X. The
    learner bootstraps them with its target network when it replays them."""
    cfg = cast(NStepConfig, config)
    returns, discounts, ends = n_step_returns(columns["rewards"], columns["terminated"], columns["cuts"],
                                              cfg.gamma, cfg.n_step)
    envs = np.arange(returns.shape[1])
    return {"obs": columns["obs"], "actions": columns["actions"], "returns": returns,
            "next_obs": columns["next_obs"][ends, envs], "discounts": discounts, "valid": columns["valid"]}
