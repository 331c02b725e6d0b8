"""The interface every engine implements: call a method on all workers, and stop them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from volley.algorithm import Algorithm


class WorkerGroup(ABC):
    """A fixed set of :class:`~volley.rollout.worker.RolloutWorker` s, wherever they run.

    Algorithms only ever talk to workers through :meth:`call`, so an algorithm runs
    unchanged on every engine.
    """

    num_workers: int
    num_restarts: int = 0  # dead workers replaced so far (the Ray engine replaces them)

    @abstractmethod
    def call(self, method: str, *args: Any) -> list[Any]:
        """Run ``worker.method(*args)`` on every worker at once; results in worker order.

        Array arguments are shipped once per call, not once per worker.
        """

    def serve(self, algo: Algorithm) -> None:  # noqa: B027 (an optional hook)
        """Called once the algorithm is built; MPI ranks other than 0 serve rank 0 from here."""

    def begin_iteration(self) -> None:  # noqa: B027 (an optional hook)
        """Called at the start of every ``train()``; MPI rank 0 tells the replicas to follow."""

    def average_gradients(self, parameters: list[torch.Tensor]) -> None:  # noqa: B027 (an optional hook)
        """Average the gradients of ``parameters`` over data-parallel replicas (MPI allreduce mode;
        elsewhere there is one learner and nothing to do)."""

    @abstractmethod
    def stop(self) -> None:
        """End every worker; the group cannot be used afterwards."""
