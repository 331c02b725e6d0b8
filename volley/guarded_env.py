"""A vector of environments whose failures stay in their slots.

An exception escaping from one environment in the middle of a vector's step would lose the
results of the environments stepped before it, and a native vector cannot say which of its
environments failed. So every vector that is not a native one (CartPole's, ale-py's) is a
:class:`GuardedVectorEnv` of :class:`GuardedEnv` s: a failed environment is named by its index,
and the worker recreates and resets it alone (``volley.rollout.recovery``), with a seed of its
own (:func:`recreated_seed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

from volley.errors import VolleyError

ERROR_INFO = "volley_env_error"  # set in the info of a GuardedEnv whose step or reset raised


def recreated_seed(seed: int, recreations: int) -> int:
    """The seed of an environment recreated for the ``recreations``-th time: a function of the
    environment's first seed, so a run stays a function of its config, but never that seed."""
    return int(np.random.SeedSequence([seed, recreations]).generate_state(1)[0])


class GuardedEnv(gym.Wrapper):
    """One sub-environment of a :class:`GuardedVectorEnv` that keeps its exceptions in.

    An exception escaping from the middle of the vector's step would lose the results of
    the environments stepped before it. Instead the failed call returns a placeholder (a
    sampled observation, reward 0) with ``info[ERROR_INFO]`` set; the vector's info then
    says which index failed, and the worker reads the exception from :attr:`error`,
    calls :meth:`recreate` and resets this index alone (see ``RolloutWorker``).
    """

    def __init__(self, make: Callable[[], gym.Env]) -> None:
        super().__init__(make())
        self.make = make
        self.error: tuple[str, Exception] | None = None  # (method, exception) of the last failure
        self.recreations = 0
        self._first_seed: int | None = None  # the seed of the first reset, from the worker
        self._fresh = True  # not reset since it was made

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        try:
            return self.env.step(action)
        except VolleyError:  # volley's own check of what the environment gave (an action mask): bad input
            raise
        except Exception as exc:
            self.error = ("step", exc)
            return self.observation_space.sample(), 0.0, False, False, {ERROR_INFO: True}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if self._first_seed is None:
            self._first_seed = seed
        elif seed is None and self._fresh:  # a recreated env's first reset: a seed of its own
            seed = recreated_seed(self._first_seed, self.recreations)
        self._fresh = False
        try:
            return self.env.reset(seed=seed, options=options)
        except VolleyError:
            raise
        except Exception as exc:
            self.error = ("reset", exc)
            return self.observation_space.sample(), {ERROR_INFO: True}

    def recreate(self) -> None:
        """Replace the environment with a new one from the same creator."""
        with contextlib.suppress(Exception):  # a broken environment may fail to close too
            self.env.close()
        self.env = self.make()
        self.error = None
        self.recreations += 1
        self._fresh = True


class GuardedVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` :class:`GuardedEnv` s stepped one after another as one vector.

    What Gymnasium's ``SyncVectorEnv`` does in ``NEXT_STEP`` autoreset mode (the step after
    an episode end only resets that environment, reward 0), without the per-step merging
    of every sub-environment's info dict: the only info a worker reads is which
    environment failed (``info[ERROR_INFO]`` and its mask). For one MuJoCo environment
    that merging and its bookkeeping cost about as much as the physics step. Each
    environment's own info of the latest step or reset is in :attr:`sub_infos` (for the
    callbacks' ``episode.last_info_for()``).
    """

    def __init__(self, make: Callable[[], gym.Env], num_envs: int) -> None:
        self.envs: list[Any] = [GuardedEnv(make) for _ in range(num_envs)]
        self._shaped_like(self.envs[0], num_envs)

    def _shaped_like(self, first: Any, num_envs: int) -> None:
        """The vector's spaces and bookkeeping for ``num_envs`` copies of environment ``first``."""
        self.num_envs = num_envs
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = gym.vector.utils.batch_space(first.observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(first.action_space, num_envs)
        self.metadata = {**first.metadata, "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        self.render_mode = first.render_mode
        self._autoreset = np.zeros(num_envs, bool)
        self._last_obs: list[Any] = [None] * num_envs  # what a reset_mask leaves in place
        self.sub_infos: list[dict] = [{} for _ in range(num_envs)]
        self._box = isinstance(first.observation_space, gym.spaces.Box)

    def _stack(self, observations: list[Any]) -> Any:
        if self._box:  # a new array, as np.stack makes, in a fraction of its time
            return np.array(observations)
        out = gym.vector.utils.create_empty_array(self.single_observation_space, self.num_envs)
        return gym.vector.utils.concatenate(self.single_observation_space, observations, cast(Any, out))

    @staticmethod
    def _errors(failed: list[int], num_envs: int) -> dict[str, Any]:
        if not failed:
            return {}
        mask = np.zeros(num_envs, bool)
        mask[failed] = True
        return {ERROR_INFO: mask, "_" + ERROR_INFO: mask}

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict | None = None) -> tuple[Any, dict]:
        """Reset every env (``options={"reset_mask": m}``: only those where ``m`` is True)."""
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i
                                                     for i in range(self.num_envs)]
        mask = (options or {}).get("reset_mask")
        env_options = {k: v for k, v in (options or {}).items() if k != "reset_mask"} or None
        chosen = [i for i in range(self.num_envs) if mask is None or mask[i]]
        outcomes = self._reset_each(chosen, [seeds[i] for i in chosen], env_options)
        observations, infos = list(self._last_obs), list(self.sub_infos)
        for i, (obs, info) in zip(chosen, outcomes, strict=True):
            self._autoreset[i] = False
            observations[i], infos[i] = obs, info
        failed = [i for i in chosen if ERROR_INFO in infos[i]]
        self._last_obs, self.sub_infos = observations, infos
        return self._stack(observations), self._errors(failed, self.num_envs)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        rewards = np.zeros(self.num_envs, np.float32)  # what the worker keeps: no conversion a step
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        observations, failed, infos = [], [], []
        outcomes = self._step_each(actions)
        for i, outcome in enumerate(outcomes):
            if len(outcome) == 2:  # the step after an end only resets the environment
                obs, info = outcome
            else:
                obs, rewards[i], terminated[i], truncated[i], info = outcome
            observations.append(obs)
            infos.append(info)
            if ERROR_INFO in info:
                failed.append(i)
        self._last_obs, self.sub_infos = observations, infos
        self._autoreset = terminated | truncated
        return self._stack(observations), rewards, terminated, truncated, self._errors(failed, self.num_envs)

    # How the environments are called: here one after another, in this process; a vector of Ray
    # actors (volley.engines.ray_envs) calls them all at once
    def _reset_each(self, indices: list[int], seeds: list[int | None], options: dict | None) -> list[Any]:
        """``(obs, info)`` of each environment of ``indices``, reset with its seed."""
        return [self.envs[i].reset(seed=seed, options=options) for i, seed in zip(indices, seeds, strict=True)]

    def _step_each(self, actions: Any) -> list[Any]:
        """Each environment's step with its action, or ``(obs, info)`` of its reset on the step
        after its episode ended."""
        autoreset = self._autoreset
        return [env.reset() if autoreset[i] else env.step(actions[i]) for i, env in enumerate(self.envs)]

    def render(self) -> tuple[Any, ...] | None:
        frames = tuple(env.render() for env in self.envs)
        return None if all(frame is None for frame in frames) else frames

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def guarded_envs(vec: gym.vector.VectorEnv) -> list[GuardedEnv] | None:
    """The sub-environments of a vector ``make_vector_env`` built from GuardedEnvs; None for a
    native vector env, whose sub-environments are not Python objects."""
    return vec.envs if isinstance(vec, GuardedVectorEnv) else None
