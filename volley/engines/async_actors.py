"""Ape-X on Ray: a parameter server, replay-shard actors and acting workers around the learner.

Three plain classes, each made a Ray actor here:

- :class:`ParameterServer` holds the learner's latest flat weights and their version;
- :class:`ReplayShard` hosts a :mod:`volley.replay` buffer (uniform or prioritized);
- :class:`ActingWorker` wraps a :class:`~volley.rollout.worker.RolloutWorker` and, per
  ``run()``, fetches newer weights, samples fragments until ``weight_sync_interval``
  steps are done, and pushes each fragment's transitions (with their initial TD errors)
  to a shard as one chunk, round-robin over the shards.

:class:`RayAsyncWorkerGroup` is the learner's side. Every acting worker has two
``run()`` calls queued, so it does not idle between them; a finished call's report
(episodes, steps, the weight version used) is collected by :meth:`poll`, which
queues the next. A worker that died (``ray.kill``, a crashed node) is replaced by a
fresh one with the same index, which fetches the current weights on its first run.
Workers wait (get no new run) while the learner's ``may_sample()`` says they are too
far ahead of it.
Minibatch requests are kept in flight (``replay_prefetch`` per shard), and priority
updates and weights are sent without waiting for replies.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from volley.algorithms.dqn import make_replay_buffer
from volley.engines.base import ActorReport, AsyncWorkerGroup
from volley.engines.ray_engine import _WorkerHost, init_ray, placement, ship_by_value
from volley.envs import EnvCreator
from volley.errors import ConfigError, VolleyError, WorkerError
from volley.models import QNetwork
from volley.replay import PrioritizedReplayBuffer
from volley.rollout.batch import Batch
from volley.rollout.worker import Postprocess, RolloutWorker, SampleResult

if TYPE_CHECKING:
    from volley.algorithms.apex_dqn import ApexDQNConfig
    from volley.engines import TDErrors

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
    """One of ``num_replay_shards`` buffers, each ``replay_buffer_capacity / shards`` rows."""

    def __init__(self, config: ApexDQNConfig, index: int) -> None:
        capacity = math.ceil(config.replay_buffer_capacity / config.num_replay_shards)
        self.buffer = make_replay_buffer(config, capacity, np.random.default_rng([config.seed, index]))

    def add(self, rows: Batch, td_errors: np.ndarray | None) -> None:
        """Store a chunk; with prioritized replay its rows start at their TD errors' priority."""
        slots = self.buffer.add(rows)
        if td_errors is not None and isinstance(self.buffer, PrioritizedReplayBuffer):
            self.buffer.update_priorities(slots, td_errors[len(td_errors) - len(slots):])

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
    """A rollout worker that samples with its own ε and feeds the replay shards directly."""

    def __init__(self, config: ApexDQNConfig, index: int, postprocess: Postprocess,
                 env_creator: EnvCreator | None, td_errors: TDErrors | None, parameter_server: Any,
                 shards: list[Any]) -> None:
        self.config, self.index, self.td_errors = config, index, td_errors
        self.worker = RolloutWorker(config, index, postprocess, env_creator)
        self.parameter_server, self.shards = parameter_server, shards
        self.version = 0
        self.chunks = 0
        self.pending_push: ray.ObjectRef | None = None

    def spaces(self) -> Any:
        return self.worker.spaces()

    def run(self, epsilon: float) -> tuple[SampleResult, int]:
        """Fetch newer weights, then sample ``weight_sync_interval`` steps into the shards.

        Returns the episodes and steps (an empty batch) and the weight version used.
        """
        policy = self.worker.policy
        assert isinstance(policy, QNetwork)
        version, weights = ray.get(self.parameter_server.fetch.remote(self.version))
        if weights is not None:
            policy.set_flat_weights(weights)
            self.version = version
        policy.set_epsilon(epsilon)
        weights = policy.get_flat_weights()  # with this worker's ε in them
        results: list[SampleResult] = []
        while sum(r.env_steps for r in results) < self.config.weight_sync_interval:
            result = self.worker.sample(weights, None)
            td_errors = self.td_errors(policy, result.batch, self.config) if self.td_errors else None
            self._push(result.batch, td_errors)
            result.batch = Batch()
            results.append(result)
        self._push_done()  # the steps reported are in a shard
        return SampleResult(Batch(), np.concatenate([r.episode_returns for r in results]),
                            np.concatenate([r.episode_lengths for r in results]), None,
                            sum(r.env_steps for r in results)), self.version

    def _push(self, rows: Batch, td_errors: np.ndarray | None) -> None:
        """One chunk to the next shard; at most one push in flight, so a slow shard holds us back."""
        self._push_done()
        shard = self.shards[(self.index + self.chunks) % len(self.shards)]
        self.pending_push = shard.add.remote(rows, td_errors)
        self.chunks += 1

    def _push_done(self) -> None:
        if self.pending_push is not None:
            ray.get(self.pending_push)
            self.pending_push = None


