"""How the engines reach their actors: one small interface, hosted by Ray or in this process.

The :class:`~volley.engines.actor_manager.ActorManager`, its calls in flight and the worker groups
built on it talk to actors only through an :class:`ActorBackend`: spawn an actor hosting an object,
call a method of that object (a reference to its result), wait for the references that finished,
get a result, kill an actor. A dead actor is one error, :class:`ActorDied`, whatever hosts it; an
exception the method raised reaches the caller as :class:`CallFailed`, with its cause.

Two backends implement it: Ray's (:class:`~volley.engines.ray_engine.RayBackend`, the Ray engine's
actors) and :class:`InProcessBackend`, whose actors are objects in this process. Its calls run when
a ``wait`` or ``get`` needs their result, oldest first and one actor's in order (as a Ray actor runs
them), and :meth:`~InProcessBackend.kill` ends an actor between two calls: every call it had not
run fails with ``ActorDied``. A test so decides exactly which calls a death cuts off, and the fault
handling above the interface (replacements, their slots, dropped calls, restart limits) is tested
without processes or timing (:func:`hosted_in_process`).
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from volley.config import AlgorithmConfig
    from volley.engines.base import WorkerRecipe


class ActorDied(Exception):
    """The actor is gone (killed, its process exited, its node removed): none of its calls will
    answer, and it answers no new one."""


class CallFailed(Exception):
    """The hosted object's method raised ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


class CallTimeout(Exception):
    """A result did not come within the time asked for."""


class ActorBackend(ABC):
    """Where a worker group's actors live; an actor hosts one object built inside it by ``make(*args)``."""

    @abstractmethod
    def open(self, config: AlgorithmConfig) -> bool:
        """Make the backend ready for ``config``'s run; True if this call started something to :meth:`close`."""

    @abstractmethod
    def close(self) -> None:
        """End what :meth:`open` started."""

    @abstractmethod
    def placement(self, config: AlgorithmConfig, num_workers: int, reserved_cpus: float = 0.0) -> Any:
        """Where ``num_workers`` worker actors go (a ConfigError if they do not fit), for :meth:`spawn`."""

    @abstractmethod
    def ship(self, recipe: WorkerRecipe) -> None:
        """Make the user's code a recipe holds reach the actors (a ConfigError if it cannot)."""

    @abstractmethod
    def spawn(self, make: Callable[..., Any], args: tuple[Any, ...], num_cpus: float,
              where: Any = None) -> tuple[Any, Any]:
        """A new actor, and the reference of its hosted object's construction (``make(*args)``)."""

    @abstractmethod
    def call(self, actor: Any, method: str, *args: Any) -> Any:
        """Start ``method(*args)`` on the actor's hosted object; a reference to its result."""

    @abstractmethod
    def wait(self, refs: list[Any], num_returns: int, timeout: float | None) -> list[Any]:
        """The references of ``refs`` that finished (answered, raised or died), once ``num_returns``
        did or ``timeout`` seconds passed (``0``: those finished already)."""

    @abstractmethod
    def get(self, ref: Any, timeout: float | None = None) -> Any:
        """The result; :class:`CallFailed`, :class:`ActorDied` or :class:`CallTimeout` if none came."""

    @abstractmethod
    def put(self, value: Any) -> Any:
        """``value`` stored once, to pass to many calls."""

    @abstractmethod
    def kill(self, actor: Any) -> None:
        """End the actor: the calls it has not answered fail with :class:`ActorDied`."""

    @abstractmethod
    def node_ids(self, actors: list[Any]) -> list[str]:
        """The machine each actor runs on."""

    @abstractmethod
    def num_cpus(self) -> float:
        """The CPUs there are for actors (named when a replacement cannot be placed)."""


@dataclass(eq=False)
class InProcessActor:
    """An actor of :class:`InProcessBackend`: its hosted object and the calls it has not run yet."""

    hosted: Any = None
    alive: bool = True
    calls_left: int | None = None  # set by crash(): the calls it runs before it dies
    queue: deque[InProcessRef] = field(default_factory=deque)

    def __deepcopy__(self, memo: dict[int, Any]) -> InProcessActor:
        return self  # a handle passed in a call's arguments names the same actor, as Ray's does


@dataclass(eq=False)
class InProcessRef:
    """One call: ``run()`` on ``actor``, the ``order``-th call made; its outcome once ``done``."""

    actor: InProcessActor
    run: Callable[[], Any]
    order: int
    done: bool = False
    value: Any = None
    error: Exception | None = None


