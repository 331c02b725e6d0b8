"""RLlib's ``remote_worker_envs``: each environment of a worker in a Ray actor of its own.

A worker's vector is then a :class:`RemoteVectorEnv`: a
:class:`~volley.guarded_env.GuardedVectorEnv` whose environments are called all at once, so
environments that are slow to step (a simulator, a game server) step in parallel while the
worker still acts for all of them in one forward pass (RLlib's example
``remote_envs_with_inference_done_on_main_node``: actions on the driver, environments
elsewhere). Each actor hosts a :class:`~volley.guarded_env.GuardedEnv`, so an environment that
raises is named and recreated as in-process ones are. The vector steps in lockstep: it waits
for every environment, where RLlib's ``RemoteBaseEnv`` acts for those ready first
(``remote_env_batch_wait_ms``).

RLlib's scripts reach the actors themselves: ``algorithm.workers.foreach_env(fn)`` calls
``fn(actor)``, and an actor has the environment's own public methods besides volley's
(``env.set_task.remote(task)``), as RLlib's actors made from an environment class have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import ray

from volley.engines.base import WorkerRecipe
from volley.engines.local import LocalWorkerGroup
from volley.errors import ConfigError
from volley.guarded_env import ERROR_INFO, GuardedEnv, GuardedVectorEnv


class EnvActor:
    """The actor's side: one :class:`GuardedEnv`. volley's calls carry a ``volley_`` prefix, so
    they never hide a method of the environment's own."""

    def __init__(self, make: Callable[[], gym.Env]) -> None:
        self.guard = GuardedEnv(make)

    def volley_reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        return self.guard.reset(seed=seed, options=options)

    def volley_step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        return self.guard.step(action)

    def volley_error(self) -> tuple[str, Exception] | None:
        return self.guard.error

    def volley_recreate(self) -> None:
        self.guard.recreate()

    def volley_render(self) -> Any:
        return self.guard.render()

    def volley_close(self) -> None:
        self.guard.close()


def _forwarded(name: str) -> Callable[..., Any]:
    def method(self: EnvActor, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.guard.unwrapped, name)(*args, **kwargs)

    method.__name__ = name
    return method


_ACTOR_CLASSES: dict[type, Any] = {}  # made once per environment class in a process


def actor_class(env_type: type) -> Any:
    """The Ray actor class for environments of ``env_type``: :class:`EnvActor` with each public
    method of the environment's class forwarded to the environment (a Ray actor has only the
    methods its class defines)."""
    if env_type in _ACTOR_CLASSES:
        return _ACTOR_CLASSES[env_type]
    names = [name for name in dir(env_type)
             if not name.startswith("_") and not hasattr(EnvActor, name)
             and callable(getattr(env_type, name, None)) and not isinstance(getattr(env_type, name), type)]
    hosted = type(f"Remote{env_type.__name__}", (EnvActor,), {name: _forwarded(name) for name in names})
    # num_cpus=0, as RLlib's: the worker, not its environments, holds the CPU
    _ACTOR_CLASSES[env_type] = ray.remote(num_cpus=0)(hosted)
    return _ACTOR_CLASSES[env_type]


class RemoteEnv:
    """What the worker reads of one environment in an actor, as it reads a :class:`GuardedEnv`:
    the error of its last call, ``recreate()``; ``env`` and ``unwrapped`` are the actor, which
    is what RLlib's ``foreach_env`` and ``base_env.get_sub_environments()`` give."""

    def __init__(self, actor: Any, like: gym.Env) -> None:
        self.actor = actor
        self.error: tuple[str, Exception] | None = None
        self.observation_space, self.action_space = like.observation_space, like.action_space
        self.metadata, self.render_mode = like.metadata, like.render_mode

    @property
    def env(self) -> Any:
        return self.actor

    @property
    def unwrapped(self) -> Any:
        return self.actor

    def recreate(self) -> None:
        ray.get(self.actor.volley_recreate.remote())
        self.error = None

    def render(self) -> Any:
        return ray.get(self.actor.volley_render.remote())

    def close(self) -> None:
        try:
            ray.get(self.actor.volley_close.remote())
        finally:
            ray.kill(self.actor)


class RemoteVectorEnv(GuardedVectorEnv):
    """``num_envs`` environments, each in an actor made from ``make``, called all at once.

    One environment is made here first, to read its spaces and its class (whose methods the
    actors get), and closed; RLlib's worker makes one here too."""

    def __init__(self, make: Callable[[], gym.Env], num_envs: int) -> None:
        if not ray.is_initialized():
            raise ConfigError("remote_worker_envs=True puts each environment in a Ray actor, and Ray is not "
                              "running in this process: use num_workers >= 1, or ray.init() first")
        probe = make()
        try:
            hosted = actor_class(type(probe.unwrapped))
            self.envs = [RemoteEnv(hosted.remote(make), probe) for _ in range(num_envs)]
            self._shaped_like(probe, num_envs)
        finally:
            probe.close()

    def _reset_each(self, indices: list[int], seeds: list[int | None], options: dict | None) -> list[Any]:
        refs = [self.envs[i].actor.volley_reset.remote(seed, options) for i, seed in zip(indices, seeds, strict=True)]
        return self._received(indices, refs)

    def _step_each(self, actions: Any) -> list[Any]:
        autoreset = self._autoreset
        refs = [env.actor.volley_reset.remote() if autoreset[i] else env.actor.volley_step.remote(actions[i])
                for i, env in enumerate(self.envs)]
        return self._received(list(range(self.num_envs)), refs)

    def _received(self, indices: list[int], refs: list[Any]) -> list[Any]:
        """The outcomes of ``refs`` (one call per environment of ``indices``); a failed call's error
        is fetched from its actor, for the worker to name."""
        outcomes = ray.get(refs)
        for i, outcome in zip(indices, outcomes, strict=True):
            if ERROR_INFO in outcome[-1]:
                self.envs[i].error = ray.get(self.envs[i].actor.volley_error.remote())
        return outcomes


class RemoteEnvsGroup(LocalWorkerGroup):
    """The driver's own worker (``num_workers=0``) with its environments in actors: Ray is started
    for them unless it is up (and shut down at the end if this group started it)."""

    def __init__(self, recipe: WorkerRecipe) -> None:
        from volley.engines.ray_engine import init_ray, ship_recipe

        self.started_ray = init_ray(recipe.config)
        try:
            ship_recipe(recipe)  # the environment's creator reaches the actors as it reaches Ray workers
            super().__init__(recipe)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if hasattr(self, "workers"):
            super().stop()
        if self.started_ray:
            from volley.engines.ray_engine import shutdown_ray

            shutdown_ray()
            self.started_ray = False
