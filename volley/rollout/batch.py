"""Batches: a dict of equal-length numpy arrays, the unit that moves between processes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

SEQ_LENS = "seq_lens"
STATE_IN = "state_in_"


def is_per_sequence(key: str) -> bool:
    """Whether a batch column holds a row per sequence (``seq_lens``, ``state_in_k``), not per step."""
    return key == SEQ_LENS or key.startswith(STATE_IN)


class Batch(dict[str, np.ndarray]):
    """Columns such as ``obs`` ``[B, *obs_shape]``, ``actions``, ``advantages``, all of length B:
    one row per step. A recurrent policy's batch also has a row per sequence in ``seq_lens`` and
    ``state_in_0``, ``state_in_1``, ... (RLlib's columns; :mod:`volley.rollout.sequences`)."""

    def __len__(self) -> int:  # steps, not columns
        return next((len(column) for key, column in self.items() if not is_per_sequence(key)), 0)

    @property
    def count(self) -> int:
        """Rows, as RLlib's ``SampleBatch.count`` (callbacks read it)."""
        return len(self)

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        """Stack batches with the same columns end to end."""
        return Batch({key: np.concatenate([b[key] for b in batches]) for key in batches[0]})

    def slice(self, index: np.ndarray | slice) -> Batch:
        """These rows of a batch of steps (``volley.rollout.sequences.truncated`` cuts a recurrent one)."""
        assert SEQ_LENS not in self, "a recurrent batch is cut by whole sequences"
        return Batch({key: value[index] for key, value in self.items()})

    @contextmanager
    def rows_to_edit(self, first: int, last: int) -> Iterator[Batch]:
        """Rows ``first:last`` of a batch of steps, as a Batch of views for a callback to change
        (``on_postprocess_trajectory``'s ``postprocessed_batch``): a change made in place is made
        here; when the block ends, a column replaced is written back into these rows, and a column
        added is zero in the other rows."""
        rows = self.slice(slice(first, last))
        views = dict(rows)
        yield rows
        for key, column in rows.items():
            if column is views.get(key):
                continue
            column = np.asarray(column)
            if key not in self:
                self[key] = np.zeros((len(self), *column.shape[1:]), column.dtype)
            self[key][first:last] = column

    @staticmethod
    def minibatches(columns: Mapping[str, Any], size: int, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
        """One epoch of minibatches of ``columns`` (numpy arrays or torch tensors of one length):
        the rows shuffled, in chunks of ``size``; a last, smaller chunk keeps every row in play.

        Each column is gathered once an epoch and each chunk is a slice of it (a view): a gather
        per chunk and column costs ~10 µs, a slice ~1 µs, and an SGD step on a small network
        takes about a millisecond in all."""
        num_rows = len(next(iter(columns.values())))
        order = rng.permutation(num_rows)
        shuffled = {key: column[order] for key, column in columns.items()}
        for start in range(0, num_rows, size):
            yield {key: column[start:start + size] for key, column in shuffled.items()}
