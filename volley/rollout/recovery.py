"""A rollout worker's failed environments: found, described, recreated.

An environment that raises in ``reset`` or ``step``, or returns a NaN/inf observation or
reward, fails alone (``env_errors="recreate"``): it is recreated and reset, its
unfinished episode is dropped from the fragment and from the episode statistics (the
part of it sampled in an earlier fragment was sent already; it ended there with a
bootstrapped cut, as any fragment does), and ``num_env_errors`` counts it. Volley's own
vectors say which index failed (:class:`~volley.guarded_env.GuardedEnv`); a native vector env
(CartPole's, ALE's) cannot, so the whole vector is recreated and every unfinished
episode of the worker is dropped. With ``env_errors="raise"`` the worker raises an
EnvError naming the environment id, the worker, the env index and the cause.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from volley.callbacks import Hooks
from volley.config import AlgorithmConfig
from volley.envs import reset_seeded
from volley.errors import EnvError
from volley.guarded_env import ERROR_INFO, guarded_envs, recreated_seed
from volley.observations import ObsPreprocessor
from volley.rollout.episodes import EpisodeTracker, sub_environments_created

# An environment that fails again on its first step after being recreated, this many times
# in a row, is broken rather than flaky: recreating it once more would only loop.
MAX_FAILURES_IN_A_ROW = 3


class EnvRecovery:
    """The worker's environment-fault recovery (a part of :class:`~volley.rollout.worker.RolloutWorker`,
    which sets the fields below)."""

    config: AlgorithmConfig
    worker_index: int
    num_workers: int
    num_envs: int
    env: gym.vector.VectorEnv
    env_indices: list[int]
    preprocess: ObsPreprocessor
    hooks: Hooks
    episodes: EpisodeTracker | None
    num_env_errors: int
    _episode_return: np.ndarray  # [N] each environment's running episode's return and length
    _episode_length: np.ndarray
    _step_count: int
    _failed_at: np.ndarray  # [N] the step each env last failed at
    _failures_in_a_row: np.ndarray
    _make_env: Callable[[], gym.vector.VectorEnv]  # a new vector of the worker's environments

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


def _finite(values: np.ndarray) -> bool:
    """True unless float ``values`` hold a NaN or inf (images are uint8: always finite). Counting
    takes about 0.6 of ``.all()``'s time on a step's few values, and it runs twice every step."""
    return values.dtype.kind != "f" or np.count_nonzero(np.isfinite(values)) == values.size
