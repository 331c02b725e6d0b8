"""One manager for every kind of actor volley runs: rollout workers, acting workers, replay shards.

Modelled on RLlib's ``FaultTolerantActorManager``, smaller. An :class:`ActorManager`
starts ``count`` actors through an :class:`~volley.engines.backends.ActorBackend` (Ray's, or
one in this process for tests), each hosting a plain object built inside it; calls them and translates their errors (a ``VolleyError`` stays one, anything else
becomes a ``WorkerError`` naming the actor); and replaces a dead actor under one
:class:`RestartPolicy` (``restart_failed_workers``, ``max_worker_restarts``). Every actor
gets a *slot*, the number of actors of its kind created before it: a replacement takes a
new slot, never its predecessor's, so the environments of a worker (seeded from its
slot) never share a seed with those of any worker, alive or dead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from volley.config import AlgorithmConfig
from volley.engines.backends import ActorBackend, ActorDied, CallFailed, CallTimeout
from volley.errors import VolleyError, WorkerError

# A replacement not running after this long cannot be placed: the cluster lacks its CPUs.
RESTART_TIMEOUT_S = 120.0

# What actor ``index`` in ``slot`` hosts: a callable that builds it and that callable's arguments
Recipe = Callable[[int, int], tuple[Callable[..., Any], tuple[Any, ...]]]


@dataclass(frozen=True)
class RestartPolicy:
    """When a dead actor is replaced: ``restart`` on, and fewer than ``max_restarts``
    replacements of its kind made so far in the run."""

    restart: bool
    max_restarts: int

    @classmethod
    def of(cls, config: AlgorithmConfig) -> RestartPolicy:
        return cls(config.restart_failed_workers, config.max_worker_restarts)


class ActorManager:
    """``count`` actors of one ``kind`` ("rollout worker", "replay shard") on ``backend``, built by
    ``recipe``, each reserving ``num_cpus`` and placed ``where`` the backend's placement said."""

    def __init__(self, kind: str, recipe: Recipe, count: int, policy: RestartPolicy, backend: ActorBackend,
                 num_cpus: float, where: Any = None) -> None:
        self.kind, self.recipe, self.policy, self.backend = kind, recipe, policy, backend
        self.num_cpus, self.where = num_cpus, where
        self.num_created = 0  # actors of this kind ever started: the next one's slot
        self.num_restarts = 0
        self.actors: list[Any] = []
        builds = []
        for index in range(count):
            actor, build = self._spawn(index)
            self.actors.append(actor)
            builds.append(build)
        try:
            for index, build in enumerate(builds):
                try:
                    self.get(index, build)
                except ActorDied as exc:
                    raise WorkerError(f"{kind} {index} died while starting: {first_line(exc)}") from exc
        except BaseException:
            self.stop()  # the others too: nobody else holds their handles yet
            raise

    def _spawn(self, index: int) -> tuple[Any, Any]:
        make, args = self.recipe(index, self.num_created)
        self.num_created += 1
        return self.backend.spawn(make, args, self.num_cpus, self.where)

    def call(self, index: int, method: str, *args: Any) -> Any:
        """Start ``method(*args)`` on actor ``index``; :meth:`get` its result."""
        return self.backend.call(self.actors[index], method, *args)

    def get(self, index: int, ref: Any, timeout: float | None = None) -> Any:
        """The result of a call to actor ``index``: its exception as a WorkerError naming it (a
        VolleyError as itself). A dead actor raises ``ActorDied``, for the caller to
        :meth:`replace` it or not."""
        try:
            return self.backend.get(ref, timeout=timeout)
        except CallFailed as exc:
            if isinstance(exc.cause, VolleyError):
                raise exc.cause from None
            raise WorkerError(f"{self.kind} {index} failed: {exc}") from exc

    def foreach(self, method: str, *args: Any, again: bool = True) -> list[Any]:
        """``method(*args)`` on every actor, array arguments put into the object store once.

        A dead actor is replaced; with ``again`` (or when no actor answered) the replacement
        is called too. Returns the results in actor order (of the actors that answered).
        """
        return self.foreach_async(method, *args, again=again)()

    def foreach_async(self, method: str, *args: Any, again: bool = True) -> Callable[[], list[Any]]:
        """:meth:`foreach`, started now: the returned function waits for its results."""
        shipped = [self.backend.put(a) if isinstance(a, np.ndarray) else a for a in args]
        started = {index: self.call(index, method, *shipped) for index in range(len(self.actors))}
        return lambda: self._collect(started, method, shipped, again)

    def _collect(self, refs: dict[int, Any], method: str, shipped: list[Any], again: bool) -> list[Any]:
        results: dict[int, Any] = {}
        while refs:
            died: list[tuple[int, Exception]] = []
            for index, ref in refs.items():
                try:
                    results[index] = self.get(index, ref)
                except ActorDied as exc:
                    died.append((index, exc))
            for index, cause in died:
                self.replace(index, cause)
            pending = [index for index, _ in died] if again or not results else []
            refs = {index: self.call(index, method, *shipped) for index in pending}
        return [results[index] for index in sorted(results)]

    def replace(self, index: int, death: Exception) -> None:
        """Start a new actor (in a new slot) for ``index``, or raise a WorkerError saying why not."""
        died = f"{self.kind} {index} died ({first_line(death)})"
        if not self.policy.restart:
            raise WorkerError(f"{died}; restart_failed_workers=False")
        if self.num_restarts >= self.policy.max_restarts:
            raise WorkerError(f"{died}; not replaced: max_worker_restarts={self.policy.max_restarts} "
                              f"replacements were made already")
        self.backend.kill(self.actors[index])
        actor, build = self._spawn(index)
        try:
            self.get(index, build, timeout=RESTART_TIMEOUT_S)
        except (CallTimeout, ActorDied) as exc:
            self.backend.kill(actor)
            cpus = self.backend.num_cpus()
            raise WorkerError(f"{died}; its replacement did not start within {RESTART_TIMEOUT_S:g} s "
                              f"({first_line(exc)}); the cluster has {cpus:g} CPUs for "
                              f"{len(self.actors)} actors of this kind") from exc
        self.actors[index] = actor
        self.num_restarts += 1

    def node_ids(self) -> list[str]:
        """The node each actor runs on (to check placement)."""
        return self.backend.node_ids(self.actors)

    def stop(self) -> None:
        """Kill every actor (on Ray, ``ray.kill`` takes effect soon, not at once)."""
        for actor in self.actors:
            self.backend.kill(actor)
        self.actors = []


