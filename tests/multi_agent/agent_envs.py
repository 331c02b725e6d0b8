"""Environments and policies the multi-agent tests train on, each keeping a record that a test
can check against what had to happen.

An environment built by a worker may live in another process (a Ray actor, an MPI rank), so
what it records goes to a file of its own under ``env_config["record_dir"]``, one JSON line per
step, which the test reads once training is done.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.classic import connect_four_v3
from pettingzoo.utils.wrappers import BaseWrapper

from volley import AlgorithmConfig, MultiAgentEnv, PettingZooEnv, Policy, register_env


class Recorder:
    """Appends one JSON line per event to a file of its own under ``record_dir`` (nothing if None)."""

    def __init__(self, record_dir: str | None) -> None:
        self.path = None if record_dir is None else Path(record_dir) / f"{os.getpid()}-{uuid.uuid4().hex}.jsonl"

    def __call__(self, **event: Any) -> None:
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(event) + "\n")


def train(config: AlgorithmConfig, iterations: int) -> dict[str, Any]:
    """Build ``config``, train ``iterations`` iterations and stop: the last result."""
    with config.build() as algo:
        for _ in range(iterations):
            result = algo.train()
    return result


def read_records(record_dir: Path) -> list[dict[str, Any]]:
    """Every event every environment recorded under ``record_dir``."""
    return [json.loads(line) for path in sorted(record_dir.glob("*.jsonl")) for line in path.read_text().splitlines()]


class Staggered(MultiAgentEnv):
    """Agents ``a0 .. a{n-1}``, agent ``i`` observing on the steps ``t`` of an episode where
    ``t % periods[i] == 0``, and every episode ``length`` steps long: so how many steps each agent
    takes in a fragment is known in advance (:func:`agent_steps`).

    Agent ``i`` observes ``[i, k]`` (``k``: how often it has observed this episode), ``wide``
    agents (odd ``i``, with ``env_config["wide"]``) ``[i, k, 0]`` and act in ``Discrete(50)``,
    the others in ``Discrete(100)``. Each action is recorded with the agent, its ``k`` and its
    episode; so is an action for an agent that was not asked to act (``"unasked"``).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.periods: list[int] = list(config.get("periods", [1, 2, 3, 4]))
        self.length: int = config.get("length", 7)
        wide = config.get("wide", False)
        self.possible_agents = [f"a{i}" for i in range(len(self.periods))]
        self.observation_spaces = {agent: gym.spaces.Box(0, 100, (3 if wide and i % 2 else 2,))
                                   for i, agent in enumerate(self.possible_agents)}
        self.action_spaces = {agent: gym.spaces.Discrete(50 if wide and i % 2 else 100)
                              for i, agent in enumerate(self.possible_agents)}
        self.record = Recorder(config.get("record_dir"))
        self.episode = -1

    def _observe(self) -> dict[str, np.ndarray]:
        obs = {}
        for i, agent in enumerate(self.possible_agents):
            if self.t % self.periods[i] == 0:
                seen = np.zeros(self.observation_spaces[agent].shape, np.float32)
                seen[:2] = i, self.seen[agent]
                obs[agent] = seen
                self.seen[agent] += 1
        self.asked = set(obs)
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        self.seen = dict.fromkeys(self.possible_agents, 0)
        return self._observe(), {}

    def step(self, action_dict: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        for agent, action in action_dict.items():
            self.record(episode=self.episode, agent=agent, k=self.seen[agent] - 1, action=int(action),
                        unasked=agent not in self.asked)
        rewards = dict.fromkeys(action_dict, 1.0)
        self.t += 1
        if self.t == self.length:
            return {}, rewards, {"__all__": True}, {"__all__": False}, {}
        return self._observe(), rewards, {"__all__": False}, {"__all__": False}, {}


register_env("staggered", Staggered)


def agent_steps(periods: list[int], length: int, first: int, last: int) -> tuple[list[int], list[int]]:
    """Each agent of :class:`Staggered` in its environment's steps ``first .. last - 1`` (counted
    from its first reset): how many steps it acts on, and how many of its steps close (it observes
    again, or the episode ends). A step closes in the environment step that returns the agent's
    next observation, or in the episode's last: a step still open is carried into the next fragment."""
    acted, closed = [0] * len(periods), [0] * len(periods)
    for i, period in enumerate(periods):
        for step in range(first - length, last):  # from an episode before: steps closing in this fragment
            t = step % length
            if step < 0 or t % period:
                continue
            acted[i] += step >= first
            closed[i] += first <= step + min(period, length - t) - 1 < last
    return acted, closed


class Counter(Policy):
    """A hand-written policy whose action is 10 x the agent's index + how many times it has acted
    this episode: a count it keeps in its recurrent state, which must therefore be each agent's
    own and start again at every episode."""

    def get_initial_state(self) -> list[Any]:
        return [np.zeros((), np.int64)]

    def compute_actions(self, obs_batch: Any, state_batches: list[Any] | None = None, prev_action_batch: Any = None,
                        prev_reward_batch: Any = None, info_batch: Any = None, episodes: Any = None,
                        **kwargs: Any) -> tuple[Any, list[Any], dict[str, Any]]:
        assert state_batches is not None
        (counts,) = state_batches
        return 10 * np.asarray(obs_batch)[:, 0].astype(np.int64) + counts, [counts + 1], {}


class RecordedGame(BaseWrapper):
    """A PettingZoo AEC game that records each move it receives: the agent whose turn it was, the
    move, and whether its action mask allowed it."""

    def __init__(self, env: Any, record: Recorder) -> None:
        super().__init__(env)
        self.record = record

    def step(self, action: Any) -> None:
        if action is not None:  # PettingZoo's step of a done agent
            mask = self.observe(self.agent_selection)["action_mask"]
            self.record(level="game", agent=self.agent_selection, action=int(action), legal=bool(mask[int(action)]))
        super().step(action)


class RecordedPettingZooEnv(PettingZooEnv):
    """:class:`PettingZooEnv` recording, with each step, which agents the worker sent actions for
    and whose turn it was."""

    def __init__(self, env: Any, record: Recorder) -> None:
        super().__init__(env)
        self.record = record

    def step(self, action_dict: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.record(level="env", sent=sorted(action_dict), mover=self.env.agent_selection)
        return super().step(action_dict)


def recorded_connect_four(config: dict[str, Any]) -> RecordedPettingZooEnv:
    record = Recorder(config.get("record_dir"))
    return RecordedPettingZooEnv(RecordedGame(connect_four_v3.env(), record), record)


register_env("recorded_connect_four", recorded_connect_four)
