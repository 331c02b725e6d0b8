"""RLlib's ``observation_fn``: the agents' observations of every reset and step rewritten before the
policies see them, called as RLlib calls it; an agent it drops does not act."""

from __future__ import annotations

from collections import Counter as Tally
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from agent_envs import Staggered, agent_steps, read_records

from volley import PolicySpec, PPOConfig
from volley.errors import ConfigError
from volley.rollout.multi_agent import MultiAgentRolloutWorker

ENGINES = ["local", "ray"]
CALLS: list[dict[str, Any]] = []  # what the local engine's workers passed


def with_step_and_crowd(agent_obs: dict[str, np.ndarray], worker: Any, base_env: Any, policies: Any, episode: Any,
                        **kwargs: Any) -> dict[str, np.ndarray]:
    """Each agent's ``[i, k]`` becomes ``[i, k, t, n]``: the episode's steps so far, and how many agents
    observe this step; a3 is dropped."""
    CALLS.append({"worker": worker, "base_env": base_env, "policies": sorted(policies), "episode": episode.episode_id})
    return {agent: np.array([*obs, episode.length, len(agent_obs)], np.float32)
            for agent, obs in agent_obs.items() if agent != "a3"}


def observing(t: int) -> int:
    """How many of Staggered's agents (periods 1, 2, 3, 4) observe on step ``t`` of an episode."""
    return sum(t % period == 0 for period in (1, 2, 3, 4))


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_the_policies_see_the_rewritten_observations(engine: str, tmp_path: Path):
    CALLS.clear()
    config = (PPOConfig().environment("staggered", env_config={"record_dir": str(tmp_path)}).resources(engine=engine)
              .rollouts(num_workers=2, num_envs_per_worker=2).training(train_batch_size=120, minibatch_size=60).debugging(seed=0)
              .multi_agent(policies={"default_policy": PolicySpec(observation_space=gym.spaces.Box(0, 100, (4,)),
                                                                  action_space=gym.spaces.Discrete(100))},
                           observation_fn=with_step_and_crowd))
    with config.build() as algo:
        assert algo.get_policy().state_dict()["pi_body.0.weight"].shape == (64, 4)  # the rewritten width
        weights = {"default_policy": algo.get_policy().get_flat_weights()}
        samples = algo.workers.call("sample", weights, {"default_policy": None}, None)
    for sample in samples:  # 2 environments x 30 steps: 4 episodes of 7 steps and 2 steps of a fifth
        obs = sample.policies["default_policy"].batch["obs"]
        agent, k, t, n = obs.T
        assert set(agent.astype(int).tolist()) == {0, 1, 2}  # a3 was dropped: it never acted
        np.testing.assert_array_equal(n, [observing(int(step)) for step in t])
        np.testing.assert_array_equal(t[agent == 0], k[agent == 0])  # a0 observes every step
        np.testing.assert_array_equal(t[agent == 1], 2 * k[agent == 1])
        np.testing.assert_array_equal(t[agent == 2], 3 * k[agent == 2])
    acted, _ = agent_steps([1, 2, 3, 4], 7, 0, 30)  # in each of the 2 x 2 environments
    records = read_records(tmp_path)
    assert Tally(r["agent"] for r in records) == {f"a{i}": 4 * acted[i] for i in range(3)}
    assert not [r for r in records if r["unasked"]]
    if engine == "local":  # RLlib's arguments: the worker, its environment, its policies, the episode
        assert all(isinstance(c["worker"], MultiAgentRolloutWorker) for c in CALLS)
        assert all(isinstance(c["base_env"], Staggered) for c in CALLS)
        assert all(c["policies"] == ["default_policy"] for c in CALLS)
        assert len({c["episode"] for c in CALLS}) == 2 * 2 * 5  # each episode of each environment


def test_an_observation_fn_must_return_a_dict():
    config = (PPOConfig().environment("staggered").resources(engine="local").rollouts(num_workers=0)
              .multi_agent(observation_fn=lambda agent_obs, **kwargs: list(agent_obs.values())))
    with config.build() as algo, pytest.raises(ConfigError, match=r"observation_fn \S+<lambda> returned \[array.*: it must "
                                                                  "return a dict of the agents' observations"):
        algo.train()


def test_a_single_agent_run_refuses_an_observation_fn():
    config = PPOConfig().environment("CartPole-v1").resources(engine="local").multi_agent(
        observation_fn=with_step_and_crowd)
    with pytest.raises(ConfigError, match="observation_fn rewrites the observations of a multi-agent environment's "
                                          "agents, and 'CartPole-v1' is a single-agent environment"):
        config.build()
