"""Periodic evaluation, evaluation workers, and reward clipping/normalisation in training only."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from volley import PPOConfig, register_env
from volley.algorithms.ppo import PPO
from volley.envs import registered_creator
from volley.rollout.filters import FilterStats, RunningStats
from volley.rollout.worker import RolloutWorker


class Bandit(gym.Env):
    """One-step episodes: action 1 pays ``high``, action 0 pays ``low``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, low: float = 0.0, high: float = 1.0) -> None:
        self.low, self.high = low, high

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), self.high if action == 1 else self.low, True, False, {}


register_env("bandit", lambda env_config: Bandit(**env_config))


def cartpole(**training):
    return (PPOConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_envs_per_worker=4).training(train_batch_size=400, minibatch_size=100, **training)
            .debugging(seed=0))


def test_an_evaluation_every_second_iteration_has_its_own_episodes_and_steps():
    algo = cartpole().evaluation(evaluation_interval=2, evaluation_duration=3).build()
    try:
        results = [algo.train() for _ in range(4)]
    finally:
        algo.stop()
    assert ["evaluation" in r for r in results] == [False, True, False, True]
    for result in results[1::2]:
        evaluation = result["evaluation"]
        assert evaluation["episodes_this_iter"] == 3
        assert evaluation["timesteps_this_iter"] == round(3 * evaluation["episode_len_mean"])
        assert evaluation["episode_reward_mean"] == evaluation["episode_len_mean"]  # CartPole pays 1 a step
        assert 0 < evaluation["time_s"] < result["time_this_iter_s"]
    # evaluation steps are never training steps: at most 400 a fragment (less its autoreset steps)
    assert all(350 < r["timesteps_this_iter"] <= 400 for r in results)
    assert results[-1]["timesteps_total"] == sum(r["timesteps_this_iter"] for r in results)


def test_evaluation_by_timesteps_plays_whole_episodes_past_the_count():
    algo = cartpole().evaluation(evaluation_duration=150, evaluation_duration_unit="timesteps").build()
    try:
        evaluation = algo.evaluate()
    finally:
        algo.stop()
    assert evaluation["timesteps_this_iter"] >= 150
    lengths = evaluation["episode_len_mean"] * evaluation["episodes_this_iter"]
    assert lengths == pytest.approx(evaluation["timesteps_this_iter"])  # only whole episodes count
    # the last episode started before 150 steps were reached: without it, fewer than 150
    assert evaluation["timesteps_this_iter"] - evaluation["episode_len_mean"] < 150 + 500


def test_evaluation_takes_the_most_likely_action_unless_evaluation_config_explores():
    def returns(evaluation_config: dict) -> set:
        algo = (PPOConfig().environment("bandit").resources(engine="local")
                .training(train_batch_size=64, minibatch_size=32)
                .evaluation(evaluation_duration=40, evaluation_config=evaluation_config).build())
        try:
            algo.evaluate()
            return {r for r in algo.driver_worker().evaluate(
                algo.policy.get_flat_weights(), None, 40)[0].tolist()}
        finally:
            algo.stop()

    # an untrained policy is close to uniform: sampling shows both payoffs, the mode only one
    assert len(returns({})) == 1
    assert returns({"explore": True}) == {0.0, 1.0}


def test_evaluation_config_names_a_bad_key():
    with pytest.raises(Exception, match="evaluation_config: unknown config key 'lrr'.*'lr'"):
        cartpole().evaluation(evaluation_config={"lrr": 1.0}).build()


def test_clipped_and_normalised_rewards_are_learned_from_but_episodes_report_raw_ones():
    config = (PPOConfig().environment("bandit", env_config={"low": -3.0, "high": 5.0})
              .environment(clip_rewards=2.0, normalize_rewards=True)
              .resources(engine="local").rollouts(num_envs_per_worker=4)
              .training(train_batch_size=64, minibatch_size=32, gamma=0.5).debugging(seed=0))
    algo = config.build()
    try:
        result = algo.train()
        evaluation = algo.evaluate(10)
        # a worker sent return statistics with a standard deviation of 4 (and so many samples
        # that its own 64 steps cannot move them) learns from the clipped reward over 4
        worker = RolloutWorker(algo.config, 0, PPO.postprocess, registered_creator("bandit"),
                               plan=algo.workers.plan)
        known = RunningStats((), count=1e12, mean=np.zeros(()), m2=np.full((), 16e12))
        sampled = worker.sample(algo.policy.get_flat_weights(), FilterStats(None, known))
    finally:
        algo.stop()
    assert algo.reward_stats is not None
    assert algo.reward_stats.count == result["timesteps_this_iter"]  # valid steps only
    # one-step episodes: each value target is the reward learned from
    np.testing.assert_allclose(np.abs(sampled.batch["value_targets"]), 0.5, rtol=1e-6)
    assert set(sampled.episode_returns.tolist()) == {-3.0, 5.0}  # reported raw
    assert set(result["episode_returns_this_iter"]) == {-3.0, 5.0}
    assert evaluation["episode_reward_mean"] in (-3.0, 5.0)


def test_reward_statistics_merge_over_workers_and_survive_a_checkpoint(tmp_path):
    config = (PPOConfig().environment("CartPole-v1", normalize_rewards=True).resources(engine="local")
              .rollouts(num_workers=2, num_envs_per_worker=3).training(train_batch_size=600, minibatch_size=100))
    algo = config.build()
    try:
        steps = algo.train()["timesteps_this_iter"] + algo.train()["timesteps_this_iter"]
        assert algo.reward_stats.count == steps  # every valid step of both workers, both iterations
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    restored = config.build()
    try:
        restored.restore(path)
        assert restored.reward_stats.count == algo.reward_stats.count
        assert restored.reward_stats.mean == algo.reward_stats.mean
        assert restored.reward_stats.m2 == algo.reward_stats.m2
    finally:
        restored.stop()


def test_evaluation_workers_on_ray_share_the_episodes(ray_session):
    algo = (cartpole().resources(engine="ray").rollouts(num_workers=0)
            .evaluation(evaluation_num_workers=2, evaluation_duration=5).build())
    try:
        assert algo.eval_workers is not None and type(algo.eval_workers).__name__ == "RayWorkerGroup"
        evaluation = algo.evaluate()
    finally:
        algo.stop()
    assert evaluation["episodes_this_iter"] == 5  # 3 and 2, as RLlib shares them
    assert np.isfinite(evaluation["episode_reward_mean"])


def test_evaluation_workers_that_do_not_fit_beside_the_training_workers_are_refused(ray_session):
    config = (cartpole().resources(engine="ray").rollouts(num_workers=2)
              .evaluation(evaluation_num_workers=1))
    with pytest.raises(Exception, match="needs 1 CPUs but the Ray cluster has 2, 2 of them held by the train"):
        config.build()
