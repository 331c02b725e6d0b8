"""RolloutWorker: a vector of environments and a copy of the policy, producing batches.

A plain class: the local engine calls it in-process, the Ray engine wraps it with
``ray.remote``. Per step it runs **one** batched forward pass for all of its
environments. Environment ``i`` (counted over all workers) is seeded ``seed + i``
and draws its actions from its own random stream, so a run is a function of its
config and seed.

Sampling is time-major ``[T, N]``. Gymnasium's NEXT_STEP autoreset means the step
after an episode end only resets that environment; such steps are recorded as
invalid and dropped, and the forward pass made on them supplies the value of the
final observation, which bootstraps a time-limit truncation.

An environment that raises in ``reset`` or ``step``, or returns a NaN/inf observation or
reward, fails alone (``env_errors="recreate"``): it is recreated and reset, its
unfinished episode is dropped from the fragment and from the episode statistics (the
part of it sampled in an earlier fragment was sent already; it ended there with a
bootstrapped cut, as any fragment does), and ``num_env_errors`` counts it. Volley's own
vectors say which index failed (:class:`~volley.envs.GuardedEnv`); a native vector env
(CartPole's, ALE's) cannot, so the whole vector is recreated and every unfinished
episode of the worker is dropped. With ``env_errors="raise"`` the worker raises an
EnvError naming the environment id, the worker, the env index and the cause.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from volley.acting import Acting, NumpyActor, Previous, State, zero_actions
from volley.callbacks import EPISODE_HOOKS, DefaultCallbacks, EnvContext, EpisodeRecord, Hooks
from volley.config import AlgorithmConfig, RolloutPlan
from volley.envs import (
    ERROR_INFO,
    EnvCreator,
    check_normalizable,
    env_actions,
    guarded_envs,
    make_vector_env,
    recreated_seed,
    reset_seeded,
)
from volley.errors import EnvError, VolleyError
from volley.named import CUSTOM_ACTION_DISTS, CUSTOM_MODELS
from volley.observations import ObsPreprocessor, find_action_mask
from volley.rollout.batch import Batch
from volley.rollout.episodes import EpisodeTracker, sub_environments_created
from volley.rollout.filters import FilterStats, RewardNormalizer, make_filter
from volley.rollout.sequences import PREVIOUS, stored_states
from volley.spaces import action_layout

if TYPE_CHECKING:
    from volley.models import Policy

Postprocess = Callable[[dict[str, np.ndarray], AlgorithmConfig], dict[str, np.ndarray]]

# An environment that fails again on its first step after being recreated, this many times
# in a row, is broken rather than flaky: recreating it once more would only loop.
MAX_FAILURES_IN_A_ROW = 3


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


class EnvStreams:
    """One numpy generator per environment, seeded from (seed, global env index).

    Values are drawn ``BLOCK`` at a time per environment and handed out one step's row at a
    time: a block holds exactly the values as many single draws would have returned (numpy
    fills an array value by value from the same stream), so acting stays a function of the
    seed, and a step costs one indexing instead of a Python loop over the environments
    (4 µs for 16 of them). Each kind of draw (Gumbel noise for categorical actions, normals for
    Gaussian ones, of one width) has its own block, so a composite action space that draws both
    every step refills each only once in ``BLOCK`` steps.

    A custom action distribution draws in torch instead: ``torch_state`` is the state of the one
    torch generator the worker's environments share for it, seeded from (seed, the first env
    index) and carried from draw to draw (:func:`volley.distributions.worker_generator`).
    """

    BLOCK = 256

    def __init__(self, seed: int, env_indices: list[int]) -> None:
        self.generators = [np.random.default_rng([seed, i]) for i in env_indices]
        self._blocks: dict[tuple[str, int], list] = {}  # kind and width -> [block [N, BLOCK, width], next step]
        self.torch_seed = int(np.random.SeedSequence([seed, env_indices[0], 1]).generate_state(1)[0])
        self.torch_state: Any = None

    def _draw(self, kind: tuple[str, int], fill: Callable[[np.random.Generator], np.ndarray]) -> np.ndarray:
        """One step's draws ``[N, width]``; a new block of this kind when its last one is used up."""
        block = self._blocks.get(kind)
        if block is None or block[1] == self.BLOCK:
            block = self._blocks[kind] = [np.stack([fill(g) for g in self.generators]), 0]
        block[1] += 1
        return block[0][:, block[1] - 1]

    def gumbel(self, n: int) -> np.ndarray:
        return self._draw(("gumbel", n), lambda g: g.gumbel(size=(self.BLOCK, n)))

    def normal(self, dim: int) -> np.ndarray:
        """float32: the float64 draws rounded once a block (numpy's float32 draws are other values)."""
        return self._draw(("normal", dim), lambda g: g.standard_normal((self.BLOCK, dim)).astype(np.float32))


