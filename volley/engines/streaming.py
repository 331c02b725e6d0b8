"""A stream of fragments on Ray (or in-process actors, :mod:`volley.engines.backends`): workers that never wait for the learner, and a feeder thread that
keeps them busy and prepares the learner's train batches while it updates (IMPALA, APPO).

Each worker is an actor hosting a :class:`~volley.rollout.fragments.FragmentWorker`, one of
an :class:`~volley.engines.actor_manager.ActorManager`'s actors. The feeder thread keeps
``max_requests_in_flight`` fragment requests going on every worker
(:class:`~volley.engines.actor_manager.CallsInFlight`), so a worker starts its next fragment the
moment one is done; takes fragments as they finish, from any worker in any order; and
concatenates them (with replayed ones) into train batches on a queue of ``learner_queue_size``.
While the queue is full, workers get no new requests: fragments wait in the object store,
nothing is dropped. The learner, in the main thread, only takes batches from the queue.

Weights travel with requests: :meth:`RayStreamingGroup.publish` puts them (and the merged filter
statistics) into the object store once, and the next request to each worker carries them (with
their version), so a worker acts with new weights from the first fragment it starts after they
were published, behind at most
the requests it had queued already. A worker that dies is replaced (``restart_failed_workers``,
``max_worker_restarts``); the fragments it had in flight are dropped and counted in
``num_dropped_fragments`` (a fragment is one object: it arrives whole or not at all), and its
replacement gets the current weights with its first request. An error the feeder cannot handle
(the restart limit, an environment's ``EnvError``) is raised in the learner's next
:meth:`~RayStreamingGroup.next_batch`.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np

from volley.engines.actor_manager import ActorManager, CallsInFlight, ManagedWorkers, RestartPolicy
from volley.engines.base import StreamingWorkerGroup, StreamSpec, WorkerRecipe
from volley.engines.ray_engine import actor_backend
from volley.rollout.fragments import (
    BatchBuilder,
    Filters,
    FragmentWorker,
    TrainBatch,
    Version,
    Weights,
)

POLL_S = 0.05  # how long the feeder waits for a fragment before it looks at the queue and stop flag again
IDLE_S = 0.001  # how long it waits for room in a full queue before it looks again


def fragment_worker(recipe: WorkerRecipe, index: int, slot: int) -> FragmentWorker:
    """Built inside the actor: worker ``index``, its environments seeded from ``slot``."""
    return FragmentWorker(recipe.build(index, slot))


class RayStreamingGroup(ManagedWorkers, StreamingWorkerGroup):
    """``num_workers`` fragment workers as actors, and the feeder thread that serves the learner."""

    def __init__(self, recipe: WorkerRecipe, spec: StreamSpec) -> None:
        config = recipe.config
        self.backend = actor_backend()
        self.started_ray = self.backend.open(config)
        self.config, self.plan, self.spec = config, recipe.plan, spec
        self.num_workers = recipe.plan.num_workers
        self.batches: queue.Queue[TrainBatch] = queue.Queue(maxsize=spec.learner_queue_size)
        self.builder = BatchBuilder(spec.train_batch_size, spec.replay_proportion, spec.replay_slots,
                                    np.random.default_rng([config.seed, 1]))
        self.lock = threading.Lock()  # the weights and version the learner published last
        self.published: Any = None  # the object ref of the weights and filter statistics
        self.version: Version = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.feeder: threading.Thread | None = None
        try:
            where = self.backend.placement(config, self.num_workers)
            self.backend.ship(recipe)
            self.manager = ActorManager("rollout worker", lambda index, slot: (fragment_worker, (recipe, index, slot)),
                                        self.num_workers, RestartPolicy.of(config), self.backend,
                                        config.num_cpus_per_worker, where)
        except BaseException:
            self.stop()
            raise
        self.requests = CallsInFlight(self.manager, spec.max_requests_in_flight)
        self.sent: list[tuple[Any, Version]] = [(None, -1)] * self.num_workers  # (actor, version) it has

    @property
    def num_dropped_fragments(self) -> int:  # type: ignore[override]
        return self.requests.num_dropped

    def call(self, method: str, *args: Any) -> list[Any]:
        return self.manager.foreach(method, *args)

    def start(self, weights: Weights, filters: Filters, version: Version) -> None:
        self.publish(weights, filters, version)
        self.feeder = threading.Thread(target=self._feed, name="volley-feeder", daemon=True)
        self.feeder.start()

    def publish(self, weights: Weights, filters: Filters, version: Version) -> None:
        ref = self.backend.put((weights, filters))  # a copy of both as they are now
        with self.lock:
            self.published, self.version = ref, version

    def next_batch(self) -> TrainBatch:
        while True:
            try:
                return self.batches.get(timeout=POLL_S)
            except queue.Empty:
                if self.error is not None:
                    raise self.error from None
                if self.feeder is None or not self.feeder.is_alive():
                    raise RuntimeError("the stream of fragments is not running (start() it first)") from None

    # -- the feeder thread -------------------------------------------------------------------

    def _feed(self) -> None:
        try:
            while not self.stopping.is_set():
                self.requests.top_up(self._request, lambda: not self.batches.full())
                if not self.requests.calls:  # the queue is full: wait for the learner to take a batch
                    self.stopping.wait(IDLE_S)
                    continue
                for _, fragment in self.requests.ready(timeout=POLL_S):
                    self.builder.add(fragment)
                    while self.builder.ready() and not self.stopping.is_set():
                        self._put(self.builder.take())
        except BaseException as exc:  # the learner raises it; this thread ends
            self.error = exc

    def _request(self, index: int) -> Any:
        """Ask worker ``index`` for a fragment, with what was published last if it lacks it."""
        actor = self.manager.actors[index]
        with self.lock:
            published, version = self.published, self.version
        sent_to, sent_version = self.sent[index]
        if sent_to is actor and sent_version == version:
            return self.manager.call(index, "fragment", None, version)
        self.sent[index] = (actor, version)
        return self.manager.call(index, "fragment", published, version)

    def _put(self, batch: TrainBatch) -> None:
        while not self.stopping.is_set():
            try:
                self.batches.put(batch, timeout=POLL_S)
                return
            except queue.Full:
                continue

    def stop(self) -> None:
        self.stopping.set()
        if self.feeder is not None:
            self.feeder.join(timeout=30)
            self.feeder = None
        if hasattr(self, "manager"):
            self.manager.stop()
        if self.started_ray:
            self.backend.close()
            self.started_ray = False
