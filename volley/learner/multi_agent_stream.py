"""The stream part of a multi-agent run (:mod:`volley.learner.multi_agent`): each policy's views of
the run's workers that its learner is built on (:class:`PolicyWorkers` for a sampled feed,
:class:`PolicyStream` for a stream), and, for IMPALA and APPO (``multi_agent_feed = "stream"``),
how the run takes the stream's train batches, splits them by policy, interleaves the policies'
updates (:class:`StreamLearner`) and publishes every policy's weights together."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, cast

import numpy as np

from volley.engines import StreamingWorkerGroup, WorkerGroup
from volley.errors import ConfigError
from volley.learner.base import LearnerBase
from volley.learner.loop import Learner
from volley.policies import PolicySetup
from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats
from volley.rollout.fragments import Filters, TrainBatch, Version, Weights
from volley.rollout.multi_agent import MultiAgentSample
from volley.rollout.worker import SampleResult


class PolicyWorkers(WorkerGroup):
    """One policy's view of a multi-agent run's workers: ``sample`` gives the policy's part of the
    run's latest sample (the run samples again if the policy has read it already). A worker that had
    no agent of the policy sampled a batch without columns: it gets the others' columns, with no
    rows, so the learner concatenates the workers' batches as a single-agent run's."""

    def __init__(self, run: MultiAgentStream, policy_id: str, spaces: tuple[Any, Any]) -> None:
        self.run, self.policy_id, self._spaces = run, policy_id, spaces
        self.plan, self.num_workers = run.workers.plan, run.workers.num_workers

    def call(self, method: str, *args: Any) -> list[Any]:
        if method != "sample":
            raise ConfigError(f"{type(self.run).__name__} trains policy {self.policy_id!r} of a multi-agent run from "
                              f"sampled batches; '{method}' is not available there")
        results = self.run.policy_results(self.policy_id)
        columns = next((result.batch for result in results if result.batch), Batch())
        return [result if result.batch else replace(result, batch=Batch({key: value[:0] for key, value in columns.items()}))
                for result in results]

    def spaces(self) -> tuple[Any, Any]:
        return self._spaces

    def stop(self) -> None:
        """The run's workers are stopped by the run."""


class PolicyStream(PolicyWorkers, StreamingWorkerGroup):
    """One policy's view of a multi-agent run's stream of fragments: ``next_batch`` gives the policy's
    part of the stream's next train batch, and what the policy's learner publishes goes to the workers
    with every other policy's weights."""

    def start(self, weights: Weights, filters: Filters, version: Version) -> None:
        """The run starts the stream, with every policy's weights; this one's are recorded."""
        self.publish(weights, filters, version)

    def publish(self, weights: Weights, filters: Filters, version: Version) -> None:
        assert isinstance(weights, np.ndarray) and isinstance(version, int)
        self.run.published[self.policy_id] = (weights, cast(FilterStats | None, filters), version)

    def next_batch(self) -> TrainBatch:
        return self.run.policy_batch(self.policy_id)

    @property
    def num_dropped_fragments(self) -> int:  # type: ignore[override]
        return cast(StreamingWorkerGroup, self.run.workers).num_dropped_fragments


class StreamLearner(Protocol):
    """A learner of an algorithm a multi-agent run feeds a stream (``multi_agent_feed = "stream"``):
    its iteration in three steps, so that the run interleaves the policies' updates."""

    def begin_updates(self) -> None: ...

    def update_once(self) -> None: ...

    def updates_statistics(self, took: float) -> dict[str, Any]: ...