class CallsInFlight:
    """Calls kept going on every actor of a manager, up to ``depth`` each, whose results are taken as
    they finish: any actor, any order (Ape-X's acting-worker runs, IMPALA's fragments).

    A call whose actor died never comes back: the actor is replaced (under the manager's restart
    policy), every call it had in flight is dropped and counted in ``num_dropped``, and its
    replacement gets ``depth`` new calls.
    """

    def __init__(self, manager: ActorManager, depth: int) -> None:
        self.manager, self.depth = manager, depth
        self.calls: dict[Any, tuple[int, Any]] = {}  # call -> (actor index, actor handle)
        self.free = [depth] * len(manager.actors)  # calls each actor could have in flight but has not
        self.num_dropped = 0

    def top_up(self, start: Callable[[int], Any], allowed: Callable[[], bool]) -> None:
        """Start calls, ``start(index)`` each, until every actor has ``depth`` in flight, while ``allowed()``."""
        for index in range(len(self.free)):
            while self.free[index] > 0:
                if not allowed():
                    return
                self.calls[start(index)] = (index, self.manager.actors[index])
                self.free[index] -= 1

    def ready(self, timeout: float) -> list[tuple[int, Any]]:
        """``(actor index, result)`` of every call that has finished, waiting up to ``timeout`` seconds
        for the first; an actor found dead is replaced and its calls dropped."""
        if not self.calls:
            return []
        backend = self.manager.backend
        done = backend.wait(list(self.calls), 1, timeout)
        if done:
            done = backend.wait(list(self.calls), len(self.calls), 0)
        results = []
        for ref in done:
            if ref not in self.calls:  # dropped with its dead actor a moment ago
                continue
            index, actor = self.calls.pop(ref)
            try:
                result = self.manager.get(index, ref)
            except ActorDied as exc:
                self.num_dropped += 1 + sum(1 for _, other in self.calls.values() if other is actor)
                self.calls = {key: call for key, call in self.calls.items() if call[1] is not actor}
                if actor is self.manager.actors[index]:  # not replaced already (by another call)
                    self.manager.replace(index, exc)
                self.free[index] = self.depth - sum(1 for i, _ in self.calls.values() if i == index)
                continue
            results.append((index, result))
            self.free[index] += 1
        return results


class RestartCount:
    """A worker group's restart counter that lives in one of its managers (``num_restarts =
    RestartCount("manager")``): results read it, a restored checkpoint sets it."""

    def __init__(self, manager: str) -> None:
        self.manager = manager

    def __get__(self, group: object, owner: type | None = None) -> int:
        return int(getattr(group, self.manager).num_restarts)

    def __set__(self, group: object, value: int) -> None:
        getattr(group, self.manager).num_restarts = value


class ManagedWorkers:
    """What a worker group whose workers are the actors of one :class:`ActorManager`
    (``self.manager``) shares with every other such group."""

    manager: ActorManager
    num_restarts = RestartCount("manager")

    @property
    def actors(self) -> list[Any]:
        """The workers' actor handles, in worker order."""
        return self.manager.actors

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """Observation and action space of one environment, asked of worker 0."""
        return self.manager.get(0, self.manager.call(0, "spaces"))

    def node_ids(self) -> list[str]:
        """The node each worker runs on (to check placement)."""
        return self.manager.node_ids()


def first_line(exc: Exception) -> str:
    """Ray's actor errors run over many lines; the first says what happened."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
