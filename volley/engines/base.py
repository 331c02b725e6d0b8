"""The interface every engine implements: call a method on all workers, and stop them; and
the asynchronous one (acting workers, replay shards, a parameter server) Ray implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from volley.rollout.batch import Batch
from volley.rollout.worker import SampleResult

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

    def average_over_replicas(self, values: np.ndarray) -> np.ndarray:
        """``values`` averaged element-wise over data-parallel replicas (MPI allreduce mode); elsewhere
        there is one learner, and they come back as they are."""
        return values

    @abstractmethod
    def stop(self) -> None:
        """End every worker; the group cannot be used afterwards."""


@dataclass
class ActorReport:
    """What an acting worker sends the learner after each ``weight_sync_interval`` steps."""

    worker_index: int
    result: SampleResult  # episode statistics and steps; its transitions went to a replay shard
    weight_version: int  # the parameter server's version it acted with


class AsyncWorkerGroup(WorkerGroup):
    """Acting workers that sample continuously into replay shards, a parameter server they
    fetch weights from, and the learner's side of both (asynchronous DQN, Ape-X).

    The learner never waits on a round trip it can avoid: replay minibatches are requested
    ahead of use and priority updates and weights are sent without waiting for a reply.
    """

    num_restarts: int  # acting workers replaced after they died
    weight_version: int  # of the weights last published (0: none yet)

    @abstractmethod
    def start(self, weights: np.ndarray, epsilon_of: Callable[[int], float],
              may_sample: Callable[[], bool]) -> None:
        """Publish the first weights and set every acting worker going. Each time a worker is
        given more steps to take, ``epsilon_of(i)`` is worker ``i``'s exploration ε; while
        ``may_sample()`` is False, finished workers wait instead."""

    @abstractmethod
    def publish(self, weights: np.ndarray) -> None:
        """Send the learner's weights to the parameter server as version ``weight_version + 1``."""

    @abstractmethod
    def poll(self, timeout: float) -> list[ActorReport]:
        """Reports that have arrived (waiting up to ``timeout`` seconds for the first); gives
        workers more steps while ``may_sample()`` and replaces any that died."""

    @abstractmethod
    def next_minibatch(self) -> tuple[int, Batch] | None:
        """A prefetched replay minibatch and the shard it came from (None while shards are empty)."""

    @abstractmethod
    def update_priorities(self, shard: int, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Send new TD errors for rows ``indices`` of ``shard`` (prioritized replay)."""

    @abstractmethod
    def replay_size(self) -> int:
        """Rows held by all shards together."""

    @abstractmethod
    def replay_state(self) -> list[dict[str, np.ndarray]]:
        """Each shard's rows, oldest first, as columns (see ``ReplayBuffer.state``)."""

    @abstractmethod
    def load_replay_state(self, shards: list[dict[str, np.ndarray]]) -> None:
        """Refill the shards from :meth:`replay_state` output (saved shard ``k`` goes to shard
        ``k mod num_replay_shards``)."""
