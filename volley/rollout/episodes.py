"""A rollout worker's episodes, for the episode hooks of a user's callbacks class.

A worker builds an :class:`EpisodeTracker` only when its callbacks override an episode hook
(``on_episode_start``, ``_step``, ``_end``, ``_created``, ``on_postprocess_trajectory``), so
without one its step loop does nothing more than an ``is None`` check. The tracker follows
the worker's vector of environments in Gymnasium's ``NEXT_STEP`` autoreset mode: an episode
ends on the step that terminates or truncates it (``on_episode_step``, then
``on_episode_end``), its successor is created then (``on_episode_created``) and starts on the
next step, which resets that environment (``on_episode_start``). An environment that fails and
is made again drops its episode without an end, as the worker drops its steps.

The episodes read the worker's latest step through one :class:`StepView`, updated once a
step, so following an episode costs nothing per step unless ``on_episode_step`` is overridden.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

import gymnasium as gym
import numpy as np

from volley.callbacks import EPISODE_HOOKS, EnvContext, Hooks
from volley.config import AlgorithmConfig
from volley.episode import AGENT_ID, POLICY_ID, Episode, EpisodeRecord, Policies
from volley.guarded_env import ERROR_INFO, GuardedVectorEnv, guarded_envs
from volley.rollout.batch import Batch

if TYPE_CHECKING:
    from volley.torch_networks.policy import Policy


class EnvHost(Protocol):
    """What is read of a worker (a :class:`~volley.rollout.worker.RolloutWorker`) to give its
    environments to a hook, which gets the worker itself as ``worker``."""

    config: AlgorithmConfig
    worker_index: int
    num_workers: int
    num_envs: int
    env: gym.vector.VectorEnv  # made again when a native vector env fails: read it each time
    hooks: Hooks


class WorkerView(EnvHost, Protocol):
    """What the episodes read of their worker."""

    env_indices: list[int]  # each environment's global index
    action_space: gym.Space

    @property
    def policy(self) -> Policy: ...

    # [N] each environment's running episode's steps and return so far: the worker's own arrays,
    # updated in place, which the episodes keep by reference
    @property
    def running_lengths(self) -> np.ndarray: ...

    @property
    def running_returns(self) -> np.ndarray: ...


def env_item(values: Any, env: int) -> Any:
    """Environment ``env``'s part of a vector's observation (arrays, or dicts and tuples of them)."""
    if isinstance(values, dict):
        return {key: env_item(value, env) for key, value in values.items()}
    if isinstance(values, tuple):
        return tuple(env_item(value, env) for value in values)
    return values[env]


def env_info(infos: list[dict] | dict, env: int) -> dict:
    """Environment ``env``'s info: a vector of volley's keeps each env's own dict; a native one
    has Gymnasium's form (an array per key and a ``_key`` mask saying which envs set it)."""
    if isinstance(infos, list):
        return infos[env]
    return {key: env_info(value, env) if isinstance(value, dict) else value[env]
            for key, value in infos.items()
            if not key.startswith("_") and key != ERROR_INFO and infos.get("_" + key, [True] * (env + 1))[env]}


