"""The local engine: workers are ordinary objects in this process, called one after another.

It is the reference the other engines are tested against (same seed, same batches). It runs a
stream of fragments (IMPALA, APPO) serially too: the learner asks its workers for fragments in
turn, each with the weights last published, until a train batch is full.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from volley.engines.base import StreamingWorkerGroup, StreamSpec, WorkerGroup, WorkerRecipe
from volley.rollout.fragments import (
    BatchBuilder,
    Filters,
    FragmentWorker,
    Published,
    TrainBatch,
    Version,
    Weights,
)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Workers run torch with one thread, as Ray's actors do: a batched forward pass per step is
    too small to share, and a second thread made Pong sampling 2-10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class LocalWorkerGroup(WorkerGroup):
    """``plan.num_sampling_workers`` in-process workers (one when ``num_workers=0``)."""

    def __init__(self, recipe: WorkerRecipe) -> None:
        self.plan = recipe.plan
        self.workers = [recipe.build(i) for i in range(recipe.plan.num_sampling_workers)]
        self.num_workers = len(self.workers)

    def call(self, method: str, *args: Any) -> list[Any]:
        with one_torch_thread():
            return [getattr(worker, method)(*args) for worker in self.workers]

    def spaces(self) -> Any:
        return self.workers[0].spaces()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers = []


class LocalStreamingGroup(LocalWorkerGroup, StreamingWorkerGroup):
    """The stream of fragments, serially: worker after worker, each sampling with the weights last
    published, until a train batch is full. Nothing is ever in flight, so nothing is dropped."""

    num_dropped_fragments = 0

    def __init__(self, recipe: WorkerRecipe, spec: StreamSpec) -> None:
        super().__init__(recipe)
        self.streams = [FragmentWorker(worker) for worker in self.workers]
        self.builder = BatchBuilder(spec.train_batch_size, spec.replay_proportion, spec.replay_slots,
                                    np.random.default_rng([recipe.config.seed, 1]))
        self.next_worker = 0
        self.published: Published | None = None
        self.version: Version = 0

    def start(self, weights: Weights, filters: Filters, version: Version) -> None:
        self.publish(weights, filters, version)

    def publish(self, weights: Weights, filters: Filters, version: Version) -> None:
        self.published, self.version = (weights, filters), version

    def next_batch(self) -> TrainBatch:
        with one_torch_thread():
            while not self.builder.ready():
                stream = self.streams[self.next_worker]
                self.next_worker = (self.next_worker + 1) % len(self.streams)
                news = stream.version != self.version or stream.weights is None
                self.builder.add(stream.fragment(self.published if news else None, self.version))
        return self.builder.take()
