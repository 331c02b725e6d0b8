"""A rollout worker's per-step loop: one forward pass and one vector step for all of its
environments, repeated until a fragment is full.

Sampling is time-major ``[T, N]``. Gymnasium's NEXT_STEP autoreset means the step
after an episode end only resets that environment; such steps are recorded as
invalid and dropped, and the forward pass made on them supplies the value of the
final observation, which bootstraps a time-limit truncation.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from volley.envs import env_actions, reset_seeded
from volley.episode import EpisodeRecord
from volley.errors import EnvError, VolleyError
from volley.networks.numpy_layers import Acting, Previous, State
from volley.rollout.filters import MeanStdFilter, NoFilter, RewardNormalizer
from volley.rollout.recovery import EnvRecovery
from volley.spaces import ActionLayout


class StepLoop(EnvRecovery):
    """The worker's step loop (a part of :class:`~volley.rollout.worker.RolloutWorker`, which sets
    the fields below and acts)."""

    fragment_length: int
    action_space: gym.Space
    obs_filter: MeanStdFilter | NoFilter
    reward_filter: RewardNormalizer | None
    _obs: np.ndarray | None  # preprocessed, unfiltered, [N, *obs_shape]
    _seeded: bool
    _autoreset: np.ndarray  # [N] the env resets on its next step (its episode ended on this one)
    _mask_layout: ActionLayout | None
    _state: State
    _prev: Previous
    act: Callable[[np.ndarray, bool], Acting]
    log_prob: Callable[[np.ndarray, np.ndarray], np.ndarray]
    _initial_state: Callable[[], State]
    _carry_state: Callable[[State, np.ndarray], State]
    _no_previous: Callable[[], Previous]

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