class MultiAgentStream(LearnerBase):
    """The stream part of :class:`~volley.learner.multi_agent.MultiAgent` (which sets the fields
    below, counts the samples and hands each policy's results to its :class:`PolicyWorkers`)."""

    setup_: PolicySetup
    learners: dict[str, Learner]
    # a stream's: what each policy's learner published last (weights, filter statistics, its version)
    published: dict[str, tuple[np.ndarray, FilterStats | None, int]]
    _stream_batches: dict[str, deque[TrainBatch]]  # each policy's parts of train batches not yet read
    _sent: dict[str, tuple[np.ndarray, FilterStats | None, int]]  # what the workers have
    _streaming: bool
    policy_results: Callable[[str], list[SampleResult]]
    _count: Callable[[list[MultiAgentSample]], None]

    def _stream_step(self) -> dict[str, Any]:
        """Train batches from the stream for ``min_time_s_per_iteration`` seconds (and
        ``min_sample_timesteps_per_iteration`` steps), each split by policy; every policy to train
        updates on its part as its algorithm would (as many updates as its minibatch buffer takes to
        read it), in turn with the others, so no policy's batches wait for another's updates."""
        cfg = self.config
        start = time.perf_counter()
        trained = {policy_id: cast(StreamLearner, learner) for policy_id, learner in self.learners.items()
                   if self.setup_.policy_map.trains(policy_id)}
        for policy_id, learner in trained.items():
            self.learners[policy_id].iteration = self.iteration
            learner.begin_updates()
        updated: set[str] = set()
        taken = 0
        while (not taken or time.perf_counter() - start < cfg.min_time_s_per_iteration
               or self._steps_this_iter < cfg.min_sample_timesteps_per_iteration):
            self._take_train_batch()
            taken += 1
            for policy_id, learner in trained.items():
                while self._stream_batches.get(policy_id):
                    learner.update_once()
                    updated.add(policy_id)
        took = time.perf_counter() - start
        for policy_id in updated:  # each learner's schedules run on its own steps
            self.learners[policy_id].timesteps_total += self.learners[policy_id]._steps_this_iter
            self.learners[policy_id]._steps_this_iter = 0
        return {policy_id: trained[policy_id].updates_statistics(took) for policy_id in trained if policy_id in updated}

    def _take_train_batch(self) -> None:
        """The stream's next train batch, with what the learners published last: the run counts its new
        fragments' episodes and steps, a policy to train keeps its part to update on, and any other
        learned policy takes its agents' episodes."""
        self._publish()
        start = time.perf_counter()
        train_batch = cast(StreamingWorkerGroup, self.workers).next_batch()
        self._sample_time += time.perf_counter() - start
        self._count([cast(MultiAgentSample, fragment.result) for fragment in train_batch.fragments])
        for policy_id, learner in self.learners.items():
            part = train_batch.of_policy(policy_id)
            if part.batches and self.setup_.policy_map.trains(policy_id):
                self._stream_batches.setdefault(policy_id, deque()).append(part)
            else:
                learner._merge(part.results())

    def policy_batch(self, policy_id: str) -> TrainBatch:
        """Policy ``policy_id``'s part of the next train batch it has not read (the run takes train
        batches from the stream until one holds rows of it)."""
        batches = self._stream_batches.setdefault(policy_id, deque())
        while not batches:
            self._take_train_batch()
        return batches.popleft()

    def _publish(self) -> None:
        """Every policy's weights, filter statistics and version, as its learner last published them (a
        learner that has not: its weights now, version 0), go to the workers together; the first
        time, the stream starts with them."""
        for policy_id, learner in self.learners.items():
            self.published.setdefault(policy_id, (learner.policy.get_flat_weights(), learner.filter_stats, 0))
        if self._streaming and self._sent.keys() == self.published.keys() and all(
                self._sent[policy_id] is entry for policy_id, entry in self.published.items()):
            return  # the workers have these
        weights = {policy_id: entry[0] for policy_id, entry in self.published.items()}
        filters = {policy_id: entry[1] for policy_id, entry in self.published.items()}
        versions = {policy_id: entry[2] for policy_id, entry in self.published.items()}
        workers = cast(StreamingWorkerGroup, self.workers)
        (workers.publish if self._streaming else workers.start)(weights, filters, versions)
        self._sent, self._streaming = dict(self.published), True
