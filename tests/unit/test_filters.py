"""Observation-filter statistics merged across workers equal those of the concatenated data."""

import numpy as np

from volley.rollout.filters import MeanStdFilter, RewardNormalizer, RunningStats


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


def test_one_row_at_a_time_normalises_each_row_with_the_statistics_of_all_rows_so_far():
    """One environment's hot path (Welford's update, its centred row reused) against numpy."""
    data = np.random.default_rng(3).normal(2.0, 3.0, size=(50, 4))
    f = MeanStdFilter((4,), clip=1.5)
    for t in range(len(data)):
        out = f(data[t:t + 1])
        seen = data[:t + 1]
        std = seen.std(axis=0) if t > 0 else np.ones(4)
        want = np.clip((data[t] - seen.mean(axis=0)) / (std + 1e-8), -1.5, 1.5)
        assert out.shape == (1, 4) and out.dtype == np.float32
        np.testing.assert_allclose(out[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(f.stats.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(f.stats.std, data.std(axis=0), rtol=1e-12)


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


def discounted_running_returns(rewards: np.ndarray, ends: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = gamma * G_{t-1} + r_t, restarted after every episode end: [T, N] (the reference)."""
    returns, running = np.zeros_like(rewards), np.zeros(rewards.shape[1])
    for t in range(len(rewards)):
        running = gamma * running + rewards[t]
        returns[t] = running
        running = np.where(ends[t], 0.0, running)
    return returns


def test_reward_normaliser_merged_over_workers_equals_statistics_of_all_discounted_returns():
    rng = np.random.default_rng(2)
    gamma = 0.9
    workers = [RewardNormalizer(3, gamma), RewardNormalizer(2, gamma)]
    all_returns = []
    for worker in workers:
        rewards = rng.normal(2.0, 3.0, size=(40, worker.returns.size))
        ends = rng.random((40, worker.returns.size)) < 0.1
        valid = np.ones(worker.returns.size, bool)
        for t in range(40):
            worker(rewards[t], valid, ends[t])
        all_returns.append(discounted_running_returns(rewards, ends, gamma).ravel())
    merged = RunningStats(())
    for worker in workers:
        merged.merge(worker.pop_delta())
    data = np.concatenate(all_returns)
    assert merged.count == len(data) == 200
    np.testing.assert_allclose(merged.mean, data.mean(), rtol=1e-10)
    np.testing.assert_allclose(merged.std, data.std(), rtol=1e-10)


def test_reward_normaliser_scales_by_return_std_skips_invalid_steps_and_freezes_without_update():
    f = RewardNormalizer(2, gamma=0.5, clip=100.0)
    f.set_stats(RunningStats.of(np.array([0.0, 4.0, 8.0])))  # std sqrt(32/3)
    out = f(np.array([3.0, -3.0]), valid=np.array([True, False]), ended=np.array([False, False]),
            update=False)
    np.testing.assert_allclose(out, np.array([3.0, -3.0]) / np.sqrt(32 / 3 + 1e-8), rtol=1e-6)
    assert f.stats.count == 3 and f.returns.tolist() == [0.0, 0.0]  # nothing learned from it
    f(np.array([3.0, -3.0]), valid=np.array([True, False]), ended=np.array([False, True]))
    assert f.stats.count == 4  # the invalid env's return is not a sample
    assert f.returns.tolist() == [3.0, 0.0]  # the ended env's return restarts
    big = RewardNormalizer(1, gamma=0.5, clip=2.0)
    big.set_stats(RunningStats.of(np.array([-1.0, 1.0])))
    assert big(np.array([50.0]), np.array([True]), np.array([False]), update=False).tolist() == [2.0]
