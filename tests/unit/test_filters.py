"""Observation-filter statistics merged across workers equal those of the concatenated data."""

import numpy as np

from volley.rollout.filters import MeanStdFilter, RunningStats


def test_merged_filter_equals_statistics_of_concatenated_data():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(loc=i, scale=1 + i, size=(n, 3)) for i, n in enumerate([7, 50, 1, 300])]
    workers = [MeanStdFilter((3,)) for _ in range(2)]
    for i, chunk in enumerate(chunks):
        for part in np.array_split(chunk, 3):
            if len(part):
                workers[i % 2](part)
    merged = RunningStats((3,))
    for worker in workers:
        merged.merge(worker.pop_delta())
    data = np.concatenate(chunks)
    assert merged.count == len(data)
    np.testing.assert_allclose(merged.mean, data.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(merged.std, data.std(axis=0), rtol=1e-10)


def test_filter_normalises_with_global_stats_and_clips():
    data = np.random.default_rng(1).normal(5.0, 2.0, size=(1000, 2))
    f = MeanStdFilter((2,), clip=3.0)
    f.set_stats(RunningStats.of(data))
    out = f(np.array([[5.0, 5.0], [100.0, -100.0]]), update=False)
    np.testing.assert_allclose(out[0], (5.0 - data.mean(0)) / (data.std(0) + 1e-8), rtol=1e-5)
    np.testing.assert_array_equal(out[1], [3.0, -3.0])


def test_delta_is_cleared_after_pop_and_state_round_trips():
    f = MeanStdFilter((1,))
    f(np.ones((4, 1)))
    assert f.pop_delta().count == 4
    assert f.pop_delta().count == 0
    state = f.stats.to_state()
    again = RunningStats.from_state(state)
    assert again.count == 4 and np.allclose(again.mean, 1.0)
