"""The rollout worker: its random streams, bootstrapping at truncations, complete episodes, one-hot
FrozenLake."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers import TimeLimit

from volley import PPOConfig
from volley.rollout.streams import EnvStreams
from volley.rollout.worker import RolloutWorker


class Counter(gym.Env):
    """Observation is the step count; reward 1; never terminates (a time limit truncates it)."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([float(self.t)], np.float32), 1.0, False, False, {}


def keep_all(columns, config):
    return columns


def worker(config, **kwargs):
    return RolloutWorker(config, 0, keep_all, plan=config.plan(), **kwargs)


def test_truncation_bootstraps_with_the_value_of_the_final_observation():
    config = PPOConfig().environment("counter").rollouts(num_envs_per_worker=2, rollout_fragment_length=7)
    w = worker(config, env_creator=lambda cfg: TimeLimit(Counter(), 3))
    result = w.sample(w.policy.get_flat_weights(), None)
    batch = result.batch
    with torch.no_grad():
        v_final = w.policy(torch.tensor([[3.0]]))[1].item()  # the final observation is [3]
    truncated = batch["truncated"]
    assert truncated.sum() == 4  # two episodes of 3 steps per env in 7 steps (one is a reset step)
    # the worker acts with the numpy twin, the check with torch: float32 sums in another order
    np.testing.assert_allclose(batch["next_values"][truncated], v_final, rtol=1e-5, atol=1e-6)
    assert not batch["terminated"].any()
    # 7 steps per env, one of them the reset step after the first episode: 6 valid steps each
    assert len(batch) == 12 and result.env_steps == 12
    assert batch["obs"][:6, 0].tolist() == [0, 1, 2, 0, 1, 2]
    assert batch["cuts"][5] and batch["cuts"][11]  # the fragment end of each env is a cut
    np.testing.assert_allclose(batch["next_values"][:2], batch["values"][1:3], rtol=1e-6)
    np.testing.assert_array_equal(result.episode_lengths, [3, 3, 3, 3])


def test_complete_episodes_mode_returns_whole_episodes_only():
    config = (PPOConfig().environment("CartPole-v1")
              .rollouts(num_envs_per_worker=3, rollout_fragment_length=50, batch_mode="complete_episodes"))
    w = worker(config)
    result = w.sample(w.policy.get_flat_weights(), None)
    batch = result.batch
    ends = batch["terminated"] | batch["truncated"]
    assert len(batch) >= 150
    assert ends[-1]
    assert ends.sum() == len(result.episode_returns)
    assert len(batch) == result.episode_lengths.sum()
    np.testing.assert_allclose(batch["rewards"].sum(), result.episode_returns.sum())


def test_frozenlake_discrete_observations_are_one_hot():
    config = PPOConfig().environment("FrozenLake-v1").rollouts(num_envs_per_worker=2, rollout_fragment_length=20)
    w = worker(config)
    obs = w.sample(w.policy.get_flat_weights(), None).batch["obs"]
    assert obs.shape[1] == 16
    np.testing.assert_array_equal(obs.sum(axis=1), 1.0)


def test_evaluate_plays_the_requested_number_of_episodes():
    config = PPOConfig().environment("CartPole-v1").rollouts(num_envs_per_worker=4)
    w = worker(config)
    returns, lengths, _ = w.evaluate(w.policy.get_flat_weights(), None, 6)
    assert len(returns) == 6 and (lengths > 0).all()
    np.testing.assert_array_equal(returns, lengths)  # CartPole pays 1 per step


def test_each_complete_episodes_batch_starts_from_new_initial_states():
    """Seeds apply to the first reset only: later batches continue each env's random stream."""
    config = (PPOConfig().environment("Pendulum-v1").debugging(seed=7)
              .rollouts(num_envs_per_worker=2, rollout_fragment_length=10, batch_mode="complete_episodes"))
    w = worker(config)
    first = w.sample(w.policy.get_flat_weights(), None).batch["obs"]
    second = w.sample(w.policy.get_flat_weights(), None).batch["obs"]
    expected, _ = gym.make("Pendulum-v1").reset(seed=7)
    np.testing.assert_allclose(first[0], expected, rtol=1e-6)  # env 0's first episode: seed + 0
    assert not np.allclose(first[0], second[0])


def test_streams_give_each_env_the_draws_of_its_own_generator_across_blocks():
    steps = EnvStreams.BLOCK + 7  # past the first block
    gumbels = EnvStreams(5, [3, 4])
    normals = EnvStreams(5, [3, 4])
    got_g = np.stack([gumbels.gumbel(3) for _ in range(steps)])
    got_n = np.stack([normals.normal(6) for _ in range(steps)])
    for column, index in enumerate([3, 4]):
        single = np.random.default_rng([5, index])
        np.testing.assert_array_equal(got_g[:, column], [single.gumbel(size=3) for _ in range(steps)])
        single = np.random.default_rng([5, index])
        np.testing.assert_array_equal(got_n[:, column],
                                      [single.standard_normal(6).astype(np.float32) for _ in range(steps)])
    # a draw of another kind, or of another width, starts a block of its own where the stream stands
    single = np.random.default_rng([5, 3])
    single.gumbel(size=(2 * EnvStreams.BLOCK, 3))  # the two blocks of Gumbel noise drawn above
    np.testing.assert_array_equal(gumbels.normal(3)[0], single.standard_normal(3).astype(np.float32))
    single.standard_normal((EnvStreams.BLOCK - 1, 3))  # the rest of that block of normals
    np.testing.assert_array_equal(gumbels.gumbel(2)[0], single.gumbel(size=2))


def test_a_json_list_frameskip_reaches_ale_py_as_its_stochastic_pair():
    """env_config is JSON, which has no tuples; ale-py takes a (low, high) tuple and rejects a list."""
    config = PPOConfig().environment("ALE/Pong-ram-v5", env_config={"frameskip": [2, 5]}).rollouts(
        num_envs_per_worker=1, rollout_fragment_length=8)
    w = worker(config)
    assert w.env.envs[0].unwrapped._frameskip == (2, 5)
    assert config.env_config == {"frameskip": [2, 5]}  # the config itself stays JSON
    assert len(w.sample(w.policy.get_flat_weights(), None).batch) == 8
