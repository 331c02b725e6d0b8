"""Multi-agent environments (issue 46): ``make_multi_agent``, the PettingZoo wrappers on real
games, the four ways an environment declares each agent's spaces, RLlib's own ``MultiAgentEnv``
recognised without Ray, and the one-line errors for what an environment gets wrong."""

from __future__ import annotations

import sys
import types
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, rps_v2
from pettingzoo.utils.wrappers import BaseWrapper

import volley
from volley.envs import register_env
from volley.errors import ConfigError, EnvError
from volley.multi_agent_env import (
    MultiAgentEnv,
    ParallelPettingZooEnv,
    PettingZooEnv,
    agent_spaces,
    checked_output,
    is_multi_agent_env,
    make_multi_agent,
    make_multi_agent_env,
    possible_agent_ids,
)

MultiAgentCartPole = make_multi_agent("CartPole-v1")  # RLlib's example class, made as its scripts make it
BOX, BIG_BOX = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1, 1, (5,))


def test_two_cartpoles_end_the_episode_when_both_are_done():
    env = MultiAgentCartPole({"num_agents": 2})
    obs, infos = env.reset(seed=3)
    assert set(obs) == set(infos) == {0, 1} and env.get_agent_ids() == {0, 1}
    assert not np.array_equal(obs[0], obs[1])  # each copy has a seed of its own
    assert np.array_equal(MultiAgentCartPole({"num_agents": 2}).reset(seed=3)[0][1], obs[1])
    assert agent_spaces(env, 1) == (gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2))

    steps, first_done = 0, None
    while True:
        # agent 0 always pushes left and falls within a few dozen steps; agent 1 balances longer
        actions = {0: 0, 1: steps % 2}
        obs, rewards, terminateds, truncateds, _ = checked_output(env, "step", env.step(actions))
        steps += 1
        if first_done is not None:
            assert 0 not in obs and 0 not in rewards  # a done agent observes no more
        if terminateds["__all__"]:
            break
        if terminateds.get(0):
            first_done = steps
            assert not terminateds["__all__"] and env.agents == [1]
    assert first_done is not None and steps > first_done and terminateds[1] and env.agents == []
    assert not truncateds["__all__"]


def test_creator_gets_the_config_and_all_truncated_ends_truncated():
    seen: list[dict] = []

    def creator(config: dict) -> gym.Env:
        seen.append(dict(config))
        return gym.make("CartPole-v1", max_episode_steps=config["limit"])

    env = make_multi_agent(creator)({"num_agents": 3, "limit": 4})
    assert seen == [{"limit": 4}] * 3 and possible_agent_ids(env) == [0, 1, 2]
    env.reset(seed=0)
    for _ in range(4):
        _, _, terminateds, truncateds, _ = env.step({agent: 0 for agent in env.agents})
    assert truncateds == {0: True, 1: True, 2: True, "__all__": True} and terminateds["__all__"]


def test_make_multi_agent_names_bad_input():
    with pytest.raises(ConfigError, match="num_agents=0"):
        MultiAgentCartPole({"num_agents": 0})
    with pytest.raises(EnvError, match="CartPol-v1"):
        make_multi_agent("CartPol-v1")
    env = MultiAgentCartPole({"num_agents": 2})
    env.reset(seed=0)
    with pytest.raises(EnvError, match="agent 7"):
        env.step({7: 0})