class InProcessBackend(ActorBackend):
    """Actors as objects in this process; calls run lazily, in the order they were made.

    Arguments, stored values and results are copies, as Ray's pass through its object store, so
    neither side sees the other change them. Thread-safe (a feeder thread and the learner may call
    it): one call runs at a time.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.counter = itertools.count()

    def __deepcopy__(self, memo: dict[int, Any]) -> InProcessBackend:
        return self  # an actor that calls other actors is handed the backend itself

    def open(self, config: AlgorithmConfig) -> bool:
        return False

    def close(self) -> None:
        pass

    def placement(self, config: AlgorithmConfig, num_workers: int, reserved_cpus: float = 0.0) -> Any:
        return None

    def ship(self, recipe: WorkerRecipe) -> None:
        pass

    def spawn(self, make: Callable[..., Any], args: tuple[Any, ...], num_cpus: float,
              where: Any = None) -> tuple[InProcessActor, InProcessRef]:
        actor, args = InProcessActor(), copy.deepcopy(args)

        def build() -> None:
            actor.hosted = make(*args)

        return actor, self._enqueue(actor, build)

    def call(self, actor: InProcessActor, method: str, *args: Any) -> InProcessRef:
        args = copy.deepcopy(args)
        return self._enqueue(actor, lambda: getattr(actor.hosted, method)(*args))

    def _enqueue(self, actor: InProcessActor, run: Callable[[], Any]) -> InProcessRef:
        with self.lock:
            ref = InProcessRef(actor, run, next(self.counter))
            actor.queue.append(ref)
            return ref

    def _finish(self, ref: InProcessRef) -> None:
        """Run the actor's calls up to and including ``ref`` (a dead actor's fail)."""
        with self.lock:
            while not ref.done:
                actor = ref.actor
                if actor.calls_left == 0:
                    self._end(actor, "the actor crashed")  # every call it has not run fails, ``ref`` too
                    return
                if actor.calls_left is not None:
                    actor.calls_left -= 1
                call = actor.queue.popleft()
                if not actor.alive:
                    call.error = ActorDied("the actor is dead")
                else:
                    try:
                        call.value = copy.deepcopy(call.run())
                    except Exception as exc:
                        call.error = exc
                call.done = True

    def wait(self, refs: list[Any], num_returns: int, timeout: float | None) -> list[Any]:
        with self.lock:
            if timeout != 0:
                for ref in sorted(refs, key=lambda r: r.order):
                    if sum(r.done for r in refs) >= num_returns:
                        break
                    self._finish(ref)
            return [ref for ref in refs if ref.done]

    def get(self, ref: InProcessRef, timeout: float | None = None) -> Any:
        self._finish(ref)
        if isinstance(ref.error, ActorDied):
            raise ActorDied(*ref.error.args)
        if ref.error is not None:
            raise CallFailed(ref.error) from ref.error
        return ref.value

    def put(self, value: Any) -> Any:
        return copy.deepcopy(value)

    def kill(self, actor: InProcessActor) -> None:
        self._end(actor, "the actor was killed")

    def _end(self, actor: InProcessActor, how: str) -> None:
        with self.lock:
            actor.alive = False
            while actor.queue:
                call = actor.queue.popleft()
                call.error, call.done = ActorDied(how), True

    def crash(self, actor: InProcessActor, after_calls: int) -> None:
        """The actor dies as it starts its call after the next ``after_calls`` (as a process that
        crashes at work), so that the calls it holds in flight then are known, whatever the threads do."""
        with self.lock:
            actor.calls_left = after_calls

    def node_ids(self, actors: list[Any]) -> list[str]:
        return ["this process"] * len(actors)

    def num_cpus(self) -> float:
        return float(os.cpu_count() or 1)


_hosting: InProcessBackend | None = None  # set by hosted_in_process()


def in_process_host() -> InProcessBackend | None:
    """The in-process backend the Ray engine's groups use instead of Ray, inside :func:`hosted_in_process`."""
    return _hosting


@contextmanager
def hosted_in_process() -> Iterator[InProcessBackend]:
    """Within it, groups of the Ray engine built host their actors in this process (fault tests)."""
    global _hosting
    previous, _hosting = _hosting, InProcessBackend()
    try:
        yield _hosting
    finally:
        _hosting = previous