def bootstrap_ends(ends: np.ndarray, bootstrap: np.ndarray) -> np.ndarray:
    """Episode ends ``[T, N]`` moved onto V-trace's ``[T + 1, N]`` rows (``vtrace_columns``): a
    bootstrap row holds the final observation of the episode truncated on the step before it, so
    that episode ends on the bootstrap row, which ``on_postprocess_trajectory`` sees as its last."""
    ends = np.concatenate([ends, np.zeros_like(ends[:1])])
    before = np.concatenate([np.zeros_like(ends[:1]), ends[:-1]])  # [T + 1, N]: the step before ended
    after = np.concatenate([bootstrap[1:], np.zeros_like(bootstrap[:1])])  # the row after is a bootstrap row
    return (ends & ~after) | (bootstrap & before)


class RolloutWorker:
    """Owns ``num_envs_per_worker`` environments and samples them with the current weights."""

    def __init__(self, config: AlgorithmConfig, worker_index: int, postprocess: Postprocess,
                 env_creator: EnvCreator | None = None, num_envs: int | None = None,
                 seed_offset: int = 0, render_mode: str | None = None, *, plan: RolloutPlan,
                 slot: int | None = None, model_class: type | None = None,
                 callbacks_class: type[DefaultCallbacks] | None = None,
                 action_dist_class: type | None = None) -> None:
        """``plan`` holds the sizes the driver resolved (never resolved again here). ``slot`` is
        this worker's place among all workers ever created (default ``worker_index``): a
        replacement gets a new one, so its environments ``slot·N … slot·N + N − 1`` take seeds
        no other environment had. ``model_class`` is the class of ``config.model.custom_model``
        (the recipe brings it; None: found by name in this process), ``action_dist_class`` that of
        ``config.model.custom_action_dist``; ``callbacks_class`` the one ``config`` names (found in
        this process when not given)."""
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
        self.env = self._make_env()
        first = seed_offset + (worker_index if slot is None else slot) * self.num_envs
        self.env_indices = list(range(first, first + self.num_envs))
        self.streams = EnvStreams(config.seed, self.env_indices)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        # an action mask among the observation's columns (a Dict observation's action_mask_key)
        self.preprocess = ObsPreprocessor(self.observation_space, find_action_mask(
            self.observation_space, self.action_space, config.action_mask_key))
        mask = self.preprocess.mask
        custom, dist = config.model.custom_model, config.model.custom_action_dist
        self.model_class = model_class or (CUSTOM_MODELS.find(custom) if custom is not None else None)
        self.action_dist_class = action_dist_class or (CUSTOM_ACTION_DISTS.find(dist) if dist is not None else None)
        # volley's MLP acts in numpy; the torch network is built only when something needs it (a
        # CNN's or a custom model's forward pass, a custom distribution's draw, an algorithm's
        # worker-side function), so a worker that only acts through an MLP never imports torch: a
        # second less to start each Ray worker. Built before the check of normalize_actions, so that
        # a network that cannot act in this action space says so (SAC's needs a bounded float Box).
        self.actor = None if self.preprocess.is_image or custom is not None or dist is not None else NumpyActor(
            self.preprocess.net_shape[0], self.action_space, config.model, config.network, config.head_hiddens,
            mask)
        self._mask_layout = None if mask is None else action_layout(self.action_space)
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
        self.obs_filter = make_filter(config.observation_filter, self.preprocess.shape, None if mask is None else mask.mask)
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
                               action_mask_key=self.config.action_mask_key)

    @property
    def policy(self) -> Policy:
        """The torch network with the weights last loaded, built on first use: what acts for a CNN or
        a custom model, and what an algorithm's worker-side functions (gradients, priorities) are
        given. Once built, it is what the worker acts with, so a change made to it (Ape-X's ε) is
        acted on."""
        if self._policy is None:
            from volley.catalog import build_policy

            self._policy = build_policy(self.observation_space, self.action_space, self.config.model,
                                        self.config.network, self.config.head_hiddens, self.model_class,
                                        action_mask_key=self.config.action_mask_key,
                                        action_dist_class=self.action_dist_class)[1]
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

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """Observation and action space of one environment."""
        return self.observation_space, self.action_space

    # -- the hot loop ----------------------------------------------------------------------

    def _reset(self) -> None:
        """Start fresh episodes in every env; seeded by global env index on the first call only,
        so later resets continue each env's random stream instead of replaying it."""
        if self.episodes is not None:
            self.episodes.before_reset()
        if self._seeded:
            raw, infos = self.env.reset()
        else:
            raw, infos = reset_seeded(self.env, [self.config.seed + i for i in self.env_indices])
            self._seeded = True
        obs = self.preprocess(raw, self.num_envs)
        failed = self._failures(obs, None, infos)
        self._obs = obs if failed is None else self._recover(failed, obs, None)[0]
        self._state = self._initial_state()
        self._prev = self._no_previous()
        self._autoreset[:] = False
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        if self.episodes is not None:
            self.episodes.reset(raw, self._obs, infos)

    def _training_rewards(self, rewards: np.ndarray, valid: np.ndarray, ended: np.ndarray,
                          training: bool) -> np.ndarray:
        """What the algorithm learns from: ``clip_rewards``, then ``normalize_rewards``."""
        clip = self.config.clip_rewards
        if clip is True:
            rewards = np.sign(rewards)
        elif clip:
            rewards = np.clip(rewards, -clip, clip)
        if self.reward_filter is not None:
            rewards = self.reward_filter(rewards, valid, ended, update=training)
        return rewards

    def _step_all(self, training: bool, explore: bool) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """One forward pass for all environments, one vector step; returns the step's columns and
        the envs that failed and restarted (None when none did). ``training`` updates the
        filters' statistics; ``explore`` samples actions instead of taking the most likely."""
        assert self._obs is not None
        if self._mask_layout is not None:
            self._check_masks()
        obs = self.obs_filter(self._obs, update=training)
        actions_np, dist_inputs, values, state = self.act(obs, explore)
        self._step_count += 1
        vector_error: Exception | None = None
        try:
            raw, rewards, terminated, truncated, infos = self.env.step(env_actions(
                actions_np, self.action_space, self.config.normalize_actions, self.config.clip_actions))
            next_obs = self.preprocess(raw, self.num_envs)
        except VolleyError:
            raise
        except Exception as exc:  # from a native vector env; GuardedEnv keeps sub-env errors in
            vector_error = exc
            raw, next_obs, rewards, infos = None, self._obs, np.zeros(self.num_envs), {}
            terminated = truncated = np.zeros(self.num_envs, bool)
        valid = ~self._autoreset
        rewards = np.asarray(rewards, np.float32)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        failed = self._failures(next_obs, rewards, infos, vector_error)
        if failed is not None:  # failed envs restart; the step is a cut and not a sample
            next_obs, failed = self._recover(failed, next_obs, rewards, vector_error)
            rewards = np.where(failed, np.float32(0), rewards)
            valid &= ~failed
            terminated, truncated = terminated & ~failed, truncated | failed
        np.add(self._episode_return, rewards, out=self._episode_return, where=valid)
        self._episode_length += valid
        ended = np.logical_or(terminated, truncated)
        self._autoreset = ended if failed is None else ended & ~failed  # failed envs were reset already
        self._obs = next_obs
        if self.episodes is not None:
            self.episodes.step(raw, next_obs, infos, actions_np, rewards, terminated, truncated, valid,
                               self._autoreset)
        # a reset step's observation ended an episode (its value bootstraps it): the state carries
        # into it, and the next one, the new episode's first, starts afresh, as after a failure
        self._state = self._carry_state(state, ~valid) if state else state
        step = {"obs": obs, "actions": actions_np, "dist_inputs": dist_inputs, "values": values,
                "rewards": self._training_rewards(rewards, valid, ended, training),
                "terminated": terminated, "truncated": truncated, "valid": valid}
        if self._prev is not None:  # what this step read; the next reads this step's action and reward
            step["prev_actions"], step["prev_rewards"] = self._prev
            fresh = ~valid
            self._prev = (np.where(fresh.reshape(-1, *[1] * (actions_np.ndim - 1)), 0, actions_np),
                          np.where(fresh, np.float32(0), rewards))
        return step, failed

    def _check_masks(self) -> None:
        """An EnvError naming the environment and the mask if an action mask of the observations about
        to be acted on holds anything but 0 and 1 or allows no action (a final observation, acted on
        only for its value, may allow none: a finished game has no legal move)."""
        assert self._obs is not None and self._mask_layout is not None and self.preprocess.mask is not None
        problem = self._mask_layout.mask_problem(self._obs[:, self.preprocess.mask.mask], ~self._autoreset)
        if problem is None:
            return
        j = problem[0]
        mask = self._obs[j, self.preprocess.mask.mask]
        raise EnvError(f"environment '{self.config.env}' (worker {self.worker_index}, env index {j}) gave the action "
                       f"mask {np.array2string(mask, separator=' ', threshold=20)} (observation key "
                       f"{self.config.action_mask_key!r}) at step {self._episode_length[j]} of its episode: "
                       f"{problem[1]}")

    # -- failed environments -----------------------------------------------------------------

    def _failures(self, obs: np.ndarray, rewards: np.ndarray | None, infos: dict,
                  vector_error: Exception | None = None) -> np.ndarray | None:
        """Which envs failed this step (raised, or gave NaN/inf), or None, the usual case: one
        vectorised check of the whole step, and no per-env work unless something is wrong."""
        if (vector_error is None and ERROR_INFO not in infos and _finite(obs)
                and (rewards is None or _finite(rewards))):
            return None
        if vector_error is not None:
            return np.ones(self.num_envs, bool)
        failed = np.asarray(infos.get("_" + ERROR_INFO, np.zeros(self.num_envs, bool)), bool).copy()
        if obs.dtype.kind == "f":
            failed |= ~np.isfinite(obs.reshape(self.num_envs, -1)).all(1)
        if rewards is not None:
            failed |= ~np.isfinite(rewards)
        return failed

    def _describe(self, j: int, rewards: np.ndarray | None, vector_error: Exception | None) -> str:
        """What went wrong with env ``j``, naming the env id, the worker and the env index."""
        where = f"environment '{self.config.env}' (worker {self.worker_index}, env index {j})"
        step = f"at step {self._episode_length[j] + 1} of its episode"
        guards = guarded_envs(self.env)
        error = guards[j].error if guards is not None else None
        if vector_error is not None:
            where = (f"environment '{self.config.env}' (worker {self.worker_index}, env index unknown: "
                     f"a native vector env cannot say which of its {self.num_envs})")
            error = ("step", vector_error)
        if error is not None:
            method, exc = error
            return f"{where} raised {step if method == 'step' else 'in reset'}: {type(exc).__name__}: {exc}"
        if rewards is not None and not np.isfinite(rewards[j]):
            return f"{where} returned a non-finite reward ({rewards[j]}) {step}"
        return f"{where} returned a non-finite observation {step if rewards is not None else 'in reset'}"

    def _recover(self, failed: np.ndarray, obs: np.ndarray, rewards: np.ndarray | None,
                 vector_error: Exception | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Raise (``env_errors="raise"``), or recreate and reset the failed envs and forget their
        unfinished episodes. Returns ``obs`` with fresh first observations in place of theirs, and
        the envs that restarted (all of them for a native vector env)."""
        indices = np.flatnonzero(failed)
        cause = self._describe(int(indices[0]), rewards, vector_error)
        if self.config.env_errors == "raise":
            raise EnvError(f"{cause} (env_errors='raise')")
        in_a_row = self._failed_at[indices] == self._step_count - 1
        self._failures_in_a_row[indices] = np.where(in_a_row, self._failures_in_a_row[indices] + 1, 1)
        self._failed_at[indices] = self._step_count
        if (self._failures_in_a_row[indices] >= MAX_FAILURES_IN_A_ROW).any():
            raise EnvError(f"{cause}; it failed {MAX_FAILURES_IN_A_ROW} times in a row, each time on "
                           "its first step after being recreated, so it is not recreated again")
        self.num_env_errors += 1 if vector_error is not None else len(indices)
        guards = guarded_envs(self.env)
        if guards is None:  # a native vector env: replace all of it
            self.env.close()
            self.env = self._make_env()
            failed = np.ones(self.num_envs, bool)
            raw, infos = reset_seeded(self.env, [recreated_seed(self.config.seed + i, self.num_env_errors)
                                                 for i in self.env_indices])
        else:
            for j in indices:
                guards[j].recreate()
            raw, infos = self.env.reset(options={"reset_mask": failed})
        fresh = self.preprocess(raw, self.num_envs)
        again = self._failures(fresh, None, infos)
        if again is not None:
            raise EnvError(f"{cause}; its replacement failed too: "
                           f"{self._describe(int(np.flatnonzero(again)[0]), None, None)}")
        if self.hooks.uses("on_sub_environment_created"):
            sub_environments_created(self, np.flatnonzero(failed).tolist())
        if self.episodes is not None:
            self.episodes.recovered(failed, raw, fresh, infos)
        self._episode_return[failed] = 0.0
        self._episode_length[failed] = 0
        return np.where(failed.reshape(-1, *[1] * (obs.ndim - 1)), fresh, obs), failed

    def _finish_episodes(self, counted: np.ndarray, returns: list[float], lengths: list[int],
                         records: list[EpisodeRecord]) -> None:
        """Count the episodes ``counted`` (of those that ended on the latest step); start the
        counters of every one that ended again from 0."""
        returns.extend(self._episode_return[counted].tolist())
        lengths.extend(self._episode_length[counted].tolist())
        if self.episodes is not None:
            records.extend(self.episodes.finish(counted))
        self._episode_return[self._autoreset] = 0.0
        self._episode_length[self._autoreset] = 0

    def _rollout(self, complete_episodes: bool, min_episodes: int | None = None
                 ) -> tuple[dict[str, np.ndarray], list, list, list, list[State]]:
        """Step until the fragment is full (or ``min_episodes`` have ended); columns ``[T, N, ...]``,
        and the state each step acted with (a recurrent network's; else [])."""
        complete_episodes = complete_episodes or min_episodes is not None
        if self._obs is None or complete_episodes:
            self._reset()
        target = self.fragment_length * self.num_envs
        steps: list[dict[str, np.ndarray]] = []
        returns: list[float] = []
        lengths: list[int] = []
        records: list[EpisodeRecord] = []
        collected = 0
        pending = np.zeros(self.num_envs, np.int64)  # steps of the unfinished episode, per env
        episode_start = np.zeros(self.num_envs, np.int64)  # where in `steps` it began, per env
        states: list[State] = []
        while True:
            if self._state:
                states.append(self._state)
            step, failed = self._step_all(training=True, explore=self.config.explore)
            steps.append(step)
            if failed is not None:  # drop the failed envs' unfinished episodes
                for j in np.flatnonzero(failed):
                    for earlier in steps[episode_start[j]:]:
                        earlier["valid"][j] = False
                pending[failed] = 0
                episode_start[failed] = len(steps)
            done = self._autoreset
            ended = np.count_nonzero(done) > 0  # on most steps none did, and the lines below have nothing to do
            if ended:
                episode_start[done] = len(steps)
                self._finish_episodes(done, returns, lengths, records)
            if complete_episodes:
                pending += step["valid"]
                if ended:
                    collected += int(pending[done].sum())
                    pending[done] = 0
                if (collected >= target if min_episodes is None else len(returns) >= min_episodes):
                    break
            elif len(steps) == self.fragment_length:
                break
        # np.array stacks a list of equal arrays as np.stack does, in half its time or less
        columns = {key: np.array([s[key] for s in steps]) for key in steps[0] if key != "obs"}
        # the fragment's log-probabilities in a few numpy calls, not a softmax every step
        columns["logp"] = self.log_prob(columns.pop("dist_inputs"), columns["actions"])
        assert self._obs is not None
        last_obs = self.obs_filter(self._obs, update=False)
        last_values = self.act(last_obs, False)[2]  # the mode: no random draw
        # next_obs[t] = obs[t + 1]: the observation step t led to (the final one after an episode
        # end, as NEXT_STEP autoreset shows it on the reset step). Both are views of one array.
        all_obs = np.array([s["obs"] for s in steps] + [last_obs])  # [T + 1, N, *obs_shape]
        columns["obs"], columns["next_obs"] = all_obs[:-1], all_obs[1:]
        # next_values[t]: the next step's value (the final observation's, after an end), 0 after a
        # terminal; a cut wherever the sequence stops: episode end or the fragment's last step.
        values = columns["values"]
        next_values = np.concatenate([values[1:], last_values[None]])
        columns["next_values"] = np.where(columns["terminated"], 0.0, next_values).astype(np.float32)
        columns["cuts"] = columns["terminated"] | columns["truncated"]
        columns["cuts"][-1] = True
        if complete_episodes:  # drop steps of episodes still running at the end
            ends = columns["terminated"] | columns["truncated"]
            columns["valid"] &= np.flip(np.logical_or.accumulate(np.flip(ends, 0), axis=0), 0)
        return columns, returns, lengths, records, states

    def _load(self, weights: np.ndarray, filters: FilterStats | None) -> None:
        """Take the learner's weights (unless they are the very array loaded last: a streaming worker
        samples fragment after fragment with one) and the merged filter statistics."""
        if weights is not self._weights:
            self._weights = weights
            if self._policy is not None:
                self._policy.set_flat_weights(weights)
            elif self.actor is not None:
                self.actor.load(weights)
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


def _finite(values: np.ndarray) -> bool:
    """True unless float ``values`` hold a NaN or inf (images are uint8: always finite). Counting
    takes about 0.6 of ``.all()``'s time on a step's few values, and it runs twice every step."""
    return values.dtype.kind != "f" or np.count_nonzero(np.isfinite(values)) == values.size


def env_major(column: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The valid rows of a time-major column ``[T, N, ...]`` in env-major order ``[rows, ...]``.
    When every row is valid, a reshape: a view for one environment, where a boolean mask would
    copy a Pong batch's 150 MB of frame differences."""
    swapped = np.swapaxes(column, 0, 1)
    return swapped.reshape(-1, *column.shape[2:]) if valid.all() else swapped[valid]
