"""Fragments streamed by workers that never wait for the learner (IMPALA, APPO), and the train
batches the learner makes of them.

A :class:`FragmentWorker` wraps a :class:`~volley.rollout.worker.RolloutWorker`: it keeps the
weights (and filter statistics) it was last sent, with their version, and samples one fragment
per request, timing itself; each fragment carries what its filters saw since the last one, which
the learner merges as fragments arrive and sends back with the weights it publishes. A :class:`BatchBuilder` concatenates fragments, in the order they arrive, into train
batches of at least ``train_batch_size`` steps, mixing in replayed fragments. Every engine that
hosts a stream uses both: the local one serially, the Ray one in actors and a feeder thread.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats
from volley.rollout.worker import RolloutWorker, SampleResult

Published = tuple[np.ndarray, FilterStats | None]  # the learner's weights and merged filter statistics


@dataclass
class Fragment:
    """One fragment a worker sampled: ``rollout_fragment_length`` steps of each of its environments."""

    worker_index: int
    result: SampleResult  # its rows (emptied once they are in a train batch), episodes and steps
    weight_version: int  # the version of the weights it acted with (the learner's updates before them)
    sample_s: float  # seconds the worker spent sampling it
    idle_s: float  # seconds the worker had no request to work on before it began it


class FragmentWorker:
    """A rollout worker that samples one fragment per request with the weights it was last sent."""

    def __init__(self, worker: RolloutWorker) -> None:
        self.worker = worker
        self.weights: np.ndarray | None = None
        self.version = 0
        self.finished_at: float | None = None  # when the last fragment was done

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.worker.spaces()

    def sample(self, weights: np.ndarray, filters: FilterStats | None, num_episodes: int | None = None) -> SampleResult:
        """What ``Algorithm.sample()`` asks every worker for: a batch with the weights it is given, as a
        synchronous worker samples (the stream's fragments go on from where this leaves the environments)."""
        return self.worker.sample(weights, filters, num_episodes)

    def fragment(self, published: Published | None, version: int) -> Fragment:
        """Sample one fragment; ``published`` weights and filter statistics (version ``version``)
        replace the ones kept unless None."""
        start = time.perf_counter()
        filters = None
        if published is not None:
            (self.weights, filters), self.version = published, version
        assert self.weights is not None, "the first request carries the weights"
        result = self.worker.sample(self.weights, filters)
        idle = 0.0 if self.finished_at is None else start - self.finished_at
        self.finished_at = time.perf_counter()
        return Fragment(self.worker.worker_index, result, self.version, self.finished_at - start, idle)


@dataclass
class TrainBatch:
    """What the learner updates on: new fragments (their rows moved into ``batch``), and replayed ones."""

    batch: Batch  # every row, the new fragments' first, then the replayed ones'
    fragments: list[Fragment]  # the new fragments: episodes, steps, versions and timings
    num_replayed: int = 0


@dataclass
class BatchBuilder:
    """Fragments in, in the order they arrive; train batches of at least ``steps`` environment steps
    out (a fragment's rows may be more: V-trace's bootstrap rows).

    With ``replay_proportion`` p > 0, every new fragment is followed by p replayed ones on average
    (RLlib's p:1 mixin replay; the fraction is carried over to the next fragment), each drawn
    uniformly from the last ``replay_slots`` new fragments; their steps count towards the batch's.
    """

    steps: int
    replay_proportion: float
    replay_slots: int
    rng: np.random.Generator
    pending: list[Fragment] = field(default_factory=list)
    replayed: list[Batch] = field(default_factory=list)
    size: int = 0  # steps pending
    credit: float = 0.0  # replays owed
    replay: deque[tuple[Batch, int]] = field(init=False)  # fragments' rows and steps

    def __post_init__(self) -> None:
        self.replay = deque(maxlen=self.replay_slots)

    def add(self, fragment: Fragment) -> None:
        self.pending.append(fragment)
        self.size += fragment.result.env_steps
        if self.replay_proportion == 0:
            return
        self.credit += self.replay_proportion
        while self.credit >= 1 and self.replay:
            self.credit -= 1
            rows, steps = self.replay[self.rng.integers(len(self.replay))]
            self.replayed.append(rows)
            self.size += steps
        # a copy: a Ray fragment's arrays are views that pin its object in the store
        rows = Batch({key: np.array(column) for key, column in fragment.result.batch.items()})
        self.replay.append((rows, fragment.result.env_steps))

    def ready(self) -> bool:
        return self.size >= self.steps

    def take(self) -> TrainBatch:
        """The pending fragments as one train batch (call when :meth:`ready`)."""
        fragments, replayed = self.pending, self.replayed
        batch = Batch.concat([f.result.batch for f in fragments] + replayed)
        for fragment in fragments:
            fragment.result.batch = Batch()
        self.pending, self.replayed, self.size = [], [], 0
        return TrainBatch(batch, fragments, len(replayed))
