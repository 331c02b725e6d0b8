"""Minibatches: every row once an epoch, in the order one permutation of the rng gives."""

import numpy as np
import pytest
import torch

from volley.rollout.batch import Batch


@pytest.mark.parametrize("as_tensor", [False, True])
def test_minibatches_cut_one_shuffle_of_every_column(as_tensor):
    rows = np.arange(10)
    columns = {"obs": np.stack([rows, -rows], axis=1).astype(np.float32), "actions": rows * 10}
    if as_tensor:
        columns = {key: torch.as_tensor(value) for key, value in columns.items()}
    chunks = list(Batch.minibatches(columns, 4, np.random.default_rng(7)))
    order = np.random.default_rng(7).permutation(10)  # the same draw the epoch made
    assert [len(chunk["actions"]) for chunk in chunks] == [4, 4, 2]  # the last, smaller chunk kept
    for start, chunk in zip((0, 4, 8), chunks, strict=True):
        index = order[start:start + 4]
        np.testing.assert_array_equal(np.asarray(chunk["actions"]), rows[index] * 10)
        np.testing.assert_array_equal(np.asarray(chunk["obs"]), np.stack([rows[index], -rows[index]], axis=1))
    assert sorted(np.concatenate([np.asarray(chunk["actions"]) for chunk in chunks])) == list(rows * 10)
