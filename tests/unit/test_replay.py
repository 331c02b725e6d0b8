"""Replay buffers and n-step returns against hand-computed values."""

from __future__ import annotations

import numpy as np

from volley.replay import PrioritizedReplayBuffer, ReplayBuffer, n_step_returns

CHI2_999 = {3: 16.27, 5: 20.52, 9: 27.88}  # 99.9% quantiles of the chi-square distribution, by df


def rows(values) -> dict[str, np.ndarray]:
    values = np.asarray(values)
    return {"obs": np.stack([values, -values], axis=1).astype(np.float32), "actions": values.astype(np.int64)}


def chi_square(counts: np.ndarray, expected: np.ndarray) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def test_ring_buffer_wraps_and_keeps_the_newest_rows():
    buffer = ReplayBuffer(5, np.random.default_rng(0))
    np.testing.assert_array_equal(buffer.add(rows([0, 1, 2])), [0, 1, 2])
    np.testing.assert_array_equal(buffer.add(rows([3, 4, 5])), [3, 4, 0])  # 5 overwrites 0
    assert len(buffer) == 5
    np.testing.assert_array_equal(buffer.add(rows([6, 7])), [1, 2])
    np.testing.assert_array_equal(buffer.columns["actions"], [5, 6, 7, 3, 4])
    np.testing.assert_array_equal(buffer.columns["obs"][:, 1], [-5, -6, -7, -3, -4])
    assert buffer.next_index == 3  # the oldest row, 3, is overwritten next
    buffer.add(rows(np.arange(10, 22)))  # a chunk larger than the buffer leaves its newest 5
    assert sorted(buffer.columns["actions"]) == [17, 18, 19, 20, 21] and len(buffer) == 5


def test_uniform_sampling_covers_the_buffer_evenly():
    buffer = ReplayBuffer(10, np.random.default_rng(1))
    buffer.add(rows(np.arange(4)))
    buffer.add(rows(np.arange(4, 13)))  # wrapped: slots hold 10, 11, 12, 3, ..., 9
    batch = buffer.sample(20_000)
    np.testing.assert_array_equal(batch["actions"], buffer.columns["actions"][batch["indices"]])
    np.testing.assert_array_equal(batch["weights"], 1.0)
    counts = np.bincount(batch["actions"], minlength=13)
    assert counts[:3].sum() == 0 and (counts[3:] > 0).all()  # every row held, none overwritten
    assert chi_square(counts[3:], np.full(10, 2000.0)) < CHI2_999[9]


def test_prioritized_sampling_frequencies_match_priorities():
    buffer = PrioritizedReplayBuffer(6, np.random.default_rng(2), alpha=0.5, beta=0.4, eps=0.0)
    buffer.add(rows(np.arange(6)))
    td_errors = np.array([1.0, 4.0, 9.0, 16.0, 0.25, 2.25])
    buffer.update_priorities(np.arange(6), -td_errors)  # the sign of a TD error does not matter
    expected = np.sqrt(td_errors) / np.sqrt(td_errors).sum()  # p^alpha, alpha = 0.5
    counts = np.zeros(6)
    for _ in range(500):
        counts += np.bincount(buffer.sample(64)["indices"], minlength=6)
    assert chi_square(counts, expected * counts.sum()) < CHI2_999[5]
    np.testing.assert_allclose(counts / counts.sum(), expected, atol=0.01)


def test_importance_weights_on_a_hand_example():
    """Schaul et al. (2016): w_i = (N P(i))^-beta / max_j w_j."""
    buffer = PrioritizedReplayBuffer(8, np.random.default_rng(3), alpha=1.0, beta=0.5, eps=0.0)
    buffer.add(rows(np.arange(4)))
    buffer.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    # P = [0.1, 0.2, 0.3, 0.4], N = 4: N P = [0.4, 0.8, 1.2, 1.6]; the largest weight is
    # 0.4^-0.5, so w_i = (0.4 / (N P_i))^0.5 = [1, 1/sqrt(2), 1/sqrt(3), 1/2]
    expected = np.array([1.0, 1 / np.sqrt(2), 1 / np.sqrt(3), 0.5])
    batch = buffer.sample(200)
    assert set(batch["indices"].tolist()) == {0, 1, 2, 3}  # empty slots 4..7 are never drawn
    np.testing.assert_allclose(batch["weights"], expected[batch["indices"]], rtol=1e-6)