class Recorded(BaseWrapper):
    """A PettingZoo AEC game that keeps each action it receives with the agent whose turn it was."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.received: list[tuple[str, Any]] = []

    def step(self, action: Any) -> None:
        self.received.append((self.agent_selection, action))
        super().step(action)


def test_connect_four_observes_only_the_agent_to_move_and_acts_only_for_it():
    game = Recorded(connect_four_v3.env())
    env = PettingZooEnv(game)
    assert is_multi_agent_env(env) and possible_agent_ids(env) == ["player_0", "player_1"]
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    moves, totals = [], dict.fromkeys(env.possible_agents, 0.0)
    while True:
        (mover,) = obs  # one agent observes: the one to move
        assert mover == game.agent_selection
        assert set(obs[mover]) == {"observation", "action_mask"}  # the classic game's Dict, as it is
        column = int(rng.choice(np.flatnonzero(obs[mover]["action_mask"])))
        moves.append((mover, column))
        other = next(agent for agent in env.possible_agents if agent != mover)
        # an action for the agent whose turn it is not is ignored, as RLlib's wrapper ignores it
        obs, rewards, terminateds, truncateds, _ = checked_output(
            env, "step", env.step({other: (column + 1) % 7, mover: column}))
        for agent, reward in rewards.items():
            totals[agent] += reward
        if terminateds["__all__"]:
            break
        assert set(obs) == set(rewards) == {other}
    assert [move for move in game.received if move[1] is not None] == moves
    assert set(obs) == set(env.possible_agents)  # at the end each agent observes once more
    assert sum(totals.values()) == 0 and not truncateds["__all__"]


def test_connect_four_needs_the_mover_s_action():
    env = PettingZooEnv(connect_four_v3.env())
    env.reset(seed=0)
    with pytest.raises(EnvError, match="none for 'player_0', whose turn it is"):
        env.step({"player_1": 3})


def test_rock_paper_scissors_parallel():
    env = ParallelPettingZooEnv(rps_v2.parallel_env(max_cycles=3))
    assert agent_spaces(env, "player_1") == (gym.spaces.Discrete(4), gym.spaces.Discrete(3))
    obs, infos = env.reset(seed=0)
    assert set(obs) == set(infos) == {"player_0", "player_1"}
    for cycle in range(3):
        # paper beats rock
        obs, rewards, terminateds, truncateds, _ = checked_output(
            env, "step", env.step({"player_0": 1, "player_1": 0}))
        assert rewards == {"player_0": 1, "player_1": -1}
        assert obs == {"player_0": 0, "player_1": 1}  # each observes the other's move
        assert truncateds["__all__"] == terminateds["__all__"] == (cycle == 2)


class Overridden(MultiAgentEnv):
    def get_observation_space(self, agent_id: Any) -> gym.Space:
        return {"a": BOX}[agent_id]

    def get_action_space(self, agent_id: Any) -> gym.Space:
        return gym.spaces.Discrete(3)


class PerAgentDicts(MultiAgentEnv):
    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {"a": BOX, "b": BIG_BOX}
        self.action_spaces = {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(4)}


class PreferredFormat(MultiAgentEnv):  # RLlib 2.9's multi_agent_different_spaces_for_agents
    def __init__(self) -> None:
        self._agent_ids = {"a", "b"}
        self.observation_space = gym.spaces.Dict({"a": BOX, "b": BIG_BOX})
        self.action_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(4)})
        super().__init__()


class OneSpace(MultiAgentEnv):  # a Dict of every agent, not keyed by agent: the classic games' kind
    def __init__(self) -> None:
        super().__init__()
        self._agent_ids = {0, 1}
        self.observation_space = gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.MultiBinary(2)})
        self.action_space = gym.spaces.Discrete(2)


def test_each_form_of_agent_spaces():
    assert agent_spaces(Overridden(), "a") == (BOX, gym.spaces.Discrete(3))
    assert agent_spaces(PerAgentDicts(), "b") == (BIG_BOX, gym.spaces.Discrete(4))
    assert agent_spaces(PreferredFormat(), "b") == (BIG_BOX, gym.spaces.Discrete(4))
    one = OneSpace()
    assert agent_spaces(one, 1) == (one.observation_space, gym.spaces.Discrete(2))
    assert PerAgentDicts().get_observation_space("a") == BOX
    assert set(PreferredFormat().action_space_sample()) == {"a", "b"}
    assert PerAgentDicts().observation_space_contains({"a": np.zeros(2, np.float32)})
    assert not PerAgentDicts().observation_space_contains({"b": np.zeros(2, np.float32)})


@pytest.mark.parametrize("env, says", [
    (Overridden(), "get_observation_space('z') raised KeyError"),
    (PerAgentDicts(), "observation_spaces holds agents ['a', 'b']"),
    (PreferredFormat(), "observation_space is a Dict of agents ['a', 'b']"),
    (MultiAgentEnv(), "observation_space is None"),
])
def test_an_agent_without_a_space_is_named(env: MultiAgentEnv, says: str):
    with pytest.raises(EnvError) as error:
        agent_spaces(env, "z")
    assert f"agent 'z' has no observation space in {type(env).__name__}" in str(error.value)
    assert says in str(error.value)


def test_rllib_s_own_base_class_is_recognised_without_ray(monkeypatch: pytest.MonkeyPatch):
    fake = types.ModuleType("ray.rllib.env.multi_agent_env")
    exec("import gymnasium\nclass MultiAgentEnv(gymnasium.Env):\n    pass", fake.__dict__)
    monkeypatch.setitem(sys.modules, "ray.rllib.env.multi_agent_env", fake)

    class Script(fake.MultiAgentEnv):  # type: ignore[name-defined]  # an RLlib example's environment
        def __init__(self, config: dict) -> None:
            self._agent_ids = {"x"}
            self.observation_space, self.action_space = BOX, gym.spaces.Discrete(2)

    assert is_multi_agent_env(Script) and is_multi_agent_env(Script({}))
    assert agent_spaces(Script({}), "x") == (BOX, gym.spaces.Discrete(2))
    assert make_multi_agent_env("script", {}, Script).action_space == gym.spaces.Discrete(2)
    assert is_multi_agent_env(MultiAgentCartPole) and is_multi_agent_env(PerAgentDicts())
    assert not is_multi_agent_env(gym.make("CartPole-v1"))
    assert not is_multi_agent_env(type("MultiAgentEnv", (gym.Env,), {}))  # the name alone, elsewhere


def test_make_multi_agent_env_builds_one_or_says_why_not():
    register_env("ma_test_two_cartpoles", lambda config: MultiAgentCartPole(config))
    made = make_multi_agent_env("ma_test_two_cartpoles", {"num_agents": 2}, None)
    assert made.get_agent_ids() == {0, 1}
    with pytest.raises(ConfigError, match="environment 'CartPole-v1' is not a multi-agent environment"):
        make_multi_agent_env("CartPole-v1", {}, None)
    with pytest.raises(ConfigError, match="returned CartPoleEnv"):
        make_multi_agent_env("single", {}, lambda config: gym.make("CartPole-v1").unwrapped)
    with pytest.raises(ConfigError, match=r"wrapped: PettingZooEnv\(env\)"):
        make_multi_agent_env("raw_game", {}, lambda config: connect_four_v3.env())
    with pytest.raises(EnvError, match="'broken' failed with env_config {'size': 3}: KeyError: 'id'"):
        make_multi_agent_env("broken", {"size": 3}, lambda config: gym.make(config["id"]))
    with pytest.raises(ConfigError, match="num_agents='two'"):  # volley's own error passes as it is
        make_multi_agent_env("ma_test_two_cartpoles", {"num_agents": "two"}, None)


def test_checked_output_names_what_is_wrong():
    env = PerAgentDicts()
    good = ({"a": 1}, {"a": 0.0}, {"a": False, "__all__": False}, {"__all__": False}, {})
    assert checked_output(env, "step", good) == good
    with pytest.raises(EnvError, match=r"PerAgentDicts.reset\(\) returned observations array\(\[0"):
        checked_output(env, "reset", (np.zeros(2), {}))
    with pytest.raises(EnvError, match=r"returned terminateds \{'a': True\} without '__all__'"):
        checked_output(env, "step", ({"a": 1}, {}, {"a": True}, {"__all__": False}, {}))
    with pytest.raises(EnvError, match=r"returned an observation for agent 'c', but agent 'c' has no"):
        checked_output(env, "reset", ({"a": 1, "c": 2}, {}))
    checked_output(env, "reset", ({"a": 1, "c": 2}, {}), known_agents={"a", "c"})  # the worker knows it
    with pytest.raises(EnvError, match="no observation .* no agent could act"):
        checked_output(env, "reset", ({}, {}))
    with pytest.raises(EnvError, match="returns \\(observations, infos\\)"):
        checked_output(env, "reset", {"a": 1})


def test_top_level_exports():
    assert volley.MultiAgentEnv is MultiAgentEnv and volley.make_multi_agent is make_multi_agent
    assert volley.PettingZooEnv is PettingZooEnv and volley.ParallelPettingZooEnv is ParallelPettingZooEnv
