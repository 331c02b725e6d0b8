"""The interface every engine implements: call a method on all workers, and stop them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class WorkerGroup(ABC):
    """A fixed set of :class:`~volley.rollout.worker.RolloutWorker` s, wherever they run.

    Algorithms only ever talk to workers through :meth:`call`, so an algorithm runs
    unchanged on every engine.
    """

    num_workers: int

    @abstractmethod
    def call(self, method: str, *args: Any) -> list[Any]:
        """Run ``worker.method(*args)`` on every worker at once; results in worker order.

        Array arguments are shipped once per call, not once per worker.
        """

    @abstractmethod
    def stop(self) -> None:
        """End every worker; the group cannot be used afterwards."""
