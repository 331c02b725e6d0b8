"""Asynchronous actors on Ray: a parameter server, replay shards and acting workers around a learner.

Three plain classes, made actors here (Ray's, or in-process ones: :mod:`volley.engines.backends`),
that know nothing of any algorithm:

- :class:`ParameterServer` holds the learner's latest flat weights and their version;
- :class:`ReplayShard` hosts a :mod:`volley.replay` buffer (uniform or prioritized);
- :class:`ActingWorker` wraps a :class:`~volley.rollout.worker.RolloutWorker` and, per
  ``run()``, fetches newer weights, sets the run's exploration on its policy (the
  algorithm's ``explore`` callable), samples fragments (the algorithm's ``postprocess``
  runs in the sampler) until ``steps_per_run`` steps are done, and pushes each
  fragment's rows, with the first priorities the algorithm's ``priorities`` callable
  gives them, to a shard as one chunk, round-robin over the shards.

What an algorithm asks of them comes in an :class:`~volley.engines.base.AsyncSpec`.
:class:`RayAsyncWorkerGroup` is the learner's side. Every acting worker has two ``run()``
calls queued, so it does not idle between them; a finished call's report (episodes,
steps, the weight version used) is collected by :meth:`~RayAsyncWorkerGroup.poll`, which
queues the next. Workers wait (get no new run) while the learner's ``may_sample()`` says
they are too far ahead of it. Minibatch requests are kept in flight (``prefetch`` per
shard), and priority updates and weights are sent without waiting for replies.

Acting workers and replay shards are each an :class:`~volley.engines.actor_manager.ActorManager`:
a dead acting worker is replaced by one with the same index and fresh environment seeds,
whose first run fetches the current weights; a dead shard is replaced by an empty one
(its rows are lost) and counted in ``num_shard_restarts``. Both follow the run's restart
policy. A worker whose push finds its shard dead drops that chunk; the next run gets the
replacement.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from volley.engines.actor_manager import (
    ActorManager,
    CallsInFlight,
    ManagedWorkers,
    RestartCount,
    RestartPolicy,
)
from volley.engines.backends import ActorBackend, ActorDied
from volley.engines.base import ActorReport, AsyncSpec, AsyncWorkerGroup, WorkerRecipe
from volley.engines.ray_engine import actor_backend
from volley.replay import Prioritization, PrioritizedReplayBuffer, make_replay_buffer
from volley.rollout.batch import Batch
from volley.rollout.worker import SampleResult

QUEUED_RUNS = 2  # run() calls queued per acting worker, so one is always ready to start


class ParameterServer:
    """The latest weights the learner published, with their version (0: none yet)."""

    def __init__(self) -> None:
        self.version = 0
        self.weights: np.ndarray | None = None

    def publish(self, weights: np.ndarray, version: int) -> None:
        self.weights, self.version = weights, version

    def fetch(self, known_version: int) -> tuple[int, np.ndarray | None]:
        """The current version, and the weights unless the caller already has them."""
        return self.version, None if known_version == self.version else self.weights


class ReplayShard:
    """One of the replay buffers; shard ``slot`` draws its samples from the stream ``(seed, slot)``."""

    def __init__(self, capacity: int, prioritization: Prioritization | None, seed: int, slot: int) -> None:
        self.buffer = make_replay_buffer(capacity, np.random.default_rng([seed, slot]), prioritization)

    def add(self, rows: Batch, priorities: np.ndarray | None) -> None:
        """Store a chunk; with prioritized replay its rows start at ``priorities`` (TD errors)."""
        slots = self.buffer.add(rows)
        if priorities is not None and isinstance(self.buffer, PrioritizedReplayBuffer):
            self.buffer.update_priorities(slots, priorities[len(priorities) - len(slots):])

    def sample(self, size: int) -> Batch | None:
        return self.buffer.sample(size) if len(self.buffer) else None

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        assert isinstance(self.buffer, PrioritizedReplayBuffer)
        self.buffer.update_priorities(indices, td_errors)

    def size(self) -> int:
        return len(self.buffer)

    def state(self) -> dict[str, np.ndarray]:
        return self.buffer.state()

    def load_state(self, columns: dict[str, np.ndarray]) -> None:
        self.buffer.load_state(columns)


class ActingWorker:
    """A rollout worker that samples with its own exploration and feeds the replay shards directly."""

    def __init__(self, recipe: WorkerRecipe, index: int, slot: int, spec: AsyncSpec,
                 backend: ActorBackend, parameter_server: Any) -> None:
        self.index, self.spec, self.config = index, spec, recipe.config
        self.worker = recipe.build_rollout_worker(index, slot)
        self.backend, self.parameter_server = backend, parameter_server
        self.version = 0
        self.weights: np.ndarray | None = None  # the last fetched
        self.chunks = 0
        self.pending_push: tuple[int, Any] | None = None
        self.dead_shards: set[int] = set()

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.worker.spaces()

    def run(self, exploration: float, shards: list[Any]) -> tuple[SampleResult, int]:
        """Fetch newer weights, then sample ``steps_per_run`` steps into ``shards`` (the
        current handles: a replaced shard's new one).

        Returns the episodes and steps (an empty batch) and the weight version used.
        """
        version, weights = self._fetch()
        while weights is None and self.weights is None:  # the learner's first publish is on its way
            version, weights = self._fetch()
        if weights is not None:
            self.weights, self.version = weights, version
        assert self.weights is not None
        if self.spec.explore is not None:  # on the torch network: its copy of the weights changes
            self.worker.policy.set_flat_weights(self.weights)
            self.spec.explore(self.worker.policy, exploration)
            weights = self.worker.policy.get_flat_weights()  # with this run's exploration in them
        else:
            weights = self.weights
        self.dead_shards.clear()
        results: list[SampleResult] = []
        while sum(r.env_steps for r in results) < self.spec.steps_per_run:
            result = self.worker.sample(weights, None)
            priorities = (self.spec.priorities(self.worker.policy, result.batch, self.config)
                          if self.spec.priorities else None)
            self._push(shards, result.batch, priorities)
            result.batch = Batch()
            results.append(result)
        self._push_done()  # the steps reported are in a shard (unless it died)
        return SampleResult(Batch(), np.concatenate([r.episode_returns for r in results]),
                            np.concatenate([r.episode_lengths for r in results]), None,
                            sum(r.env_steps for r in results),
                            episode_metrics=[m for r in results for m in r.episode_metrics]), self.version

    def _fetch(self) -> tuple[int, np.ndarray | None]:
        return self.backend.get(self.backend.call(self.parameter_server, "fetch", self.version))

    def _push(self, shards: list[Any], rows: Batch, priorities: np.ndarray | None) -> None:
        """One chunk to the next live shard; at most one push in flight, so a slow shard holds us back."""
        self._push_done()
        live = [k for k in range(len(shards)) if k not in self.dead_shards]
        if live:
            shard = live[(self.index + self.chunks) % len(live)]
            self.pending_push = shard, self.backend.call(shards[shard], "add", rows, priorities)
        self.chunks += 1

    def _push_done(self) -> None:
        if self.pending_push is not None:
            shard, ref = self.pending_push
            self.pending_push = None
            try:
                self.backend.get(ref)
            except ActorDied:  # its chunk is lost; the learner replaces the shard
                self.dead_shards.add(shard)


class RayAsyncWorkerGroup(ManagedWorkers, AsyncWorkerGroup):
    """The learner's handle on the parameter server, replay shards and acting workers (``manager``)."""

    num_shard_restarts = RestartCount("replay_shards")

    def __init__(self, recipe: WorkerRecipe, spec: AsyncSpec) -> None:
        config = recipe.config
        self.backend = actor_backend()
        self.started_ray = self.backend.open(config)
        self.config, self.plan, self.spec = config, recipe.plan, spec
        self.num_workers = recipe.plan.num_workers
        self.weight_version = 0
        self.runs: CallsInFlight | None = None  # QUEUED_RUNS run() calls per acting worker, from start()
        self.prefetched: deque[tuple[int, Any, Any]] = deque()  # (shard, actor, sample())
        backend = self.backend
        try:
            where = backend.placement(config, self.num_workers)
            backend.ship(recipe)
            policy = RestartPolicy.of(config)
            # The server and shards only answer calls: they reserve no CPU, so every CPU can act.
            self.parameter_server, _ = backend.spawn(ParameterServer, (), num_cpus=0)
            capacity = math.ceil(spec.replay_capacity / spec.num_replay_shards)
            self.replay_shards = ActorManager(
                "replay shard", lambda index, slot: (ReplayShard, (capacity, spec.prioritization, config.seed, slot)),
                spec.num_replay_shards, policy, backend, num_cpus=0)
            self.manager = ActorManager(
                "acting worker",
                lambda index, slot: (ActingWorker, (recipe, index, slot, spec, backend, self.parameter_server)),
                self.num_workers, policy, backend, config.num_cpus_per_worker, where)
        except BaseException:
            self.stop()
            raise

    def call(self, method: str, *args: Any) -> list[Any]:
        return self.manager.foreach(method, *args)

    # -- acting workers ----------------------------------------------------------------------

    def start(self, weights: np.ndarray, exploration_of: Callable[[int], float],
              may_sample: Callable[[], bool]) -> None:
        self.publish(weights)
        self.exploration_of, self.may_sample = exploration_of, may_sample
        self.runs = CallsInFlight(self.manager, QUEUED_RUNS)
        self.runs.top_up(self._run, self.may_sample)

    def _run(self, index: int) -> Any:
        """Give worker ``index`` more steps to take (into the current replay shards)."""
        return self.manager.call(index, "run", self.exploration_of(index), self.replay_shards.actors)

    def poll(self, timeout: float) -> list[ActorReport]:
        if self.runs is None:
            return []
        self.runs.top_up(self._run, self.may_sample)  # idle workers get more steps, while the learner lets them
        return [ActorReport(index, result, version) for index, (result, version) in self.runs.ready(timeout)]

    # -- parameter server and replay shards --------------------------------------------------

    def publish(self, weights: np.ndarray) -> None:
        self.weight_version += 1
        self.backend.call(self.parameter_server, "publish", weights, self.weight_version)

    def next_minibatch(self) -> tuple[int, Batch] | None:
        if not self.prefetched:
            for _ in range(self.spec.prefetch):
                for shard in range(len(self.replay_shards.actors)):
                    self._request(shard)
        shard, actor, ref = self.prefetched.popleft()
        try:
            batch = self.replay_shards.get(shard, ref)
        except ActorDied as exc:
            if actor is self.replay_shards.actors[shard]:  # its other requests fail too: replace once
                self.replay_shards.replace(shard, exc)
            self._request(shard)
            return None
        self._request(shard)
        if batch is None:
            return None
        # Ray's arrays are read-only views of its object store; torch wants its own
        return shard, Batch({key: np.array(column) for key, column in batch.items()})

    def _request(self, shard: int) -> None:
        self.prefetched.append((shard, self.replay_shards.actors[shard],
                                self.replay_shards.call(shard, "sample", self.spec.minibatch_size)))

    def update_priorities(self, shard: int, indices: np.ndarray, td_errors: np.ndarray) -> None:
        self.replay_shards.call(shard, "update_priorities", indices, td_errors)

    def replay_size(self) -> int:
        return sum(self.replay_shards.foreach("size"))

    def replay_state(self) -> list[dict[str, np.ndarray]]:
        """A dead shard's rows are gone: it is saved empty, and not replaced here, so that the
        final checkpoint of a run its death stopped can still be written."""
        refs = [self.replay_shards.call(shard, "state") for shard in range(len(self.replay_shards.actors))]
        states: list[dict[str, np.ndarray]] = []
        for shard, ref in enumerate(refs):
            try:
                states.append(self.replay_shards.get(shard, ref))
            except ActorDied:
                states.append({})
        return states

    def load_replay_state(self, shards: list[dict[str, np.ndarray]]) -> None:
        count = len(self.replay_shards.actors)
        for target in range(count):
            for columns in shards[target::count]:
                self.replay_shards.get(target, self.replay_shards.call(target, "load_state", columns))

    def stop(self) -> None:
        for manager in (getattr(self, "manager", None), getattr(self, "replay_shards", None)):
            if manager is not None:
                manager.stop()
        if hasattr(self, "parameter_server"):
            self.backend.kill(self.parameter_server)
        self.runs = None
        self.prefetched.clear()
        if self.started_ray:
            self.backend.close()
            self.started_ray = False

