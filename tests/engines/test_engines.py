"""Each engine samples and updates; the Ray engine matches the local reference batch for batch."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from volley import DQNConfig, EnvError, PGConfig, PPOConfig, register_env
from volley.models import NatureCNN


def small(engine: str, workers: int, **env) -> PPOConfig:
    return (PPOConfig().environment(**env).resources(engine=engine)
            .rollouts(num_workers=workers, num_envs_per_worker=3)
            .training(train_batch_size=240, minibatch_size=60, num_epochs=2).debugging(seed=7))


def test_ray_first_batch_equals_local_reference(ray_session):
    local = small("local", 2, env="CartPole-v1").build()
    remote = small("ray", 2, env="CartPole-v1").build()
    try:
        for _ in range(2):  # the second batch also checks the weights each engine ships
            a, b = local.sample(), remote.sample()
            assert sorted(a) == sorted(b)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            local.update(a)
            remote.update(b)
    finally:
        local.stop()
        remote.stop()


def test_a_ray_worker_imports_torch_only_if_it_uses_it(ray_session):
    """PPO, PG (samples mode) and DQN workers act through their MLPs in numpy and postprocess in
    numpy, so their processes never import torch (a second of every worker's start); a PG worker
    in gradients mode computes them in torch."""
    def imports_torch(host: object) -> bool:
        return "torch" in sys.modules

    pg = PGConfig().environment("CartPole-v1").resources(engine="ray").rollouts(num_workers=1)
    builds = {"ppo": small("ray", 1, env="CartPole-v1"),
              "pg samples": pg.copy().training(mode="samples", train_batch_size=200),
              "dqn": DQNConfig().environment("CartPole-v1").resources(engine="ray").rollouts(num_workers=1),
              "pg gradients": pg.copy().training(mode="gradients", train_batch_size=200)}
    found = {}
    for name, config in builds.items():
        algo = config.build()
        try:
            algo.train()
            found[name] = ray_session.get(algo.workers.manager.actors[0].__ray_call__.remote(imports_torch))
        finally:
            algo.stop()
    assert found == {"ppo": False, "pg samples": False, "dqn": False, "pg gradients": True}


def test_every_env_of_a_worker_is_seeded_apart(ray_session):
    algo = small("ray", 2, env="Pendulum-v1").build()
    try:
        batch = algo.sample()
        fragment = algo.workers.plan.fragment_length
        first_obs = batch["obs"].reshape(6, fragment, -1)[:, 0]  # env-major: first step per env
        assert len({tuple(o) for o in first_obs.round(6)}) == 6
    finally:
        algo.stop()


def test_num_workers_beyond_cluster_cpus_is_a_clear_error(ray_session):
    with pytest.raises(Exception, match=r"num_workers=5 needs 5 CPUs but the Ray cluster has 2"):
        small("ray", 5, env="CartPole-v1").build()


def test_unknown_env_id_names_close_ids():
    with pytest.raises(EnvError, match=r"unknown environment id 'CartPole-v7'.*'CartPole-v1'"):
        small("local", 0, env="CartPole-v7").build()


class SignEnv(gym.Env):
    """Observe +1 or -1; reward 1 for choosing the matching action. Ten steps per episode."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict) -> None:
        self.length = config.get("length", 10)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.sign = self.np_random.integers(2)
        return np.array([2.0 * self.sign - 1], np.float32), {}

    def step(self, action):
        reward = float(action == self.sign)
        self.t += 1
        self.sign = self.np_random.integers(2)
        return np.array([2.0 * self.sign - 1], np.float32), reward, self.t >= self.length, False, {}


def test_registered_env_trains_on_ray_workers(ray_session):
    register_env("sign-env", lambda cfg: SignEnv(cfg))
    algo = (small("ray", 2, env="sign-env", env_config={"length": 10})
            .training(train_batch_size=600, minibatch_size=100, num_epochs=4, lr=3e-3).build())
    try:
        first = algo.train()["episode_reward_mean"]
        for _ in range(15):
            result = algo.train()
        assert first < 7.0  # a random policy scores about 5
        assert result["episode_reward_mean"] >= 9.5
    finally:
        algo.stop()


def test_creator_returning_a_non_env_is_named(ray_session):
    register_env("not-an-env", lambda cfg: 42)
    with pytest.raises(EnvError, match=r"creator registered as 'not-an-env' returned int"):
        small("ray", 2, env="not-an-env").build()


def test_env_exception_on_a_worker_names_the_worker(ray_session):
    class Exploding(SignEnv):
        def step(self, action):
            raise RuntimeError("boom at step")

    register_env("exploding", lambda cfg: Exploding(cfg))
    algo = small("ray", 2, env="exploding").build()
    try:  # recreated after each failure, it fails again at once: not worth recreating forever
        with pytest.raises(EnvError, match=r"environment 'exploding' \(worker 0, env index 0\) raised at "
                                           r"step 1 of its episode: RuntimeError: boom at step; it failed 3"):
            algo.sample()
    finally:
        algo.stop()


def test_atari_pixels_sample_on_two_ray_workers(ray_session):
    algo = (small("ray", 2, env="ALE/Pong-v5").rollouts(num_envs_per_worker=2)
            .training(train_batch_size=64, minibatch_size=32).build())
    try:
        batch = algo.sample()
        assert batch["obs"].shape == (64, 4, 84, 84) and batch["obs"].dtype == np.uint8
        assert set(np.unique(batch["actions"])) <= set(range(6))
        algo.update(batch)
    finally:
        algo.stop()


def test_atari_ram_id_is_available():
    algo = small("local", 0, env="ALE/Pong-ram-v5").training(train_batch_size=30, minibatch_size=30).build()
    try:
        assert algo.sample()["obs"].shape == (30, 128)
    finally:
        algo.stop()


def test_mujoco_humanoid_samples_on_two_ray_workers(ray_session):
    algo = (small("ray", 2, env="Humanoid-v5", observation_filter="MeanStdFilter")
            .rollouts(num_envs_per_worker=2).training(train_batch_size=80, minibatch_size=40).build())
    try:
        batch = algo.sample()
        # 80 steps less the reset steps after falls (dropped: they are no transition)
        assert 60 <= len(batch) <= 80
        assert batch["obs"].shape[1:] == (348,) and batch["actions"].shape[1:] == (17,)
        assert algo.obs_filter.stats.count >= 80  # both workers' statistics reached the learner
        algo.update(batch)
    finally:
        algo.stop()


def small_dqn(engine: str, **env) -> DQNConfig:
    return (DQNConfig().environment(**env).resources(engine=engine)
            .rollouts(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=16)
            .training(learning_starts=32, minibatch_size=16, replay_buffer_capacity=1000,
                      epsilon_decay_steps=200).debugging(seed=7))


def test_dqn_on_ray_matches_the_local_reference_and_trains(ray_session):
    local = small_dqn("local", env="CartPole-v1").build()
    remote = small_dqn("ray", env="CartPole-v1").build()
    try:
        for engine in (local, remote):
            engine.policy.set_epsilon(0.5)  # ε-greedy draws come from each env's own stream
        a, b = local.sample(), remote.sample()
        assert sorted(a) == ["actions", "discounts", "next_obs", "obs", "returns"]
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        results = [remote.train() for _ in range(3)]
        assert results[-1]["num_workers"] == 2 and results[-1]["timesteps_total"] >= 180
        assert results[-1]["num_updates"] > 0 and np.isfinite(results[-1]["loss"])
        assert results[-1]["epsilon"] < results[0]["epsilon"]
    finally:
        local.stop()
        remote.stop()


def test_dqn_on_atari_pixels_uses_the_nature_cnn(ray_session):
    algo = (small_dqn("ray", env="ALE/Pong-v5").rollouts(rollout_fragment_length=8)
            .training(learning_starts=0, train_intensity=0.25, dueling=True).build())
    try:
        result = algo.train()
        assert isinstance(algo.policy.body, NatureCNN)
        assert len(algo.replay) == 32 and algo.replay.columns["next_obs"].shape[1:] == (4, 84, 84)
        assert algo.replay.columns["obs"].dtype == np.uint8
        assert result["num_updates"] == 8 and np.isfinite(result["loss"])
    finally:
        algo.stop()
