"""Multi-agent environments: RLlib's ``MultiAgentEnv`` protocol, ``make_multi_agent`` and PettingZoo.

A multi-agent environment's ``reset()`` and ``step(action_dict)`` speak in dicts keyed by agent
id: observations only for the agents that act next (all of them, or one in a turn-based game),
rewards that may come for agents that do not act, and ``terminateds`` / ``truncateds`` whose
``"__all__"`` ends the episode (RLlib 2.9's ``rllib/env/multi_agent_env.py``, issue 46). The
environments here set it as RLlib's ``make_multi_agent`` does: terminated once the episode is over
for every agent, however it ended, and truncated as well where every agent was truncated; whether
to bootstrap an agent is read from its own flags.

Environments enter in three ways, and the rest of volley reads them through the functions of
:mod:`volley.multi_agent_protocol`, never through one base class: volley's :class:`MultiAgentEnv`,
RLlib's own (an example script's environment subclasses
``ray.rllib.env.multi_agent_env.MultiAgentEnv``; it is recognised without importing Ray), and
PettingZoo's games through :class:`PettingZooEnv` (turn-based) and :class:`ParallelPettingZooEnv`.
Each agent's spaces are declared in one of four forms, old API and new;
:func:`~volley.multi_agent_protocol.agent_spaces` resolves them all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from volley.envs import check_env_id, register_env, registered_creator
from volley.errors import ConfigError, EnvError, shown
from volley.multi_agent_protocol import SpaceKind, agent_space, declared_space, possible_agent_ids

# the protocol's functions, named here too: scripts and tests take them from here, and so do the
# multi-agent worker and learner, whose import of this module registers MultiAgentCartPole
from volley.multi_agent_protocol import agent_spaces as agent_spaces
from volley.multi_agent_protocol import checked_output as checked_output
from volley.multi_agent_protocol import is_multi_agent_env as is_multi_agent_env
from volley.multi_agent_protocol import make_multi_agent_env as make_multi_agent_env

ENV_STATE = "state"  # RLlib's key for a global state in a Dict observation (its centralized critic example)

AgentDict = dict[Any, Any]  # agent id -> an observation, reward, flag, info or action
# observations, rewards, terminateds, truncateds, infos
StepResult = tuple[AgentDict, AgentDict, AgentDict, AgentDict, AgentDict]


class MultiAgentEnv(gym.Env):
    """An environment that hosts several agents, each with an id, as RLlib's ``MultiAgentEnv``.

    A subclass sets its agents and their spaces in ``__init__``, before or after calling
    ``super().__init__()``, in any of RLlib's forms: ``possible_agents`` or ``_agent_ids``;
    ``observation_spaces`` / ``action_spaces`` dicts, or ``observation_space`` / ``action_space``
    as a ``gym.spaces.Dict`` keyed by agent id, or one space that every agent has; or it
    overrides :meth:`get_observation_space` / :meth:`get_action_space`.
    """

    observation_spaces: dict[Any, gym.Space] | None
    action_spaces: dict[Any, gym.Space] | None
    possible_agents: list[Any]  # every agent that may ever appear
    agents: list[Any]  # the agents alive now (RLlib's example envs keep other things under this name)

    def __init__(self) -> None:
        super().__init__()
        # what a subclass set before calling us stays, as in RLlib
        for name in ("observation_space", "action_space", "observation_spaces", "action_spaces"):
            if not hasattr(self, name):
                setattr(self, name, None)
        for name in ("possible_agents", "agents"):
            if not hasattr(self, name):
                setattr(self, name, [])
        if not hasattr(self, "_agent_ids"):
            self._agent_ids: set[Any] = set()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[AgentDict, AgentDict]:
        """The first observations of the agents that act first, and their infos.

        Here it only seeds ``self.np_random``: subclasses call it for that (RLlib's do) and
        return their own observations.
        """
        super().reset(seed=seed, options=options)
        return {}, {}

    # dicts of every agent where gymnasium's Env has one agent's values: an incompatible override by design
    def step(self, action_dict: AgentDict) -> StepResult:  # type: ignore[override]
        """Act with ``action_dict`` (agent id -> action): observations of the agents that act next,
        rewards, ``terminateds`` and ``truncateds`` (each with ``"__all__"``) and infos."""
        raise NotImplementedError

    def render(self) -> Any:
        """A frame of the environment, or None (the default renders nothing)."""
        return None

    def get_agent_ids(self) -> set[Any]:
        """Every agent's id (RLlib's old API; ``possible_agents`` in its new one)."""
        return set(possible_agent_ids(self))

    def get_observation_space(self, agent_id: Any) -> gym.Space:
        """The observation space of agent ``agent_id`` (an EnvError if it has none)."""
        return declared_space(self, "observation", agent_id)

    def get_action_space(self, agent_id: Any) -> gym.Space:
        """The action space of agent ``agent_id`` (an EnvError if it has none)."""
        return declared_space(self, "action", agent_id)

    def observation_space_contains(self, x: dict[Any, Any]) -> bool:
        """Whether each agent's observation in ``x`` lies in that agent's space."""
        return _contains(self, "observation", x)

    def action_space_contains(self, x: dict[Any, Any]) -> bool:
        """Whether each agent's action in ``x`` lies in that agent's space."""
        return _contains(self, "action", x)

    def observation_space_sample(self, agent_ids: list[Any] | None = None) -> dict[Any, Any]:
        """A random observation for each of ``agent_ids`` (default: every agent)."""
        return _sample(self, "observation", agent_ids)

    def action_space_sample(self, agent_ids: list[Any] | None = None) -> dict[Any, Any]:
        """A random action for each of ``agent_ids`` (default: every agent)."""
        return _sample(self, "action", agent_ids)


def _contains(env: Any, kind: SpaceKind, values: Any) -> bool:
    return isinstance(values, dict) and all(agent_space(env, kind, agent).contains(value)
                                            for agent, value in values.items())


def _sample(env: Any, kind: SpaceKind, agent_ids: list[Any] | None) -> dict[Any, Any]:
    agents = possible_agent_ids(env) if agent_ids is None else agent_ids
    return {agent: agent_space(env, kind, agent).sample() for agent in agents if agent != "__all__"}


def make_multi_agent(env_name_or_creator: str | Callable[[dict], gym.Env]) -> type[MultiAgentEnv]:
    """A :class:`MultiAgentEnv` class of ``num_agents`` independent copies of a single-agent env.

    ``env_name_or_creator`` is a Gymnasium id (or a name given to ``register_env``) or a creator
    called with the config. The class's ``__init__(config, render_mode=None)`` reads
    ``config["num_agents"]`` (default 1); agents are 0 .. n-1, each with the single environment's
    spaces. ``render_mode`` goes to the copies of a Gymnasium id (a creator chooses its own), and
    ``render()`` is agent 0's. An agent that is
    done observes no more (actions for it are ignored); ``"__all__"`` is terminated once every
    agent is done and truncated once every agent was truncated, as RLlib's. Unlike RLlib's, which
    gives every copy the same seed (so that its agents start alike), each copy's seed is drawn
    from the one given to ``reset``.
    """
    make_one = _single_env_creator(env_name_or_creator)

    class MultiEnv(MultiAgentEnv):
        def __init__(self, config: dict | None = None, render_mode: str | None = None) -> None:
            super().__init__()
            config = copy.copy(config) if config is not None else {}  # an EnvContext stays one
            num_agents = config.pop("num_agents", 1)
            if not isinstance(num_agents, int) or isinstance(num_agents, bool) or num_agents < 1:
                raise ConfigError(f"env_config num_agents={num_agents!r}: make_multi_agent needs a "
                                  "whole number of agents, at least 1")
            self.envs = [make_one(config, render_mode) for _ in range(num_agents)]
            self.render_mode = getattr(self.envs[0], "render_mode", None)
            self.metadata = getattr(self.envs[0], "metadata", self.metadata)  # its render_fps
            self.observation_space = self.envs[0].observation_space
            self.action_space = self.envs[0].action_space
            self.possible_agents = list(range(num_agents))
            self._agent_ids = set(self.possible_agents)
            self.terminateds: set[int] = set()
            self.truncateds: set[int] = set()

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[AgentDict, AgentDict]:
            super().reset(seed=seed, options=options)
            self.terminateds, self.truncateds = set(), set()
            self.agents = list(self.possible_agents)
            obs, infos = {}, {}
            for agent, env in enumerate(self.envs):
                obs[agent], infos[agent] = env.reset(seed=_agent_seed(seed, agent), options=options)
            return obs, infos

        def step(self, action_dict: AgentDict) -> StepResult:  # type: ignore[override]
            if not action_dict:
                raise EnvError(f"{type(self).__name__}.step() needs an action for at least one agent, got {{}}")
            obs, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
            for agent, action in action_dict.items():
                if agent not in self._agent_ids:
                    raise EnvError(f"{type(self).__name__}.step() got an action for agent {agent!r}: "
                                   f"its agents are 0 .. {len(self.envs) - 1}")
                if agent in self.terminateds or agent in self.truncateds:
                    continue
                obs[agent], rewards[agent], terminateds[agent], truncateds[agent], infos[agent] = \
                    self.envs[agent].step(action)
                if terminateds[agent]:
                    self.terminateds.add(agent)
                elif truncateds[agent]:
                    self.truncateds.add(agent)
            self.agents = [a for a in self.possible_agents if a not in self.terminateds | self.truncateds]
            terminateds["__all__"] = not self.agents
            truncateds["__all__"] = len(self.truncateds) == len(self.envs)
            return obs, rewards, terminateds, truncateds, infos

        def render(self) -> Any:
            return self.envs[0].render()

        def close(self) -> None:
            for env in self.envs:
                env.close()

    return MultiEnv


def _agent_seed(seed: int | None, agent: int) -> int | None:
    """Agent ``agent``'s copy's seed: drawn from ``seed``, so copies differ and runs repeat."""
    return None if seed is None else int(np.random.SeedSequence([seed, agent]).generate_state(1)[0])


def _single_env_creator(env_name_or_creator: Any) -> Callable[[dict, str | None], gym.Env]:
    """``make_multi_agent``'s argument as a creator of one single-agent environment from the config
    and a render mode (which only a Gymnasium id takes: a creator chooses its own)."""
    creator = env_name_or_creator
    if isinstance(env_name_or_creator, str):
        creator = registered_creator(env_name_or_creator)
        if creator is None:
            check_env_id(env_name_or_creator)
            return lambda _config, render_mode: gym.make(env_name_or_creator, render_mode=render_mode)
    if not callable(creator):
        raise ConfigError(f"make_multi_agent({shown(env_name_or_creator)}): give a Gymnasium id or a "
                          "function of the env_config that returns a gymnasium.Env")
    return lambda config, _render_mode: creator(config)


class _PettingZooWrapper(MultiAgentEnv):
    """What both PettingZoo wrappers share: the game's agents, its spaces (in both of RLlib's
    forms), its rendering, and how an episode ends (when the game has no agent left)."""

    def __init__(self, game: Any) -> None:
        super().__init__()
        self._game = game
        self.possible_agents = list(game.possible_agents)
        self._agent_ids = set(self.possible_agents)
        self.observation_spaces = {agent: game.observation_space(agent) for agent in self.possible_agents}
        self.action_spaces = {agent: game.action_space(agent) for agent in self.possible_agents}
        self.observation_space = gym.spaces.Dict(self.observation_spaces)
        self.action_space = gym.spaces.Dict(self.action_spaces)
        self.metadata = getattr(game, "metadata", self.metadata)
        self.render_mode = getattr(game, "render_mode", None)

    def _ending(self, obs: AgentDict, rewards: AgentDict, terminateds: AgentDict, truncateds: AgentDict,
                infos: AgentDict) -> StepResult:
        """A step's dicts with ``"__all__"`` added, once the game's live agents are read."""
        self.agents = list(self._game.agents)
        terminateds["__all__"] = not self.agents
        truncateds["__all__"] = not self.agents and all(truncateds.values())
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self._game.render()

    def close(self) -> None:
        self._game.close()


class PettingZooEnv(_PettingZooWrapper):
    """A PettingZoo AEC (turn-based) environment as a :class:`MultiAgentEnv`, as RLlib's wrapper.

    Only the agent whose turn it is observes; ``step`` acts with that agent's action alone
    (actions given for the others are ignored, as RLlib's wrapper does; none for it is an
    EnvError), then returns what the next agent to move sees. Each reward is the agent's
    reward since it last acted (PettingZoo's ``last()``), so nothing is lost between turns. At the
    end every agent observes once more with its final reward. A classic game's observation
    stays the Dict it is, ``action_mask`` included.
    """

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.env = env

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[AgentDict, AgentDict]:
        self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        agent = self.env.agent_selection
        obs, _, _, _, info = self.env.last()
        return {agent: obs}, {agent: info}

    def step(self, action_dict: AgentDict) -> StepResult:  # type: ignore[override]
        mover = self.env.agent_selection
        if mover not in action_dict:
            raise EnvError(f"PettingZooEnv({self.env}).step() got actions for {list(action_dict)!r}, "
                           f"none for {mover!r}, whose turn it is")
        self.env.step(action_dict[mover])
        obs, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
        # done agents must be stepped with None until one that may act has the turn (PettingZoo's rule)
        while self.env.agents:
            agent = self.env.agent_selection
            obs[agent], rewards[agent], terminateds[agent], truncateds[agent], infos[agent] = self.env.last()
            if not (terminateds[agent] or truncateds[agent]):
                break
            self.env.step(None)
        return self._ending(obs, rewards, terminateds, truncateds, infos)


class ParallelPettingZooEnv(_PettingZooWrapper):
    """A PettingZoo parallel environment (every live agent acts each step) as a
    :class:`MultiAgentEnv`, as RLlib's wrapper."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.par_env = env

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[AgentDict, AgentDict]:
        obs, infos = self.par_env.reset(seed=seed, options=options)
        self.agents = list(self.par_env.agents)
        return dict(obs), dict(infos or {})

    def step(self, action_dict: AgentDict) -> StepResult:  # type: ignore[override]
        obs, rewards, terminateds, truncateds, infos = (dict(d) for d in self.par_env.step(action_dict))
        return self._ending(obs, rewards, terminateds, truncateds, infos)


# RLlib's example environment, under the name RLlib's examples register it by: ``volley train --env
# MultiAgentCartPole --set env_config='{"num_agents": 2}'`` (each agent its own CartPole)
MultiAgentCartPole = make_multi_agent("CartPole-v1")
register_env("MultiAgentCartPole", MultiAgentCartPole)


def policy_per_agent(agent_id: Any, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:
    """A ``policy_mapping_fn`` a preset or the command line can name
    (``volley.multi_agent_env:policy_per_agent``): agent ``i`` acts with policy ``"p<i>"``."""
    return f"p{agent_id}"
