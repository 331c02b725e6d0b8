"""Batches: a dict of equal-length numpy arrays, the unit that moves between processes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class Batch(dict[str, np.ndarray]):
    """Columns such as ``obs`` ``[B, *obs_shape]``, ``actions``, ``advantages``, all of length B."""

    def __len__(self) -> int:  # rows, not columns
        return len(next(iter(self.values()))) if dict.__len__(self) else 0

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        """Stack batches with the same columns end to end."""
        return Batch({key: np.concatenate([b[key] for b in batches]) for key in batches[0]})

    def slice(self, index: np.ndarray | slice) -> Batch:
        return Batch({key: value[index] for key, value in self.items()})

    @staticmethod
    def minibatch_indices(num_rows: int, size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """Shuffled row indices in chunks of ``size``; a last, smaller chunk keeps every row in play."""
        order = rng.permutation(num_rows)
        for start in range(0, num_rows, size):
            yield order[start:start + size]
