"""Bad multi-agent input (issue 46) is refused with one line that names the value: on the local
engine, and where the mistake shows on a worker, on the Ray engine too."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from agent_envs import Counter, train

from volley import MultiAgentEnv, PolicySpec, PPOConfig, make_multi_agent, register_env
from volley.errors import ConfigError, EnvError, VolleyError

BOX = gym.spaces.Box(-1, 1, (2,))
register_env("four_cartpoles", lambda config: make_multi_agent("CartPole-v1")({"num_agents": 4}))


class TwoAgents(MultiAgentEnv):
    """Agents "a" and "b" in Box(2) (``b_size``: b's size instead), one step an episode; ``mistake``
    makes it return what a broken environment does."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {"a": BOX, "b": gym.spaces.Box(-1, 1, (config.get("b_size", 2),))}
        self.action_spaces = {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)}
        self.mistake = config.get("mistake")

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)}
        if self.mistake == "ghost":
            obs["ghost"] = np.zeros(2, np.float32)
        return obs, {}

    def step(self, action_dict: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        terminateds = {"a": True, "b": True} if self.mistake == "no_all" else {"__all__": True}
        return {}, dict.fromkeys(action_dict, 1.0), terminateds, {"__all__": False}, {}


register_env("two_agents", TwoAgents)


def run(engine: str = "local", env: str = "two_agents", env_config: dict | None = None, **multi_agent: Any) -> None:
    """Build PPO on ``env`` and train one iteration."""
    config = (PPOConfig().environment(env, env_config=env_config or {}).resources(engine=engine)
              .rollouts(num_workers=0 if engine == "local" else 1, num_envs_per_worker=1)
              .training(train_batch_size=16, minibatch_size=16, num_epochs=1).debugging(seed=0))
    train(config.multi_agent(**multi_agent) if multi_agent else config, 1)


def one_line(error: pytest.ExceptionInfo[VolleyError], *names: str) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, message
    return message


def to_nobody(agent_id: int, episode: Any, worker: Any, **kwargs: Any) -> str:
    return "main" if agent_id < 3 else "nobody"


@pytest.mark.parametrize("engine", ["local", "ray"], indirect=True)
def test_a_mapping_to_a_policy_that_does_not_exist_names_the_agent_and_the_id(engine: str):
    with pytest.raises(VolleyError) as error:
        run(engine, "four_cartpoles", policies={"main"}, policy_mapping_fn=to_nobody)
    one_line(error, "agent 3", "'nobody'", "['main']")


@pytest.mark.parametrize("engine", ["local", "ray"], indirect=True)
def test_an_observation_for_an_agent_without_a_space_names_the_agent(engine: str):
    with pytest.raises(VolleyError) as error:
        run(engine, env_config={"mistake": "ghost"})
    one_line(error, "TwoAgents.reset()", "agent 'ghost'", "observation_spaces holds agents ['a', 'b']")


def test_a_step_without_all_names_the_flags():
    with pytest.raises(EnvError) as error:
        run(env_config={"mistake": "no_all"})
    one_line(error, "TwoAgents.step()", "terminateds {'a': True, 'b': True} without '__all__'")


def test_one_policy_for_agents_whose_spaces_differ_names_the_policy_and_the_spaces():
    with pytest.raises(EnvError) as error:
        run(env_config={"b_size": 3})
    one_line(error, "policy 'default_policy'", "agent 'b'", "Box(-1.0, 1.0, (3,), float32)")
    with pytest.raises(EnvError) as error:
        run(env_config={"b_size": 3}, policies={"shared"}, policy_mapping_fn=lambda agent_id, *args, **kwargs: "shared")
    one_line(error, "policy 'shared'", "agent 'b'")


def test_a_hand_written_policy_to_train_is_named():
    with pytest.raises(ConfigError) as error:
        run(policies={"main": PolicySpec(), "counter": PolicySpec(Counter)},
            policy_mapping_fn=lambda agent_id, *args, **kwargs: "main" if agent_id == "a" else "counter",
            policies_to_train=["main", "counter"])
    one_line(error, "policies_to_train names 'counter'", "Counter")


def test_several_policies_without_a_mapping_function_are_named():
    with pytest.raises(ConfigError) as error:
        run(policies={"main", "other"})
    one_line(error, "['main', 'other']", "policy_mapping_fn")


@pytest.mark.parametrize("algo", ["R2D2", "ApexDQN"])
def test_an_algorithm_that_cannot_train_several_policies_is_named(algo: str):
    """Refused before any worker starts (Ape-X's acting workers are Ray actors: none is started)."""
    from volley import get_trainable_cls

    config = get_trainable_cls(algo).get_default_config().environment("four_cartpoles").rollouts(num_rollout_workers=1)
    with pytest.raises(ConfigError, match=rf"multi-agent training with {algo} is not supported yet"):
        config.build()