def test_new_rows_get_the_largest_priority_so_far():
    buffer = PrioritizedReplayBuffer(4, np.random.default_rng(4), alpha=1.0, beta=1.0, eps=0.5)
    buffer.add(rows([0, 1]))
    buffer.update_priorities(np.array([0, 1]), np.array([2.5, 0.5]))  # priorities 3 and 1
    buffer.add(rows([2]))
    np.testing.assert_allclose(buffer.tree.get(np.arange(4)), [3.0, 1.0, 3.0, 0.0])
    assert buffer.tree.total == 7.0


def test_n_step_returns_cut_at_episode_ends():
    gamma = 0.5
    # env 0 terminates at t=2 (t=3 starts the next episode); env 1 is truncated at t=1
    rewards = np.array([[1, 1], [1, 2], [1, 3], [1, 4], [1, 5], [1, 6]], np.float32)
    terminated = np.zeros((6, 2), bool)
    terminated[2, 0] = True
    truncated = np.zeros((6, 2), bool)
    truncated[1, 1] = True
    cuts = terminated | truncated
    cuts[-1] = True  # the fragment's end
    returns, discounts, ends = n_step_returns(rewards, terminated, cuts, gamma, 3)
    np.testing.assert_allclose(returns[:, 0], [1.75, 1.5, 1.0, 1.75, 1.5, 1.0])
    np.testing.assert_array_equal(ends[:, 0], [2, 2, 2, 5, 5, 5])
    # a window that ends in a termination does not bootstrap; the fragment end does
    np.testing.assert_allclose(discounts[:, 0], [0, 0, 0, 0.125, 0.25, 0.5])
    # env 1: 1 + 0.5*2; 2; 3 + 0.5*4 + 0.25*5; 4 + 0.5*5 + 0.25*6; 5 + 0.5*6; 6
    np.testing.assert_allclose(returns[:, 1], [2.0, 2.0, 6.25, 8.0, 8.0, 6.0])
    np.testing.assert_array_equal(ends[:, 1], [1, 1, 4, 5, 5, 5])
    # a truncation bootstraps from the final observation: gamma^(steps summed)
    np.testing.assert_allclose(discounts[:, 1], [0.25, 0.5, 0.125, 0.125, 0.25, 0.5])


def test_one_step_returns_are_the_rewards():
    rewards = np.array([[1.0], [2.0], [3.0]], np.float32)
    terminated = np.array([[False], [True], [False]])
    cuts = terminated | np.array([[False], [False], [True]])
    returns, discounts, ends = n_step_returns(rewards, terminated, cuts, 0.9, 1)
    np.testing.assert_array_equal(returns, rewards)
    np.testing.assert_allclose(discounts[:, 0], [0.9, 0.0, 0.9])
    np.testing.assert_array_equal(ends[:, 0], [0, 1, 2])


def test_state_lists_rows_oldest_first_and_loads_into_any_capacity():
    buffer = ReplayBuffer(5, np.random.default_rng(0))
    buffer.add(rows([0, 1, 2, 3]))
    buffer.add(rows([4, 5, 6]))  # the ring holds [5, 6, 2, 3, 4]; the oldest is 2
    state = buffer.state()
    np.testing.assert_array_equal(state["actions"], [2, 3, 4, 5, 6])
    np.testing.assert_array_equal(state["obs"][:, 1], [-2, -3, -4, -5, -6])
    smaller = ReplayBuffer(3, np.random.default_rng(1))
    smaller.load_state(state)
    np.testing.assert_array_equal(smaller.state()["actions"], [4, 5, 6])  # the newest rows fit


def test_prioritized_state_keeps_priorities_exactly():
    buffer = PrioritizedReplayBuffer(4, np.random.default_rng(0), alpha=0.6, beta=0.4, eps=0.01)
    buffer.add(rows([0, 1, 2]))
    buffer.add(rows([3, 4, 5]))  # slots hold [4, 5, 2, 3]
    buffer.update_priorities(np.array([0, 1, 2, 3]), np.array([0.5, -2.0, 0.1, 3.0]))
    state = buffer.state()
    # oldest first: rows 2, 3, 4, 5 in slots 2, 3, 0, 1; p^α = (|δ| + 0.01)^0.6
    np.testing.assert_array_equal(state["actions"], [2, 3, 4, 5])
    np.testing.assert_allclose(state["priority_alpha"], np.array([0.11, 3.01, 0.51, 2.01]) ** 0.6)
    assert state["max_priority"][0] == 3.01
    copy = PrioritizedReplayBuffer(4, np.random.default_rng(0), alpha=0.6, beta=0.4, eps=0.01)
    copy.load_state(state)
    for key, value in copy.state().items():
        np.testing.assert_array_equal(value, state[key], err_msg=key)
