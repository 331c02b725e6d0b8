"""The episode the callbacks' hooks see: RLlib's ``Episode`` of one environment, read from its
worker's latest step, and the ``policies`` mapping they are given.

An episode's hooks put numbers in ``episode.custom_metrics`` and lists in ``episode.hist_data``;
:meth:`Episode.record` is what travels back with the worker's samples
(:mod:`volley.custom_metrics` summarises it at the driver).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np

AGENT_ID = "agent0"  # RLlib's single agent (_DUMMY_AGENT_ID)
POLICY_ID = "default_policy"

EpisodeRecord = tuple[dict[str, Any], dict[str, list[Any]]]  # (custom_metrics, hist_data) of one episode


# RLlib's Episode internals that volley's episodes have no counterpart of, and what gives the same
RLLIB_EPISODE_INTERNALS = {
    name: "RLlib's collector of the episode's sample batches; on_episode_end runs only once the episode "
          "ended (episode.last_done_for() is True), and on_postprocess_trajectory's postprocessed_batch "
          "holds its rows" for name in ("batch_builder", "new_batch_builder")}


class RLlibEpisodeInternals:
    """An episode's refusal of RLlib's internals (``episode.batch_builder``), in one line saying what
    to use instead, where a plain AttributeError would only say that the name is missing."""

    def __getattr__(self, name: str) -> Any:
        if name in RLLIB_EPISODE_INTERNALS:
            raise AttributeError(f"RLlib's Episode.{name} has no counterpart in volley: "
                                 f"{RLLIB_EPISODE_INTERNALS[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class Episode(RLlibEpisodeInternals):
    """One episode of one environment, as RLlib's ``Episode`` / ``EpisodeV2`` shows it to the hooks.

    ``custom_metrics`` (numbers; summarised at the driver), ``hist_data`` (lists; concatenated
    into ``hist_stats``), ``user_data`` (anything, kept for the episode's hooks), ``media``
    (kept, not reported). ``length`` and ``total_reward`` count the steps taken so far; the
    ``last_*_for()`` methods read the latest step (RLlib's ``agent_id`` argument is accepted:
    there is one agent). They read the worker's current step (``step``, a :class:`StepSource`),
    so following an episode costs nothing per step; at its end that step is kept (its arrays
    are new every step: the worker keeps them too, in its fragment).
    """

    def __init__(self, episode_id: int, env_id: int, worker: Any, step: StepSource) -> None:
        self.episode_id = episode_id
        self.env_id = env_id
        self.worker = worker
        self.custom_metrics: dict[str, Any] = {}
        self.user_data: dict[str, Any] = {}
        self.hist_data: dict[str, list[Any]] = {}
        self.media: dict[str, Any] = {}
        self._step = step
        self._first = step  # the reset that started it (its observation and info)
        self._final: tuple[int, float] | None = None  # its length and return, once it ended

    def begin(self, first: StepSource) -> None:
        """The environment was reset: ``first`` holds its first observation and info."""
        self._first = first

    def end(self) -> None:
        """Keep the step the episode ended on (the worker's moves on), its length and its return."""
        self._final = self.length, self.total_reward
        self._step = self._step.frozen()

    def _read(self, key: str) -> Any:
        steps = self.length
        if key in ("action", "prev_action"):
            if steps <= (0 if key == "action" else 1):  # none taken yet: zeros, as in RLlib
                return np.zeros_like(self._step.value("action", self.env_id))
        elif key in ("reward", "prev_reward"):
            if steps <= (0 if key == "reward" else 1):
                return 0.0
        elif steps == 0:
            return False if key in ("terminated", "truncated") else self._first.value(key, self.env_id)
        return self._step.value(key, self.env_id)

    @property
    def length(self) -> int:
        return self._final[0] if self._final is not None else self._step.length(self.env_id)

    @property
    def total_reward(self) -> float:
        return self._final[1] if self._final is not None else self._step.total_reward(self.env_id)

    total_env_steps = total_agent_steps = length

    @property
    def agent_rewards(self) -> dict[tuple[str, str], float]:
        return {(AGENT_ID, POLICY_ID): self.total_reward}

    def last_observation_for(self, agent_id: str = AGENT_ID) -> np.ndarray:
        """The latest observation as the policy takes it (preprocessed, before the observation filter)."""
        return self._read("obs")

    def last_raw_obs_for(self, agent_id: str = AGENT_ID) -> Any:
        """The latest observation as the environment returned it."""
        return self._read("raw_obs")

    def last_info_for(self, agent_id: str = AGENT_ID) -> dict:
        """The info dict of the latest step (or of the reset)."""
        return self._read("info")

    def last_action_for(self, agent_id: str = AGENT_ID) -> np.ndarray:
        """The policy's latest action (zeros before the first step)."""
        return self._read("action")

    def prev_action_for(self, agent_id: str = AGENT_ID) -> np.ndarray:
        """The action before the latest one (zeros before the second step)."""
        return self._read("prev_action")

    def last_reward_for(self, agent_id: str = AGENT_ID) -> float:
        return float(self._read("reward"))

    def prev_reward_for(self, agent_id: str = AGENT_ID) -> float:
        """The reward before the latest one (0 before the second step)."""
        return float(self._read("prev_reward"))

    def last_terminated_for(self, agent_id: str = AGENT_ID) -> bool:
        return bool(self._read("terminated"))

    def last_truncated_for(self, agent_id: str = AGENT_ID) -> bool:
        return bool(self._read("truncated"))

    def last_done_for(self, agent_id: str = AGENT_ID) -> bool:
        return self.last_terminated_for() or self.last_truncated_for()

    def policy_for(self, agent_id: str = AGENT_ID) -> str:
        return POLICY_ID

    def get_agents(self) -> list[str]:
        return [AGENT_ID]

    def record(self) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """What the driver summarises: the custom metrics and the histogram data."""
        return self.custom_metrics, self.hist_data


class StepSource(Protocol):
    """What an :class:`Episode` reads: the latest step of its worker's environments
    (``volley.rollout.episodes.StepView``), or once it ended, the step it ended on."""

    def value(self, key: str, env: int) -> Any: ...

    def length(self, env: int) -> int: ...

    def total_reward(self, env: int) -> float: ...

    def frozen(self) -> StepSource:
        """This step, kept as it is now."""
        ...


class Policies(Mapping[str, Any]):
    """RLlib's ``policies``: ``{"default_policy": the worker's torch network}``, built when first read."""

    def __init__(self, policy: Callable[[], Any]) -> None:
        self._policy = policy

    def __getitem__(self, key: str) -> Any:
        if key != POLICY_ID:
            raise KeyError(key)
        return self._policy()

    def __iter__(self) -> Iterator[str]:
        return iter([POLICY_ID])

    def __len__(self) -> int:
        return 1
