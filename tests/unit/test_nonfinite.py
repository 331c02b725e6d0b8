"""A non-finite loss or gradient skips the update (issue 6), in every algorithm: the weights stay,
``num_skipped_updates`` counts it, and ``max_consecutive_skips`` in a row stop the run."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from volley import DQNConfig, PGConfig, PPOConfig, TRPOConfig, register_env
from volley.algorithm import Algorithm
from volley.errors import TrainingError
from volley.run import Stop, train_until


class Huge(gym.Env):
    """Observes 0; reward 1 a step for its first ``after`` steps (overall), then ``scale``.

    The rewards stay finite float32 numbers, so no environment check catches them, but
    what the learner computes from them does not: PPO's squared value error and PG's
    discounted returns overflow to inf.
    """

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict) -> None:
        self.after = config.get("after", 0)
        self.scale = config.get("scale", 1e30)
        self.length = config.get("length", 1000)
        self.total = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        reward = 1.0 if self.total <= self.after else self.scale
        return np.zeros(1, np.float32), reward, self.t >= self.length, False, {}


register_env("huge", lambda cfg: Huge(cfg))


def ppo(**env_config) -> PPOConfig:
    """64 steps an iteration (2 envs x 32, no episode ends), 2 epochs x 2 minibatches: 4 updates."""
    return (PPOConfig().environment("huge", env_config=env_config).resources(engine="local")
            .rollouts(num_workers=0, num_envs_per_worker=2)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=2))


def weights(algo: Algorithm) -> np.ndarray:
    return algo.policy.get_flat_weights().copy()


def test_overflowing_loss_skips_updates_then_stops_the_run():
    algo = ppo().fault_tolerance(max_consecutive_skips=10).build()
    try:
        before = weights(algo)
        result = algo.train()
        assert result["num_skipped_updates"] == 4
        assert result["vf_loss"] == np.inf  # 1e30-sized value targets, squared
        np.testing.assert_array_equal(weights(algo), before)
        assert algo.train()["num_skipped_updates"] == 8
        with pytest.raises(TrainingError, match=r"10 updates in a row had a non-finite loss \((inf|nan)\).*"
                                                r"max_consecutive_skips=10.*iteration 3"):
            algo.train()
        np.testing.assert_array_equal(weights(algo), before)
    finally:
        algo.stop()


def test_the_last_good_checkpoint_stays_intact(tmp_path):
    # each env's rewards turn huge at its step 65: iterations 1 and 2 are good, 3 is not
    algo = ppo(after=64).fault_tolerance(max_consecutive_skips=4).build()
    try:
        with pytest.raises(TrainingError, match="max_consecutive_skips=4"):
            train_until(algo, Stop(iterations=10), run_dir=tmp_path, checkpoint_freq=1, tensorboard=False)
        assert algo.iteration == 2
        restored = Algorithm.from_checkpoint(tmp_path / "checkpoint")
        try:
            assert restored.iteration == 2
            np.testing.assert_array_equal(weights(restored), weights(algo))
        finally:
            restored.stop()
    finally:
        algo.stop()


@pytest.mark.parametrize("mode", ["samples", "gradients"])
def test_pg_skips_an_update_whose_returns_overflow(mode):
    # 3e38 + 0.99 * 3e38 is past float32's largest number: the discounted return is inf
    algo = (PGConfig().environment("huge", env_config={"scale": 3e38, "length": 5}).resources(engine="local")
            .rollouts(num_workers=0, num_envs_per_worker=2).training(batch_episodes=2, mode=mode).build())
    try:
        before = weights(algo)
        assert algo.train()["num_skipped_updates"] == 1
        np.testing.assert_array_equal(weights(algo), before)
    finally:
        algo.stop()


def test_trpo_skips_policy_and_value_steps_on_an_inf_in_the_batch():
    algo = (TRPOConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_workers=0, num_envs_per_worker=2)
            .training(train_batch_size=200, vf_minibatch_size=64, vf_epochs=3).build())
    try:
        batch = algo.sample()
        batch["advantages"][0] = np.inf
        before = weights(algo)
        algo.update_policy(batch)  # standardising inf advantages gives NaN: no step
        np.testing.assert_array_equal(weights(algo), before)
        assert algo.num_skipped_updates == 1
        batch["value_targets"][0] = np.inf
        algo.update_value_function(batch)  # one minibatch per epoch holds row 0
        assert algo.num_skipped_updates == 1 + 3
        assert not np.array_equal(weights(algo), before)  # the other minibatches stepped
    finally:
        algo.stop()


def test_dqn_skips_a_minibatch_with_an_inf_return():
    algo = (DQNConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_workers=0, num_envs_per_worker=2)
            .training(train_batch_size=64, learning_starts=64, prioritized_replay=True).build())
    try:
        algo.replay.add(algo.sample())
        minibatch = algo.replay.sample(32)
        minibatch["returns"][0] = np.inf
        before = weights(algo)
        algo.update(minibatch)
        np.testing.assert_array_equal(weights(algo), before)
        assert algo.num_skipped_updates == 1
        algo.update(algo.replay.sample(32))  # a finite minibatch steps
        assert not np.array_equal(weights(algo), before)
        assert algo.num_skipped_updates == 1
    finally:
        algo.stop()