class StepView:
    """The worker's latest vector step, which its running episodes read (a ``StepSource``)."""

    def __init__(self, lengths: np.ndarray, returns: np.ndarray, no_actions: np.ndarray) -> None:
        self.lengths, self.returns = lengths, returns  # the worker's own counters, updated in place
        self.raw: Any = None
        self.obs = self.rewards = self.prev_rewards = np.zeros(0)
        self.actions = self.prev_actions = no_actions  # [N, *action_shape] zeros until the first step
        self.terminated = self.truncated = np.zeros(0, bool)
        self.infos: list[dict] | dict = {}

    def update(self, raw: Any, obs: np.ndarray, infos: list[dict] | dict, actions: np.ndarray,
               rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        self.prev_actions, self.prev_rewards = self.actions, self.rewards
        self.raw, self.obs, self.infos, self.actions, self.rewards = raw, obs, infos, actions, rewards
        self.terminated, self.truncated = terminated, truncated

    def value(self, key: str, env: int) -> Any:
        if key == "raw_obs":
            return env_item(self.raw, env)
        if key == "info":
            return env_info(self.infos, env)
        return getattr(self, {"action": "actions", "prev_action": "prev_actions", "reward": "rewards",
                              "prev_reward": "prev_rewards"}.get(key, key))[env]

    def length(self, env: int) -> int:
        return int(self.lengths[env])

    def total_reward(self, env: int) -> float:
        return float(self.returns[env])

    def frozen(self, **changes: Any) -> StepView:
        """This step as it is now (its arrays are new every step: the worker keeps them in its
        fragment too), with ``changes``."""
        step = object.__new__(StepView)
        step.__dict__.update(self.__dict__, **changes)
        return step


class BaseEnvView:
    """RLlib's ``base_env``: the worker's vector of environments."""

    def __init__(self, worker: EnvHost) -> None:
        self.worker = worker

    def get_sub_environments(self, as_dict: bool = False) -> list[Any] | dict[int, Any]:
        """Each environment of the vector (none for a native vector env: CartPole's, ALE's)."""
        guards = guarded_envs(self.worker.env)
        envs = [guard.env for guard in guards] if guards is not None else []
        return dict(enumerate(envs)) if as_dict else envs

    @property
    def num_envs(self) -> int:
        return self.worker.num_envs

    @property
    def vector_env(self) -> Any:
        return self.worker.env


def sub_environments_created(worker: EnvHost, indices: list[int] | None = None) -> None:
    """``on_sub_environment_created`` for environments ``indices`` of ``worker`` (all by default;
    a native vector env comes as itself, ``env_index=None``)."""
    guards = guarded_envs(worker.env)
    envs = [(None, worker.env)] if guards is None else [(j, guards[j].env) for j in indices or range(len(guards))]
    for index, env in envs:
        context = EnvContext(worker.config.env_config, worker.worker_index, index, worker.num_workers)
        worker.hooks("on_sub_environment_created", worker=worker, sub_environment=env, env_context=context,
                     env_index=index)


def each_env(worker: EnvHost) -> list[tuple[Any, EnvContext]]:
    """Each environment of ``worker`` as RLlib's ``foreach_env_with_context`` gives it: the
    environment itself (under volley's wrappers; a native vector env as itself) and its context."""
    guards = guarded_envs(worker.env)
    envs = [(None, worker.env)] if guards is None else [(j, guard.unwrapped) for j, guard in enumerate(guards)]
    return [(env, EnvContext(worker.config.env_config, worker.worker_index, index, worker.num_workers))
            for index, env in envs]


class EpisodeTracker:
    """One :class:`~volley.callbacks.Episode` per environment of a worker, and the episode hooks."""

    def __init__(self, worker: WorkerView, hooks: Hooks) -> None:
        num_envs = worker.num_envs
        self.worker, self.hooks = worker, hooks
        space = worker.action_space
        self.view = StepView(worker.running_lengths, worker.running_returns,
                             np.zeros((num_envs, *(space.shape or ())), space.dtype))
        self.used = {hook: hooks.uses(hook) for hook in EPISODE_HOOKS}
        self.guarded = guarded_envs(worker.env) is not None  # a native vector env stays one when made again
        self.base_env = BaseEnvView(worker)
        self.policies = Policies(lambda: worker.policy)
        self.running: list[Episode | None] = [None] * num_envs
        self.created: list[Episode | None] = [None] * num_envs  # created, to start at the env's next reset
        self.ended: dict[int, Episode] = {}  # ended on the latest step: finish() reports them
        self.restarted: dict[int, StepView] = {}  # the reset of each failed env made again
        self.fragment: list[list[Episode]] = [[] for _ in range(num_envs)]  # ended in this fragment
        self.counts = [0] * num_envs
        self.steps = hooks.uses("on_episode_step")
        self.trajectories_used = hooks.uses("on_postprocess_trajectory")

    def _call(self, hook: str, env: int, episode: Episode) -> None:
        if self.used[hook]:
            self.hooks(hook, worker=self.worker, base_env=self.base_env, policies=self.policies,
                       episode=episode, env_index=env)

    def _create(self, env: int) -> Episode:
        self.counts[env] += 1  # the id is unique over all workers: the env's global index, then a count
        episode = Episode((self.worker.env_indices[env] << 32) + self.counts[env], env, self.worker, self.view)
        self._call("on_episode_created", env, episode)
        return episode

    def _infos(self, infos: dict) -> list[dict] | dict:
        """Each env's own infos where the vector keeps them (a GuardedVectorEnv), else the vector's."""
        return cast(GuardedVectorEnv, self.worker.env).sub_infos if self.guarded else infos

    def before_reset(self) -> None:
        """Every environment is about to be reset: their running episodes are abandoned."""
        self.running = [None] * len(self.running)
        self.new_fragment()
        self.created = [episode or self._create(j) for j, episode in enumerate(self.created)]

    def reset(self, raw: Any, obs: np.ndarray, infos: dict) -> None:
        """Every environment was reset (and any that failed were made again)."""
        self._start(range(len(self.running)), self.view.frozen(raw=raw, obs=obs, infos=self._infos(infos)))

    def recovered(self, failed: np.ndarray, raw: Any, obs: np.ndarray, infos: dict) -> None:
        """The ``failed`` environments were made again and reset to ``obs``: their episodes are
        dropped, and new ones start with the step being taken."""
        reset = self.view.frozen(raw=raw, obs=obs, infos=self._infos(infos))
        for j in failed.nonzero()[0].tolist():
            self.running[j] = None
            self.restarted[j] = reset

    def new_fragment(self) -> None:
        self.fragment = [[] for _ in self.fragment]

    def step(self, raw: Any, obs: np.ndarray, infos: dict, actions: np.ndarray, rewards: np.ndarray,
             terminated: np.ndarray, truncated: np.ndarray, valid: np.ndarray, ended: np.ndarray) -> None:
        """After a vector step: ``valid`` environments took a step of their episode, ``ended``
        ones ended it, the others were reset (on their step after an end, or made again)."""
        kept = self._infos(infos)
        self.view.update(raw, obs, kept, actions, rewards, terminated, truncated)
        if self.ended:
            self.ended = {}
        if self.steps:  # the hot path of the one per-step hook: no helper between the loop and the hook
            call, running = self.hooks, self.running
            for j in valid.nonzero()[0].tolist():
                call("on_episode_step", worker=self.worker, base_env=self.base_env, policies=self.policies,
                     episode=running[j], env_index=j)
        if np.count_nonzero(ended):
            for j in ended.nonzero()[0].tolist():
                episode = self._running(j)
                episode.end()
                self._call("on_episode_end", j, episode)
                self.ended[j] = episode
                if self.trajectories_used:
                    self.fragment[j].append(episode)
                self.running[j], self.created[j] = None, self._create(j)
        if np.count_nonzero(valid) < len(valid):
            self._start((~valid).nonzero()[0].tolist(), self.view.frozen())

    def _running(self, env: int) -> Episode:
        episode = self.running[env]
        assert episode is not None, f"environment {env} runs no episode"
        return episode

    def _start(self, envs: Any, reset: StepView) -> None:
        """Episodes start in ``envs``, whose observations and infos ``reset`` holds (except where
        a failed env was made again: its own reset's)."""
        for j in envs:
            episode = self.created[j] or self._create(j)
            self.created[j] = None
            episode.begin(self.restarted.pop(j, reset))
            self.running[j] = episode
            self._call("on_episode_start", j, episode)

    def finish(self, counted: np.ndarray) -> list[EpisodeRecord]:
        """The records of the ``counted`` episodes among those that ended on the latest step."""
        return [self.ended[j].record() for j in counted.nonzero()[0].tolist()]

    def trajectories(self, batch: Batch, valid: np.ndarray, ends: np.ndarray) -> None:
        """``on_postprocess_trajectory`` for each episode's rows of a worker's env-major ``batch``
        (``valid`` and ``ends`` are ``[N, T]``: which steps the batch kept, which ended an
        episode). A column a hook replaces is written back into ``batch``; a column it adds is
        zero in the other episodes' rows."""
        start = 0
        for j in range(len(valid)):
            rows_ended = ends[j][valid[j]]  # [rows of env j]: does this row end its episode
            bounds = (np.flatnonzero(rows_ended) + 1).tolist()
            episodes = list(self.fragment[j])
            if len(rows_ended) and not rows_ended[-1]:  # the rows of the episode still running
                bounds.append(len(rows_ended))
                episodes.append(self._running(j))
            for episode, first, last in zip(episodes, [0, *bounds[:-1]], bounds, strict=True):
                self._trajectory(batch, episode, start + first, start + last)
            start += len(rows_ended)

    def _trajectory(self, batch: Batch, episode: Episode, first: int, last: int) -> None:
        with batch.rows_to_edit(first, last) as rows:
            self.hooks("on_postprocess_trajectory", worker=self.worker, episode=episode, agent_id=AGENT_ID,
                       policy_id=POLICY_ID, policies=self.policies, postprocessed_batch=rows, original_batches={})
