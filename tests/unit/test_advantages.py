"""GAE and discounted returns against values worked out by hand."""

import numpy as np
import pytest

from volley.rollout.advantages import discounted_returns, gae


def test_returns_restart_after_terminal_and_bootstrap_at_fragment_end():
    # steps: r=1,1 | terminal | r=1, fragment ends with V(next)=10
    rewards = np.array([1.0, 1.0, 1.0], np.float32)
    next_values = np.array([0.0, 0.0, 10.0], np.float32)  # step 1 is terminal: 0
    cuts = np.array([False, True, True])
    got = discounted_returns(rewards, next_values, cuts, gamma=0.5)
    # G2 = 1 + 0.5*10 = 6; G1 = 1 + 0.5*0 = 1; G0 = 1 + 0.5*G1 = 1.5
    np.testing.assert_allclose(got, [1.5, 1.0, 6.0])


def test_truncation_bootstraps_from_final_observation_value():
    rewards = np.array([1.0, 2.0], np.float32)
    # step 0 is a time-limit truncation whose final observation is worth 4
    next_values = np.array([4.0, 3.0], np.float32)
    cuts = np.array([True, True])
    np.testing.assert_allclose(discounted_returns(rewards, next_values, cuts, 0.9),
                               [1 + 0.9 * 4, 2 + 0.9 * 3])


def test_gae_hand_computed():
    gamma, lam = 0.9, 0.8
    rewards = np.array([1.0, 0.0, 2.0, 1.0], np.float32)
    values = np.array([0.5, 1.0, 1.5, 2.0], np.float32)
    # step 1 truncated with V(final)=3; step 3 ends the fragment with V(next)=4
    next_values = np.array([1.0, 3.0, 2.0, 4.0], np.float32)
    cuts = np.array([False, True, False, True])
    d = rewards + gamma * next_values - values  # deltas
    a3 = d[3]
    a2 = d[2] + gamma * lam * a3
    a1 = d[1]
    a0 = d[0] + gamma * lam * a1
    np.testing.assert_allclose(gae(rewards, values, next_values, cuts, gamma, lam),
                               [a0, a1, a2, a3], rtol=1e-6)
    # deltas 1.4, 1.7, 2.3, 2.6; gamma*lam = 0.72: a2 = 2.3 + 0.72*2.6, a0 = 1.4 + 0.72*1.7
    np.testing.assert_allclose([a0, a1, a2, a3], [2.624, 1.7, 4.172, 2.6], rtol=1e-5)


def test_gae_with_lambda_one_equals_returns_minus_values():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(50, 3)).astype(np.float32)
    values = rng.normal(size=(50, 3)).astype(np.float32)
    cuts = rng.random((50, 3)) < 0.1
    cuts[-1] = True
    next_values = np.where(cuts, rng.normal(size=(50, 3)), np.roll(values, -1, 0)).astype(np.float32)
    adv = gae(rewards, values, next_values, cuts, 0.97, 1.0)
    ret = discounted_returns(rewards, next_values, cuts, 0.97)
    np.testing.assert_allclose(adv, ret - values, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lam", [0.0, 0.95])
def test_gae_time_major_matches_each_column(lam):
    rng = np.random.default_rng(1)
    shape = (20, 4)
    r, v, nv = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    cuts = rng.random(shape) < 0.2
    both = gae(r, v, nv, cuts, 0.99, lam)
    for j in range(4):
        np.testing.assert_allclose(both[:, j], gae(r[:, j], v[:, j], nv[:, j], cuts[:, j], 0.99, lam),
                                   rtol=1e-6)
