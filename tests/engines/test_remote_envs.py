"""RLlib's ``remote_worker_envs``: each environment of a worker in a Ray actor of its own
(``volley.engines.ray_envs``), as RLlib 2.9's examples ``remote_envs_with_inference_done_on_main_node``
and ``remote_base_env_with_custom_api`` use it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from volley import ConfigError, EnvError, PPOConfig


class Tasky(gym.Env):
    """Ten steps an episode, each rewarded with the task's number; ``set_task`` is the
    environment's own method, which RLlib's script calls on the actor."""

    def __init__(self, config=None):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.task = 1
        self.fail_at = (config or {}).get("fail_at")
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError(f"simulator lost at step {self.steps}")
        return self.observation_space.sample(), float(self.task), self.t >= 10, False, {}

    def set_task(self, task):
        self.task = task

    def get_task(self):
        return self.task


def config(env="CartPole-v1", workers=0, remote=True, **env_config):
    return (PPOConfig().environment(env, env_config=env_config).resources(engine="ray", num_cpus=2)
            .debugging(seed=5).rollouts(num_rollout_workers=workers, num_envs_per_worker=3, remote_worker_envs=remote,
                                        vectorize_mode="sync")  # gym.make copies, as the actors hold them
            .training(train_batch_size=192, minibatch_size=64, num_epochs=2))


@pytest.mark.parametrize("workers", [0, 1])
def test_environments_in_actors_train_exactly_as_in_process_ones(ray_session, workers):
    """The same seeds, the same episodes and the same weights: only where the environments run
    changed (in the driver with ``num_workers=0``, in the worker's actor with 1)."""
    runs = []
    for remote in (False, True):
        algo = config(workers=workers, remote=remote).build()
        returns = [algo.train()["episode_returns_this_iter"] for _ in range(2)]
        runs.append((returns, algo.get_policy().get_weights()))
        algo.stop()
    (local_returns, local_weights), (remote_returns, remote_weights) = runs
    assert remote_returns == local_returns and sum(map(len, local_returns)) > 5
    assert all(np.array_equal(local_weights[name], remote_weights[name]) for name in local_weights)


def test_foreach_env_gives_the_actors_with_the_environments_own_methods(ray_session):
    algo = config(Tasky).build()
    algo.train()
    ray = ray_session
    refs = algo.workers.foreach_env(lambda env: env.set_task.remote(5))
    assert len(refs) == 1 and len(refs[0]) == 3
    ray.get(refs[0])
    assert algo.workers.foreach_env(lambda env: ray.get(env.get_task.remote())) == [[5, 5, 5]]
    later = algo.train()["episode_returns_this_iter"]
    assert max(later) == 50.0  # an episode begun after the switch: 10 steps of reward 5
    algo.stop()


def test_an_environment_that_raises_in_its_actor_is_recreated_or_named(ray_session):
    errors = []
    for remote in (False, True):
        algo = config(Tasky, remote=remote, fail_at=30).build()
        errors.append(algo.train()["num_env_errors"])
        algo.stop()
    # 64 steps each: every environment fails at its 30th step, and its replacement at its own 30th
    assert errors == [6, 6]
    algo = config(Tasky, fail_at=30).fault_tolerance(env_errors="raise").build()
    with pytest.raises(EnvError, match=r"env index 0\) raised at step \d+ of its episode: RuntimeError: "
                                       r"simulator lost at step 30"):
        algo.train()
    algo.stop()


def test_remote_worker_envs_need_the_ray_engine():
    with pytest.raises(ConfigError, match="remote_worker_envs=True puts each environment in a Ray actor: it "
                                          "needs engine='ray', got engine='local'"):
        config().resources(engine="local").build()
