"""Policy gradient: both ways of sharing work give the same update; Karpathy's return reset."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from volley import ConfigError, PGConfig
from volley.algorithms.pg import PG
from volley.envs import KarpathyPong, make_vector_env


def pg(mode: str, **training) -> PG:
    return (PGConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_workers=2, num_envs_per_worker=2)
            .training(mode=mode, lr=1e-2, batch_episodes=6, **training).debugging(seed=5).build())


@pytest.mark.parametrize("standardize", [True, False])
def test_samples_and_gradients_modes_make_the_same_update(standardize):
    a, b = pg("samples", standardize_returns=standardize), pg("gradients", standardize_returns=standardize)
    try:
        start = a.policy.get_flat_weights()
        np.testing.assert_array_equal(start, b.policy.get_flat_weights())
        ra, rb = a.train(), b.train()
        assert ra["episodes_this_iter"] == rb["episodes_this_iter"] >= 6
        assert ra["timesteps_this_iter"] == rb["timesteps_this_iter"]
        grads_a = torch.cat([p.grad.reshape(-1) for p in a.policy.policy_parameters()])
        grads_b = torch.cat([p.grad.reshape(-1) for p in b.policy.policy_parameters()])
        assert grads_a.abs().max() > 1e-4  # a real gradient, not zeros
        torch.testing.assert_close(grads_a, grads_b, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(ra["policy_loss"], rb["policy_loss"], rtol=1e-4, atol=1e-7)
        after_a, after_b = a.policy.get_flat_weights(), b.policy.get_flat_weights()
        assert not np.array_equal(after_a, start)
        # RMSProp divides by sqrt(g²): float32 noise in tiny gradients shows up at 1e-6
        np.testing.assert_allclose(after_a, after_b, rtol=1e-5, atol=1e-5)
    finally:
        a.stop()
        b.stop()


def test_returns_reset_at_each_point_when_asked():
    rewards = np.array([0.0, 0.0, 1.0, 0.0, -1.0], np.float32)
    cuts = np.array([False, False, False, False, True])
    columns = {"rewards": rewards, "cuts": cuts, "obs": np.zeros((5, 1)), "actions": np.zeros(5),
               "valid": np.ones(5, bool)}
    config = PGConfig().training(gamma=0.5)
    plain = PG.postprocess(columns, config)["returns"]
    # without reset: G4=-1, G3=-0.5, G2=1-0.25=0.75, G1=0.375, G0=0.1875
    np.testing.assert_allclose(plain, [0.1875, 0.375, 0.75, -0.5, -1.0])
    reset = PG.postprocess(columns, config.copy().training(reset_return_on_reward=True))["returns"]
    # a point at step 2 ends the sum there: G2 = 1, G1 = 0.5, G0 = 0.25; G3 = -0.5, G4 = -1
    np.testing.assert_allclose(reset, [0.25, 0.5, 1.0, -0.5, -1.0])


def test_pg_config_checks_its_keys():
    with pytest.raises(ConfigError, match=r"'decay_rate' must be in \(0, 1\), got 1.5"):
        PGConfig().training(decay_rate=1.5).validate()
    with pytest.raises(ConfigError, match=r"'mode' must be 'samples' or 'gradients', got 'grads'"):
        PGConfig().training(mode="grads")


def test_karpathy_preprocessing_of_a_frame():
    frame = np.full((210, 160, 3), 144, np.uint8)  # background everywhere
    frame[35 + 2 * 10, 2 * 7, 0] = 236  # one paddle pixel at (10, 7) of the 80x80 field
    frame[100, 50, 0] = 109  # the other background colour: erased
    out = KarpathyPong.preprocess(frame)
    assert out.shape == (6400,) and out.dtype == np.float32
    assert out.sum() == 1 and out[10 * 80 + 7] == 1


def test_karpathy_pong_env_observes_frame_differences():
    vec = make_vector_env("ALE/Pong-v5", 1, atari_preprocessing="karpathy")
    assert vec.single_observation_space.shape == (6400,)
    assert vec.single_action_space == gym.spaces.Discrete(2)
    obs, _ = vec.reset(seed=0)
    assert not obs.any()  # no previous frame yet
    values = set()
    for _ in range(60):
        obs, *_ = vec.step(np.array([0]))
        values |= set(np.unique(obs).tolist())
    assert values <= {-1.0, 0.0, 1.0} and {-1.0, 1.0} <= values  # moving objects show up
    vec.close()