class RayAsyncWorkerGroup(AsyncWorkerGroup):
    """The learner's handle on Ape-X's actors (see the module docstring)."""

    def __init__(self, config: ApexDQNConfig, postprocess: Postprocess, env_creator: EnvCreator | None,
                 td_errors: TDErrors | None) -> None:
        self.started_ray = init_ray(config)
        self.config = config
        self.num_workers = config.resolved_num_workers
        self.num_restarts = 0
        self.weight_version = 0
        try:
            self.strategy = placement(config, self.num_workers)
        except ConfigError:
            self.stop()
            raise
        ship_by_value(env_creator)
        # The server and shards only answer calls: they reserve no CPU, so every CPU can act.
        self.parameter_server: Any = ray.remote(num_cpus=0)(ParameterServer).remote()
        self.shards: list[Any] = [ray.remote(num_cpus=0)(ReplayShard).remote(config, k)
                       for k in range(config.num_replay_shards)]
        self._worker_args = (postprocess, env_creator, td_errors, self.parameter_server, self.shards)
        self.actors: list[Any] = []
        self.builds: list[ray.ObjectRef] = []
        for index in range(self.num_workers):
            actor, build = self._spawn(index)
            self.actors.append(actor)
            self.builds.append(build)
        self._get(self.builds)
        self.runs: dict[ray.ObjectRef, tuple[int, Any]] = {}  # queued run() -> (index, actor)
        self.prefetched: deque[tuple[int, ray.ObjectRef]] = deque()
        self.idle: list[int] = []  # run() calls each worker could have queued but has not

    def _spawn(self, index: int) -> tuple[Any, ray.ObjectRef]:
        host: Any = ray.remote(num_cpus=self.config.num_cpus_per_worker)(_WorkerHost)
        actor = host.options(scheduling_strategy=self.strategy).remote()
        return actor, actor.build.remote(ActingWorker, self.config, index, *self._worker_args)

    def _get(self, refs: list[ray.ObjectRef]) -> list[Any]:
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, VolleyError):
                raise exc.cause from None
            raise WorkerError(f"an Ape-X actor failed: {type(exc.cause).__name__}: {exc.cause}") from exc

    def call(self, method: str, *args: Any) -> list[Any]:
        return self._get([actor.call.remote(method, *args) for actor in self.actors])

    # -- acting workers ----------------------------------------------------------------------

    def start(self, weights: np.ndarray, epsilon_of: Callable[[int], float],
              may_sample: Callable[[], bool]) -> None:
        self.publish(weights)
        self.epsilon_of, self.may_sample = epsilon_of, may_sample
        self.idle = [QUEUED_RUNS] * self.num_workers
        self._queue_runs()

    def _queue_runs(self) -> None:
        """Give idle workers more steps, while the learner lets them."""
        for index, idle in enumerate(self.idle):
            for _ in range(idle):
                if not self.may_sample():
                    return
                actor = self.actors[index]
                self.runs[actor.call.remote("run", self.epsilon_of(index))] = (index, actor)
                self.idle[index] -= 1

    def poll(self, timeout: float) -> list[ActorReport]:
        self._queue_runs()
        if not self.runs:
            return []
        ready, _ = ray.wait(list(self.runs), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
        reports = []
        for ref in ready:
            index, actor = self.runs.pop(ref)
            try:
                result, version = ray.get(ref)
            except ray.exceptions.RayActorError:
                if actor is self.actors[index]:  # its other queued run fails too: replace once
                    self._replace(index)
                continue
            except ray.exceptions.RayTaskError:
                self._get([self.builds[index], ref])  # raises a constructor's error, else the run's
                raise
            reports.append(ActorReport(index, result, version))
            self.idle[index] += 1
        return reports

    def _replace(self, index: int) -> None:
        """A fresh worker in place of a dead one; its first run() fetches the current weights."""
        ray.kill(self.actors[index])
        self.actors[index], self.builds[index] = self._spawn(index)
        self.num_restarts += 1
        self.idle[index] = QUEUED_RUNS

    # -- parameter server and replay shards --------------------------------------------------

    def publish(self, weights: np.ndarray) -> None:
        self.weight_version += 1
        self.parameter_server.publish.remote(weights, self.weight_version)

    def next_minibatch(self) -> tuple[int, Batch] | None:
        if not self.prefetched:
            for _ in range(self.config.replay_prefetch):
                for shard in range(len(self.shards)):
                    self._request(shard)
        shard, ref = self.prefetched.popleft()
        batch = ray.get(ref)
        self._request(shard)
        if batch is None:
            return None
        # Ray's arrays are read-only views of its object store; torch wants its own
        return shard, Batch({key: np.array(column) for key, column in batch.items()})

    def _request(self, shard: int) -> None:
        self.prefetched.append((shard, self.shards[shard].sample.remote(self.config.minibatch_size)))

    def update_priorities(self, shard: int, indices: np.ndarray, td_errors: np.ndarray) -> None:
        self.shards[shard].update_priorities.remote(indices, td_errors)

    def replay_size(self) -> int:
        return sum(ray.get([shard.size.remote() for shard in self.shards]))

    def replay_state(self) -> list[dict[str, np.ndarray]]:
        return ray.get([shard.state.remote() for shard in self.shards])

    def load_replay_state(self, shards: list[dict[str, np.ndarray]]) -> None:
        ray.get([self.shards[k % len(self.shards)].load_state.remote(columns)
                 for k, columns in enumerate(shards)])

    def stop(self) -> None:
        for actor in [*getattr(self, "actors", []), *getattr(self, "shards", [])]:
            ray.kill(actor)
        if hasattr(self, "parameter_server"):
            ray.kill(self.parameter_server)
        self.actors, self.shards, self.runs = [], [], {}
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False
