"""Agent trajectories of a multi-agent worker, cut into each policy's fragment.

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
    state: list[np.ndarray] = field(default_factory=list)  # a recurrent policy's state it acted from


@dataclass
class AgentTrajectory:
    """One agent's closed transitions of one episode since the last fragment, and its open one."""

    policy_id: str
    closed: list[Transition] = field(default_factory=list)
    open: Transition | None = None
    episode_return: float = 0.0
    state: list[np.ndarray] = field(default_factory=list)  # a recurrent policy's state for its next step

    def close(self, next_obs: np.ndarray, terminated: bool, truncated: bool) -> None:
        """The open transition led to ``next_obs`` (ended there with ``terminated``/``truncated``)."""
        assert self.open is not None
        self.open.next_obs, self.open.terminated, self.open.truncated = next_obs, terminated, truncated
        self.closed.append(self.open)
        self.open = None


# (policy id, filtered observations [B, ...], recurrent state [B, ...] per tensor) -> values [B]
ValueFn = Callable[[str, np.ndarray, list[np.ndarray]], np.ndarray]


def policy_columns(trajectories: list[AgentTrajectory], value_of: ValueFn) -> dict[str, dict[str, np.ndarray]]:
    """Each policy's closed transitions as time-major columns ``[R, 1]``: its agents' trajectories end
    to end, ``cuts`` after each. ``next_values`` is the next transition's value within a trajectory,
    0 after a terminal, and at a trajectory's end that is not terminal (a truncation, or the
    fragment's end) the value of the observation it led to, from ``value_of`` (one call per policy,
    from each agent's current state). A recurrent policy's columns add the state each transition
    acted from, ``state_in_k`` ``[R, 1, ...]``."""
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
            at_end = [trajectory for trajectory, end in zip(group, last, strict=True) if not terminated[end]]
            states = [np.stack(column) for column in zip(*(t.state for t in at_end), strict=True)]
            next_values[ends] = value_of(policy_id, np.stack([rows[i].next_obs for i in ends]), states)
        next_values[terminated] = 0.0
        obs = np.stack([t.obs for t in rows])
        column: dict[str, Any] = {
            "obs": obs, "next_obs": np.stack([t.next_obs for t in rows]),  # type: ignore[misc]
            "actions": np.stack([t.action for t in rows]), "logp": np.array([t.logp for t in rows], np.float32),
            "values": values, "next_values": next_values,
            "rewards": np.array([t.reward for t in rows], np.float32), "terminated": terminated,
            "truncated": np.array([t.truncated for t in rows]), "cuts": cuts, "valid": np.ones(len(rows), bool)}
        for k, state in enumerate(zip(*(t.state for t in rows), strict=True)):
            column[f"{STATE_IN}{k}"] = np.stack(state)
        columns[policy_id] = {key: value[:, None] for key, value in column.items()}
    return columns
