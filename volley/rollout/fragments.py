"""Fragments streamed by workers that never wait for the learner (IMPALA, APPO), and the train
batches the learner makes of them.

A :class:`FragmentWorker` wraps a rollout worker (a single-agent one, or a multi-agent run's): it
keeps the weights (and filter statistics) it was last sent, with their version, and samples one
fragment per request, timing itself; each fragment carries what its filters saw since the last
one, which the learner merges as fragments arrive and sends back with the weights it publishes. A
:class:`BatchBuilder` concatenates fragments, in the order they arrive, into train batches of at
least ``train_batch_size`` environment steps, mixing in replayed fragments. Every engine that hosts
a stream uses both: the local one serially, the Ray one in actors and a feeder thread.

Rows are kept by policy, as a multi-agent worker's fragment holds them: a single-agent fragment is
the map with one entry (``default_policy``). A multi-agent run publishes every policy's weights,
filter statistics and version as dicts by policy id, and splits each train batch by policy
(:meth:`TrainBatch.of_policy`): each policy's learner trains on its own agents' rows.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from volley.policies import PolicySetup
from volley.rllib_results import DEFAULT_POLICY
from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats
from volley.rollout.multi_agent import MultiAgentRolloutWorker, MultiAgentSample
from volley.rollout.worker import SampleResult

# what the learner publishes, and the version of it a fragment acted with (the learner's updates before it):
# one policy's, or a multi-agent run's as dicts by policy id
Weights = np.ndarray | dict[str, np.ndarray]
Filters = FilterStats | None | dict[str, FilterStats | None]
Version = int | dict[str, int]
Published = tuple[Weights, Filters]


class Sampler(Protocol):
    """What a :class:`FragmentWorker` samples with: a :class:`~volley.rollout.worker.RolloutWorker`, or a
    :class:`~volley.rollout.multi_agent.MultiAgentRolloutWorker` (which takes dicts by policy id)."""

    worker_index: int

    def sample(self, weights: Any, filters: Any, num_episodes: int | None = None) -> SampleResult | MultiAgentSample:
        ...

    def spaces(self) -> Any:
        ...


def results_by_policy(result: SampleResult | MultiAgentSample) -> dict[str, SampleResult]:
    """A fragment's results by policy: a multi-agent worker's, or a single-agent worker's one policy's."""
    return result.policies if isinstance(result, MultiAgentSample) else {DEFAULT_POLICY: result}


@dataclass
class Fragment:
    """One fragment a worker sampled: ``rollout_fragment_length`` steps of each of its environments."""

    worker_index: int
    # its rows (emptied once they are in a train batch), episodes and steps: a multi-agent worker's by policy
    result: SampleResult | MultiAgentSample
    weight_version: Version  # the version of the weights it acted with
    sample_s: float  # seconds the worker spent sampling it
    idle_s: float  # seconds the worker had no request to work on before it began it

    def of_policy(self, policy_id: str) -> Fragment | None:
        """Its part of one policy of a multi-agent run: that policy's results and version (None when
        the worker had no such policy, as one added after it began)."""
        result = results_by_policy(self.result).get(policy_id)
        if result is None:
            return None
        version = self.weight_version
        version = version.get(policy_id, 0) if isinstance(version, dict) else version
        return Fragment(self.worker_index, result, version, self.sample_s, self.idle_s)

    def lag(self, updates: int) -> int:
        """The learner's updates since the weights this one-policy fragment acted with (``updates`` now)."""
        assert isinstance(self.weight_version, int), "a multi-agent fragment lags per policy (of_policy)"
        return updates - self.weight_version


class FragmentWorker:
    """A rollout worker that samples one fragment per request with the weights it was last sent."""

    def __init__(self, worker: Sampler) -> None:
        self.worker = worker
        self.weights: Weights | None = None
        self.version: Version = 0
        self.finished_at: float | None = None  # when the last fragment was done

    def spaces(self) -> Any:
        return self.worker.spaces()

    def sample(self, weights: Weights, filters: Filters, num_episodes: int | None = None
               ) -> SampleResult | MultiAgentSample:
        """What ``Algorithm.sample()`` asks every worker for: a batch with the weights it is given, as a
        synchronous worker samples (the stream's fragments go on from where this leaves the environments)."""
        return self.worker.sample(weights, filters, num_episodes)

    def set_policies(self, setup: PolicySetup) -> None:
        """A multi-agent run's policies changed (``add_policy``, ``remove_policy``): its next fragment
        is sampled with them."""
        assert isinstance(self.worker, MultiAgentRolloutWorker)
        self.worker.set_policies(setup)

    def fragment(self, published: Published | None, version: Version) -> Fragment:
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
    """What the learner updates on: new fragments (their rows moved into ``batches``), and replayed ones."""

    batches: dict[str, Batch]  # every row by policy, the new fragments' first, then the replayed ones'
    fragments: list[Fragment]  # the new fragments: episodes, steps, versions and timings
    num_replayed: int = 0

    @property
    def batch(self) -> Batch:
        """The rows of its one policy (a single-agent run's, or one policy's part of a multi-agent one)."""
        (rows,) = self.batches.values()
        return rows

    def results(self) -> list[SampleResult]:
        """The new fragments' results, each policy's: episodes, steps and filter statistics."""
        return [result for fragment in self.fragments for result in results_by_policy(fragment.result).values()]

    def of_policy(self, policy_id: str) -> TrainBatch:
        """A multi-agent train batch's part of one policy: its rows (none where its agents had no steps)
        and its part of every new fragment (its agents' episodes and steps, its weights' version)."""
        parts = [fragment.of_policy(policy_id) for fragment in self.fragments]
        rows = {policy_id: self.batches[policy_id]} if policy_id in self.batches else {}
        return TrainBatch(rows, [part for part in parts if part is not None], self.num_replayed)


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
    replayed: list[dict[str, Batch]] = field(default_factory=list)
    size: int = 0  # steps pending
    credit: float = 0.0  # replays owed
    replay: deque[tuple[dict[str, Batch], int]] = field(init=False)  # fragments' rows (by policy) and steps

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
        rows = {policy_id: Batch({key: np.array(column) for key, column in result.batch.items()})
                for policy_id, result in results_by_policy(fragment.result).items() if len(result.batch)}
        self.replay.append((rows, fragment.result.env_steps))

    def ready(self) -> bool:
        return self.size >= self.steps

    def take(self) -> TrainBatch:
        """The pending fragments as one train batch (call when :meth:`ready`)."""
        fragments, replayed = self.pending, self.replayed
        rows: dict[str, list[Batch]] = {}
        for part in [{p: r.batch for p, r in results_by_policy(f.result).items()} for f in fragments] + replayed:
            for policy_id, batch in part.items():
                if len(batch):  # a policy whose agents took no step in a fragment has no rows there
                    rows.setdefault(policy_id, []).append(batch)
        for fragment in fragments:
            for result in results_by_policy(fragment.result).values():
                result.batch = Batch()
        self.pending, self.replayed, self.size = [], [], 0
        return TrainBatch({policy_id: Batch.concat(batches) for policy_id, batches in rows.items()}, fragments,
                          len(replayed))
