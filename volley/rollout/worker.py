"""RolloutWorker: a vector of environments and a copy of the policy, producing batches.

A plain class: the local engine calls it in-process, the Ray engine wraps it with
``ray.remote``. Per step it runs **one** batched forward pass for all of its
environments. Environment ``i`` (counted over all workers) is seeded ``seed + i``
and draws its actions from its own random stream, so a run is a function of its
config and seed.

The per-step loop is :mod:`volley.rollout.stepping`'s, the recovery of failed environments
:mod:`volley.rollout.recovery`'s, the random streams :mod:`volley.rollout.streams`'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from volley.acting import NumpyActor, load_flat_weights, zero_actions
from volley.callbacks import EPISODE_HOOKS, DefaultCallbacks, EnvContext, Hooks
from volley.config import AlgorithmConfig, RolloutPlan
from volley.envs import EnvCreator, VectorOf, check_normalizable, make_vector_env
from volley.episode import EpisodeRecord
from volley.guarded_env import GuardedVectorEnv
from volley.network_spec import NetworkSpec
from volley.networks.numpy_layers import Acting, Previous, State
from volley.rollout.advantages import bootstrap_ends
from volley.rollout.batch import Batch
from volley.rollout.episodes import EpisodeTracker, each_env, sub_environments_created
from volley.rollout.filters import FilterStats, RewardNormalizer, make_filter
from volley.rollout.sequences import PREVIOUS, stored_states
from volley.rollout.stepping import StepLoop
from volley.rollout.streams import EnvStreams
from volley.spaces import action_layout

if TYPE_CHECKING:
    from volley.torch_networks.policy import Policy

Postprocess = Callable[[dict[str, np.ndarray], AlgorithmConfig], dict[str, np.ndarray]]


@dataclass
class SampleResult:
    """What one worker returns per iteration."""

    batch: Batch  # flat, env-major: each environment's steps in time order
    episode_returns: np.ndarray  # [episodes completed during this sample]
    episode_lengths: np.ndarray
    filter_delta: FilterStats | None  # observation and reward statistics gathered since the last sync
    env_steps: int  # valid steps taken (the batch's rows, unless the postprocess added some)
    env_errors: int = 0  # environments that failed and were recreated during this sample
    # each completed episode's (custom_metrics, hist_data), where the callbacks use episode hooks
    episode_metrics: list[EpisodeRecord] = field(default_factory=list)


class RolloutWorker(StepLoop):
    """Owns ``num_envs_per_worker`` environments and samples them with the current weights."""

    def __init__(self, config: AlgorithmConfig, worker_index: int, postprocess: Postprocess,
                 env_creator: EnvCreator | None = None, num_envs: int | None = None,
                 seed_offset: int = 0, render_mode: str | None = None, *, plan: RolloutPlan,
                 slot: int | None = None, network_spec: NetworkSpec | None = None,
                 callbacks_class: type[DefaultCallbacks] | None = None, env_vector: VectorOf | None = None) -> None:
        """``plan`` holds the sizes the driver resolved (never resolved again here). ``slot`` is
        this worker's place among all workers ever created (default ``worker_index``): a
        replacement gets a new one, so its environments ``slot·N … slot·N + N − 1`` take seeds
        no other environment had. ``network_spec`` is the policy the driver resolved, its classes with it (the
        recipe brings it; None: resolved from ``config`` in this process), bound here to the
        environment's spaces; ``callbacks_class`` the one ``config`` names (found in this process
        when not given); ``env_vector`` what holds the environments (default: this process; the Ray
        engine's actors with ``remote_worker_envs``)."""
        self.config = config
        self.worker_index = worker_index
        self.num_workers = plan.num_workers
        kind = "rollout" if seed_offset == 0 else "evaluation"
        self.hooks = Hooks.of(config.callbacks_class, f" in {kind} worker {worker_index}", callbacks_class)
        self.postprocess = postprocess
        self.num_envs = num_envs or plan.num_envs_per_worker
        self.fragment_length = plan.fragment_length
        self.env_creator = env_creator
        self.render_mode = render_mode
        self.env_vector = env_vector
        self.network_spec = network_spec or NetworkSpec.of(config)  # bound to the spaces below, once the environment exists
        self.env = self._make_env()
        first = seed_offset + (worker_index if slot is None else slot) * self.num_envs
        self.env_indices = list(range(first, first + self.num_envs))
        self.streams = EnvStreams(config.seed, self.env_indices)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self.network_spec = self.network_spec.with_spaces(self.observation_space, self.action_space)
        # the observation's columns, an action mask among them (a Dict observation's action_mask_key)
        self.preprocess = self.network_spec.observation
        # volley's MLP acts in numpy; the torch network is built only when something needs it (a
        # CNN's or a custom model's forward pass, a custom distribution's draw, an algorithm's
        # worker-side function), so a worker that only acts through an MLP never imports torch: a
        # second less to start each Ray worker. Built before the check of normalize_actions, so that
        # a network that cannot act in this action space says so (SAC's needs a bounded float Box).
        self.actor = NumpyActor.of(self.network_spec)
        self._mask_layout = None if self.preprocess.mask is None else action_layout(self.action_space)
        if config.normalize_actions:
            check_normalizable(self.action_space, config.env)
        self._policy: Policy | None = None
        # each environment's recurrent state, one array [N, ...] per tensor of the network's state:
        # fed to every forward pass, reset to the initial state where an episode starts; [] for a
        # feed-forward network. The arrays are replaced each step, never changed in place, so a
        # fragment keeps each step's state by reference (volley.rollout.sequences)
        self._state: State = []
        # each environment's previous action and reward, for a network that reads them (else None)
        self._prev: Previous = None
        self._weights: np.ndarray | None = None  # the flat weights last loaded
        self.obs_filter = make_filter(config.observation_filter, self.preprocess)
        self.reward_filter = RewardNormalizer(self.num_envs, config.gamma) if config.normalize_rewards else None
        self._obs: np.ndarray | None = None  # preprocessed, unfiltered, [N, *obs_shape]
        self._seeded = False
        self._autoreset = np.zeros(self.num_envs, bool)
        self._episode_return = np.zeros(self.num_envs)
        self._episode_length = np.zeros(self.num_envs, np.int64)
        self.num_env_errors = 0
        self._step_count = 0
        self._failed_at = np.full(self.num_envs, -2)  # the step each env last failed at
        self._failures_in_a_row = np.zeros(self.num_envs, np.int64)
        # decided once: without an episode hook to call, the step loop never follows episodes
        self.episodes = EpisodeTracker(self, self.hooks) if self.hooks.uses(*EPISODE_HOOKS) else None
        if self.hooks.uses("on_sub_environment_created"):
            sub_environments_created(self)

    def _make_env(self) -> gym.vector.VectorEnv:
        # RLlib's creators read where they run from env_config (SimpleCorridor: .worker_index)
        context = EnvContext(self.config.env_config, self.worker_index, None, self.num_workers)
        return make_vector_env(self.config.env, self.num_envs, env_config=context,
                               creator=self.env_creator,
                               atari_preprocessing=self.config.atari_preprocessing,
                               render_mode=self.render_mode, vectorize_mode=self.config.vectorize_mode,
                               action_mask_key=self.network_spec.action_mask_key, horizon=self.config.horizon,
                               dim=self.config.model.dim, vector=self.env_vector or GuardedVectorEnv)

    @property
    def policy(self) -> Policy:
        """The torch network with the weights last loaded, built on first use: what acts for a CNN or
        a custom model, and what an algorithm's worker-side functions (gradients, priorities) are
        given. Once built, it is what the worker acts with, so a change made to it (Ape-X's ε) is
        acted on."""
        if self._policy is None:
            from volley.catalog import build_network

            self._policy = build_network(self.network_spec)
            self._policy.eval()  # acting, as RLlib's workers act: no dropout, batch-norm statistics fixed
            if self._weights is not None:
                self._policy.set_flat_weights(self._weights)
        return self._policy

    @property
    def _acting(self) -> NumpyActor | Policy:
        """What acts: the numpy actor, unless the torch network was built (or there is no actor)."""
        return self.actor if self.actor is not None and self._policy is None else self.policy

    def act(self, obs: np.ndarray, explore: bool) -> Acting:
        """Actions, the inputs of their distribution, the values and the next recurrent state for
        (filtered) observations ``obs`` and the environments' current state (left as it is)."""
        return self._acting.act(obs, self._state, self.streams, explore, self._prev)

    def _initial_state(self) -> State:
        """Every environment's state at an episode start, ``[N, ...]`` per tensor (``[]``: feed-forward)."""
        return [np.repeat(np.asarray(s)[None], self.num_envs, axis=0) for s in self._acting.initial_state()]

    def _carry_state(self, state: State, fresh: np.ndarray) -> State:
        """The state for the next step: ``state`` from this one, the initial state where an
        episode starts with the next observation (``fresh`` ``[N]``)."""
        if not fresh.any():
            return state
        return [np.where(fresh.reshape(-1, *[1] * (s.ndim - 1)), s0, s)
                for s, s0 in zip(state, self._initial_state(), strict=True)]

    def _no_previous(self) -> Previous:
        """Every environment's previous action and reward at an episode start (zeros), where the
        network reads them; else None."""
        if not self._acting.reads_prev:
            return None
        return zero_actions(self.action_space, self.num_envs), np.zeros(self.num_envs, np.float32)

    def log_prob(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` from the distribution inputs :meth:`act` returned."""
        return self._acting.log_prob(dist_inputs, actions)

    @property
    def observations(self) -> np.ndarray | None:
        """What the next step acts on: preprocessed, unfiltered, ``[N, *obs_shape]`` (None
        before the first reset). Images are the raw uint8 frames."""
        return self._obs

    @property
    def running_lengths(self) -> np.ndarray:
        """``[N]`` each environment's running episode's steps so far (one array, updated in place)."""
        return self._episode_length

    @property
    def running_returns(self) -> np.ndarray:
        """``[N]`` the same episodes' returns so far."""
        return self._episode_return

    def foreach_env(self, func: Callable[[Any], Any]) -> list[Any]:
        """RLlib's call: ``func(env)`` for each of this worker's environments."""
        return [func(env) for env, _ in each_env(self)]

    def foreach_env_with_context(self, func: Callable[[Any, Any], Any]) -> list[Any]:
        """RLlib's call: ``func(env, env_context)`` for each of this worker's environments."""
        return [func(env, context) for env, context in each_env(self)]

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """Observation and action space of one environment."""
        return self.observation_space, self.action_space

    def stop(self) -> None:
        """Close the environments (the engine ends the worker)."""
        self.env.close()

    def _load(self, weights: np.ndarray, filters: FilterStats | None) -> None:
        """Take the learner's weights and the merged filter statistics."""
        self._weights = load_flat_weights(weights, self._weights, self._policy, self.actor)
        if filters is not None and filters.obs is not None:
            self.obs_filter.set_stats(filters.obs)
        if filters is not None and filters.reward is not None and self.reward_filter is not None:
            self.reward_filter.set_stats(filters.reward)

    def _pop_filter_delta(self) -> FilterStats | None:
        obs = self.obs_filter.pop_delta()
        reward = self.reward_filter.pop_delta() if self.reward_filter is not None else None
        return None if obs is None and reward is None else FilterStats(obs, reward)

    def sample(self, weights: np.ndarray, filters: FilterStats | None,
               num_episodes: int | None = None) -> SampleResult:
        """Load the learner's weights and filters, then sample one fragment or whole episodes.

        With ``num_episodes``, sample whole episodes until at least that many have ended.
        """
        self._load(weights, filters)
        complete = self.config.batch_mode == "complete_episodes"
        errors_before = self.num_env_errors
        if self.episodes is not None:
            self.episodes.new_fragment()
        columns, returns, lengths, records, states = self._rollout(complete, num_episodes)
        ends = columns["terminated"] | columns["truncated"]
        steps = int(np.count_nonzero(columns["valid"]))  # a postprocess may add rows (V-trace's bootstrap rows)
        previous = {key: columns.pop(key) for key in PREVIOUS if key in columns}  # what the network read
        columns = {**self.postprocess(columns, self.config), **previous}
        valid = columns.pop("valid").T  # [N, T]: env-major keeps each episode contiguous
        batch = Batch({key: env_major(value, valid) for key, value in columns.items()})
        if self.hooks.uses("on_postprocess_trajectory") and self.episodes is not None:
            trajectory_ends = bootstrap_ends(ends, columns["bootstrap"]) if "bootstrap" in columns else ends
            self.episodes.trajectories(batch, valid, trajectory_ends.T)
        if states:  # the sequences the learner replays: their lengths and the states they start from
            batch.update(stored_states(valid, ends.T, self.config.model.max_seq_len, states))
        self.hooks("on_sample_end", worker=self, samples=batch)
        return SampleResult(batch, np.asarray(returns, np.float32), np.asarray(lengths, np.int64),
                            self._pop_filter_delta(), steps, self.num_env_errors - errors_before, records)

    def sample_and_apply(self, weights: np.ndarray, filter_stats: FilterStats | None,
                         fn: Callable[[Policy, Batch, AlgorithmConfig], Any],
                         num_episodes: int | None = None) -> tuple[Any, SampleResult]:
        """Sample, then return ``fn(policy, batch, config)`` computed here in place of the batch.

        This is how gradients are averaged (design: the second way of sharing work): the
        data stays on the worker and only what ``fn`` returns, say a gradient, travels.
        """
        result = self.sample(weights, filter_stats, num_episodes)
        out = fn(self.policy, result.batch, self.config)
        result.batch = Batch()
        return out, result

    def evaluate(self, weights: np.ndarray, filters: FilterStats | None, num_episodes: int | None = None,
                 num_steps: int | None = None, before_step: Callable[[], None] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, list[EpisodeRecord]]:
        """Play whole episodes and return their (raw) returns, lengths and custom-metric records
        (empty unless the callbacks use episode hooks): ``num_episodes`` of
        them, or with ``num_steps`` as many as it takes to reach that many steps (the episodes
        running then are finished, so every step counted belongs to a whole episode).

        Actions are the most likely ones unless ``config.explore``; the filters' statistics
        are used but not updated. Episodes are split evenly across environments before they
        start, so short episodes are not over-represented (as in SB3's evaluate_policy).
        ``before_step`` is called before every step environment 0 takes in an episode (not
        on its reset steps), so a video gets one frame per episode step.
        """
        self._load(weights, filters)
        self._reset()
        if num_steps is None:
            episodes = num_episodes or 1
            quota = np.array([episodes // self.num_envs + (i < episodes % self.num_envs)
                              for i in range(self.num_envs)])
        else:
            quota = np.full(self.num_envs, np.iinfo(np.int64).max // 2)
        returns: list[float] = []
        lengths: list[int] = []
        records: list[EpisodeRecord] = []
        while quota.sum() > 0:
            if before_step is not None and not self._autoreset[0] and quota[0] > 0:
                before_step()
            self._step_all(training=False, explore=self.config.explore)
            done = self._autoreset & (quota > 0)
            self._finish_episodes(done, returns, lengths, records)
            quota -= done
            if num_steps is not None and sum(lengths) + self._episode_length[quota > 0].sum() >= num_steps:
                quota = np.where((quota > 0) & ~self._autoreset, 1, 0)  # finish what runs, start none
                num_steps = None
        self._obs = None  # the next sample() starts from fresh episodes
        return np.asarray(returns), np.asarray(lengths), records


def env_major(column: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The valid rows of a time-major column ``[T, N, ...]`` in env-major order ``[rows, ...]``.
    When every row is valid, a reshape: a view for one environment, where a boolean mask would
    copy a Pong batch's 150 MB of frame differences."""
    swapped = np.swapaxes(column, 0, 1)
    return swapped.reshape(-1, *column.shape[2:]) if valid.all() else swapped[valid]
