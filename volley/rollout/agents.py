"""Agent trajectories of a multi-agent worker, cut into each policy's fragment, and the episodes
they belong to.

An agent's transition opens when it acts (its observation, action, value, log-probability) and
closes when it observes again or is done, holding every reward it received in between: in a
turn-based game the reward for a move comes after the other players' moves, as in RLlib. Closed
transitions are kept per agent in time order; at the end of a fragment each policy's agents'
trajectories are laid end to end as one time-major column ``[R, 1]`` with a cut after each, so
the algorithm's own ``postprocess`` (GAE, n-step returns, Monte-Carlo returns) runs once per
policy and never crosses from one agent to another. Transitions still open then are carried
into the next fragment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from volley.episode import EpisodeRecord, RLlibEpisodeInternals
from volley.rollout.batch import STATE_IN


@dataclass
class Transition:
    """One agent's step: open from its action until its next observation (or its end)."""

    obs: np.ndarray
    action: np.ndarray
    logp: float
    value: float
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    next_obs: np.ndarray | None = None  # the observation it led to (filtered); None while open
    # a recurrent network's state before and after the step (one array per tensor), and the previous
    # action and reward it read (lstm_use_prev_*): empty and None for a feed-forward one
    state_in: list[np.ndarray] = field(default_factory=list)
    state_out: list[np.ndarray] = field(default_factory=list)
    prev: tuple[np.ndarray, float] | None = None


@dataclass
class AgentTrajectory:
    """One agent's closed transitions of one episode since the last fragment, and its open one."""

    policy_id: str
    closed: list[Transition] = field(default_factory=list)
    open: Transition | None = None
    episode_return: float = 0.0
    state: list[np.ndarray] = field(default_factory=list)  # a recurrent network's state for its next step
    last: tuple[np.ndarray, float] | None = None  # its last closed step's action and reward

    def close(self, next_obs: np.ndarray | None, terminated: bool, truncated: bool) -> None:
        """The open transition led to ``next_obs`` (ended there with ``terminated``/``truncated``)."""
        assert self.open is not None
        self.open.next_obs, self.open.terminated, self.open.truncated = next_obs, terminated, truncated
        self.closed.append(self.open)
        self.last = (self.open.action, self.open.reward)
        self.open = None


@dataclass
class AgentEpisode(RLlibEpisodeInternals):
    """One episode of a multi-agent environment as RLlib's mapping functions and episode hooks read
    it: its id (random, as RLlib's), environment, length and rewards so far, each agent's policy
    and latest observation and reward, and what the hooks keep (``custom_metrics``,
    ``hist_data``: summarised at the driver; ``user_data``)."""

    episode_id: int
    env_id: int
    worker: Any = None
    length: int = 0
    total_agent_steps: int = 0  # the steps its agents acted on (RLlib's EpisodeV2 counts them so)
    total_reward: float = 0.0
    agent_rewards: dict[tuple[Any, str], float] = field(default_factory=dict)  # by (agent id, policy id)
    custom_metrics: dict[str, Any] = field(default_factory=dict)
    user_data: dict[str, Any] = field(default_factory=dict)
    hist_data: dict[str, list[Any]] = field(default_factory=dict)
    media: dict[str, Any] = field(default_factory=dict)
    policies: dict[Any, str] = field(default_factory=dict)  # agent id -> policy id
    last_obs: dict[Any, Any] = field(default_factory=dict)
    last_rewards: dict[Any, float] = field(default_factory=dict)
    last_infos: dict[Any, Any] = field(default_factory=dict)

    def policy_for(self, agent_id: Any = None) -> str:
        return self.policies[agent_id]

    def last_observation_for(self, agent_id: Any = None) -> Any:
        return self.last_obs.get(agent_id)

    def last_reward_for(self, agent_id: Any = None) -> float:
        return self.last_rewards.get(agent_id, 0.0)

    def last_info_for(self, agent_id: Any = None) -> Any:
        return self.last_infos.get(agent_id)

    def get_agents(self) -> list[Any]:
        return list(self.policies)

    def record(self) -> EpisodeRecord:
        return self.custom_metrics, self.hist_data


# an episode of a worker's environment and its agents' trajectories, by agent id
EpisodeAgents = tuple[AgentEpisode, dict[Any, AgentTrajectory]]


# (policy id, the last steps of trajectories cut without a terminal) -> the values [B] of the observations
# they led to (a recurrent network's from the state after each step)
ValueFn = Callable[[str, list[Transition]], np.ndarray]


def policy_columns(trajectories: list[AgentTrajectory], value_of: ValueFn) -> dict[str, dict[str, np.ndarray]]:
    """Each policy's closed transitions as time-major columns ``[R, 1]``: its agents' trajectories end
    to end, ``cuts`` after each. ``next_values`` is the next transition's value within a trajectory,
    0 after a terminal, and at a trajectory's end that is not terminal (a truncation, or the
    fragment's end) the value of the observation it led to, from ``value_of`` (one call per policy).
    A recurrent network's rows also hold the state each step started from (``state_in_<k>``) and,
    where it reads them, the previous action and reward (``prev_actions``, ``prev_rewards``)."""
    by_policy: dict[str, list[AgentTrajectory]] = {}
    for trajectory in trajectories:
        if trajectory.closed:
            by_policy.setdefault(trajectory.policy_id, []).append(trajectory)
    columns = {}
    for policy_id, group in by_policy.items():
        rows = [t for trajectory in group for t in trajectory.closed]
        last = np.cumsum([len(trajectory.closed) for trajectory in group]) - 1
        cuts = np.zeros(len(rows), bool)
        cuts[last] = True
        values = np.array([t.value for t in rows], np.float32)
        terminated = np.array([t.terminated for t in rows])
        next_values = np.empty_like(values)
        next_values[:-1] = values[1:]
        ends = last[~terminated[last]]  # cut without a terminal: bootstrapped from the last observation
        if len(ends):
            next_values[ends] = value_of(policy_id, [rows[i] for i in ends.tolist()])
        next_values[terminated] = 0.0
        obs = np.stack([t.obs for t in rows])
        column: dict[str, Any] = {
            "obs": obs, "next_obs": np.stack([t.next_obs for t in rows]),  # type: ignore[misc]
            "actions": np.stack([t.action for t in rows]), "logp": np.array([t.logp for t in rows], np.float32),
            "values": values, "next_values": next_values,
            "rewards": np.array([t.reward for t in rows], np.float32), "terminated": terminated,
            "truncated": np.array([t.truncated for t in rows]), "cuts": cuts, "valid": np.ones(len(rows), bool)}
        for k in range(len(rows[0].state_in)):
            column[f"{STATE_IN}{k}"] = np.stack([t.state_in[k] for t in rows])
        if rows[0].prev is not None:
            column["prev_actions"] = np.stack([t.prev[0] for t in rows])  # type: ignore[index]
            column["prev_rewards"] = np.array([t.prev[1] for t in rows], np.float32)  # type: ignore[index]
        columns[policy_id] = {key: value[:, None] for key, value in column.items()}
    return columns
