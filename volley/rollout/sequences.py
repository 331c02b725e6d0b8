"""Sequences: how a recurrent policy's batch is cut, stored and replayed (design.md, "Sequences").

A worker acts one step at a time, carrying each environment's recurrent state. So that the
learner can replay exactly what the worker computed, the worker cuts its fragment into
**sequences**, each the steps of one environment in time order, starting where
:func:`sequence_starts` says (the environment's first step in the fragment, the first
step of each episode, and every ``max_seq_len`` steps in between), and stores with the
batch the state each sequence started from (:func:`stored_states`): RLlib's columns
``seq_lens`` ``[S]`` and ``state_in_0``, ``state_in_1``, ... ``[S, ...]``, one row per
sequence, beside the usual one row per step. A sequence never crosses an episode start or a
fragment's end, so its steps are the worker's steps from that state.

The learner sees a batch only through :class:`Sequences`, which this module alone builds:
every step column padded to ``[S, T]`` (``T`` the longest sequence; a sequence's padding
repeats its last step, so every value stays finite), flattened to RLlib's ``[S·T, ...]``
rows, with a mask; minibatches of whole sequences; and masked means, so padding counts in no
loss, KL or statistic. A feed-forward policy's batch is the same view with one step per
row and no mask, exactly the batch as it was (the same shuffles of the same rows).

Arrays or tensors alike: the view is built from numpy arrays and :meth:`Sequences.map` turns
them into the learner's tensors (this module never imports torch: workers import it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from volley.rollout.batch import SEQ_LENS, STATE_IN, Batch, is_per_sequence

PREVIOUS = ("prev_actions", "prev_rewards")  # what a network with lstm_use_prev_* reads per step

def state_keys(batch: Mapping[str, Any]) -> list[str]:
    """``state_in_0``, ``state_in_1``, ... in order ([] for a feed-forward policy's batch)."""
    return [f"{STATE_IN}{k}" for k in range(sum(key.startswith(STATE_IN) for key in batch))]


def sequence_starts(valid: np.ndarray, ends: np.ndarray, max_seq_len: int) -> np.ndarray:
    """Which rows of an env-major batch start a sequence, ``[rows]`` bool.

    ``valid`` ``[N, T]`` says which of each environment's fragment steps are rows of the batch,
    ``ends`` ``[N, T]`` which steps ended an episode. A row starts a sequence when it is its
    environment's first, when the row before it ended an episode, and every ``max_seq_len``
    rows after such a start.
    """
    env = np.broadcast_to(np.arange(len(valid))[:, None], valid.shape)[valid]
    ended = ends[valid]
    fresh = np.ones(len(env), bool)
    fresh[1:] = (env[1:] != env[:-1]) | ended[:-1]
    index = np.arange(len(env))
    since = index - np.maximum.accumulate(np.where(fresh, index, 0))  # rows since the last fresh start
    return since % max_seq_len == 0


def stored_states(valid: np.ndarray, ends: np.ndarray, max_seq_len: int,
                  states: list[list[np.ndarray]]) -> dict[str, np.ndarray]:
    """The batch columns of a fragment's sequences: ``seq_lens`` ``[S]`` and the state each
    started from, ``state_in_k`` ``[S, ...]``. ``states[t]`` is the state the worker acted
    with at step ``t`` (each array ``[N, ...]``)."""
    starts = sequence_starts(valid, ends, max_seq_len)
    env, step = np.nonzero(valid)  # each row's environment and fragment step, in row order
    first = np.flatnonzero(starts)
    columns = {SEQ_LENS: np.diff(np.append(first, len(starts))).astype(np.int32)}
    for k in range(len(states[0]) if states else 0):
        columns[f"{STATE_IN}{k}"] = np.array([states[t][k][j] for t, j in zip(step[first].tolist(),
                                                                             env[first].tolist(), strict=True)])
    return columns


def truncated(batch: Batch, rows: int) -> Batch:
    """The first ``rows`` steps of ``batch``; of a recurrent one, the sequences they belong to, the
    last one shortened (a prefix of a sequence is one: it starts from the same state)."""
    if SEQ_LENS not in batch:
        return batch.slice(slice(0, rows))
    ends = np.cumsum(batch[SEQ_LENS])
    kept = int(np.searchsorted(ends, rows, side="left")) + 1 if rows else 0
    seq_lens = batch[SEQ_LENS][:kept].copy()
    if kept:
        seq_lens[-1] -= ends[kept - 1] - rows
    return Batch({key: seq_lens if key == SEQ_LENS else column[:kept] if is_per_sequence(key) else column[:rows]
                  for key, column in batch.items()})


class Sequences:
    """A batch as the learner reads it: step columns (``view["obs"]``) of one row per step, or for a
    recurrent policy of ``S`` padded sequences ``[S·T, ...]``; the state each sequence starts from
    (``state``, each ``[S, ...]``), ``seq_lens`` ``[S]`` and ``mask`` ``[S·T]`` (1.0 on real steps;
    all three empty or None for a feed-forward batch). Build it with :meth:`of`."""

    def __init__(self, columns: dict[str, Any], state: list[Any], seq_lens: Any = None,
                 mask: Any = None, lengths: np.ndarray | None = None) -> None:
        self.columns, self.state, self.seq_lens, self.mask = columns, state, seq_lens, mask
        self.lengths = lengths  # seq_lens as numpy, wherever seq_lens is
        # real steps: the rows of a feed-forward view
        self.steps = int(lengths.sum()) if lengths is not None else len(next(iter(columns.values())))

    @classmethod
    def of(cls, batch: Mapping[str, np.ndarray], keys: tuple[str, ...] | None = None) -> Sequences:
        """The view of ``batch`` (its step columns ``keys``, default all), padded once here."""
        keys = keys if keys is not None else tuple(key for key in batch if not is_per_sequence(key))
        keys += tuple(key for key in PREVIOUS if key in batch and key not in keys)
        if SEQ_LENS not in batch:
            return cls({key: batch[key] for key in keys}, [])
        seq_lens = np.asarray(batch[SEQ_LENS])
        steps = int(seq_lens.max()) if len(seq_lens) else 1  # T: RLlib's dynamic max
        first = np.cumsum(seq_lens) - seq_lens
        offset = np.arange(steps)
        index = (first[:, None] + np.minimum(offset, seq_lens[:, None] - 1)).reshape(-1)  # padding: the last step
        mask = (offset < seq_lens[:, None]).reshape(-1).astype(np.float32)
        return cls({key: batch[key][index] for key in keys}, [batch[key] for key in state_keys(batch)],
                   seq_lens, mask, seq_lens)

    def __getitem__(self, key: str) -> Any:
        return self.columns[key]

    def map(self, fn: Callable[[Any], Any]) -> Sequences:
        """The same view with ``fn`` applied to every array (``torch.as_tensor`` for the learner)."""
        return Sequences({key: fn(column) for key, column in self.columns.items()}, [fn(s) for s in self.state],
                         None if self.seq_lens is None else fn(self.seq_lens),
                         None if self.mask is None else fn(self.mask), self.lengths)

    @property
    def inputs(self) -> dict[str, Any]:
        """What the network reads, as keyword arguments of ``Policy.outputs`` (and ``forward``,
        ``distribution``, ``value``): observations, and for a recurrent policy the states,
        ``seq_lens`` and where stored the previous actions and rewards."""
        if self.seq_lens is None:
            return {"obs": self.columns["obs"]}
        prev = tuple(self.columns[key] for key in PREVIOUS) if PREVIOUS[0] in self.columns else None
        return {"obs": self.columns["obs"], "state": self.state, "seq_lens": self.seq_lens, "prev": prev}

    def mean(self, values: Any) -> Any:
        """The mean of per-row ``values`` over the real steps (padding weighs nothing)."""
        return values.mean() if self.mask is None else (values * self.mask).sum() / self.steps

    def sum(self, values: Any) -> Any:
        """The sum of per-row ``values`` over the real steps."""
        return values.sum() if self.mask is None else (values * self.mask).sum()

    def standardized(self, values: Any) -> Any:
        """``(values - mean) / (std + 1e-8)`` over the real steps (std with Bessel's correction, as
        ``torch.std``'s default)."""
        if self.mask is None:
            return (values - values.mean()) / (values.std() + 1e-8)
        centered = values - self.mean(values)
        std = (self.sum(centered * centered) / max(self.steps - 1, 1)) ** 0.5
        return centered / (std + 1e-8)

    def real(self, values: Any) -> Any:
        """Per-row ``values`` of the real steps only, in the batch's order."""
        return values if self.mask is None else values[self.mask > 0]

    def every(self, k: int) -> Sequences:
        """Every ``k``-th row, or of a recurrent batch every ``k``-th sequence (TRPO's sub-sampling)."""
        if k == 1:
            return self
        if self.seq_lens is None:
            return Sequences({key: column[::k] for key, column in self.columns.items()}, [])
        return self._sequences(slice(None, None, k))

    def _sequences(self, which: slice | np.ndarray) -> Sequences:
        """The sequences ``which`` (a slice or an index array) of this view, padding as it is."""
        assert self.lengths is not None and self.mask is not None
        count = len(self.lengths)
        steps = len(self.mask) // count
        columns = {key: column.reshape(count, steps, *column.shape[1:])[which].reshape(-1, *column.shape[1:])
                   for key, column in self.columns.items()}
        return Sequences(columns, [s[which] for s in self.state], self.seq_lens[which],
                         self.mask.reshape(count, steps)[which].reshape(-1), self.lengths[which])

    def minibatches(self, size: int, rng: np.random.Generator) -> Iterator[Sequences]:
        """One epoch of minibatches: the rows shuffled in chunks of ``size`` (a last, smaller chunk
        keeps every row in play), or of a recurrent batch whole sequences shuffled, a minibatch
        being those that start within each ``size`` steps of the shuffled order (every
        minibatch about ``size`` real steps; as many minibatches as chunks of rows, when
        ``size >= max_seq_len``)."""
        if self.seq_lens is None:
            for chunk in Batch.minibatches(self.columns, size, rng):
                yield Sequences(chunk, [])
            return
        assert self.lengths is not None
        order = rng.permutation(len(self.lengths))
        shuffled = self._sequences(order)
        lengths = self.lengths[order]
        bucket = (np.cumsum(lengths) - lengths) // size
        bounds = np.flatnonzero(np.diff(bucket)) + 1
        for first, last in zip([0, *bounds.tolist()], [*bounds.tolist(), len(order)], strict=True):
            yield shuffled._sequences(slice(first, last))
