"""The interfaces every engine implements: a group of rollout workers called all at once; the
asynchronous one (acting workers, replay shards, a parameter server) Ray implements; and a stream
of fragments (IMPALA, APPO), which the local and Ray engines implement.

Engines sit below the algorithms and never import one. What they need from an algorithm
comes in as values: the worker-side ``postprocess``, an :class:`AsyncSpec` of numbers and
callables, and, for an MPI replica, an object that satisfies :class:`Replica`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from volley.callbacks import DefaultCallbacks, callbacks_class_of
from volley.config import AlgorithmConfig, RolloutPlan
from volley.envs import EnvCreator, VectorOf
from volley.errors import ConfigError
from volley.network_spec import NetworkSpec
from volley.policies import PolicySetup
from volley.replay import Prioritization
from volley.rollout.batch import Batch
from volley.rollout.fragments import Filters, TrainBatch, Version, Weights
from volley.rollout.multi_agent import MultiAgentRolloutWorker
from volley.rollout.worker import Postprocess, RolloutWorker, SampleResult

if TYPE_CHECKING:  # a Ray worker unpickles this module's recipe: it imports torch only if it uses it
    import torch

    from volley.torch_networks.policy import Policy


class Replica(Protocol):
    """What an MPI rank other than 0 drives in allreduce mode: the whole algorithm, which it
    trains in step with rank 0 (and whose weights rank 0 may ask for)."""

    policy: Policy

    def train(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class WorkerRecipe:
    """How each rollout worker of a group is built, with the sizes the driver resolved.

    The callbacks class travels with it as the environment creator does: the class itself,
    found where the recipe is made (a Ray worker's process has not seen the name registered)."""

    config: AlgorithmConfig
    plan: RolloutPlan
    postprocess: Postprocess
    env_creator: EnvCreator | None
    seed_offset: int = 0  # added to every environment index (evaluation workers have their own)
    callbacks_class: type[DefaultCallbacks] | None = None  # default: the class the config names
    # the policy, resolved where the recipe is made (the driver, every MPI rank): its classes (a
    # custom model, a custom action distribution) travel to Ray workers with the recipe, as the
    # environment creator does. Default: the one the config describes
    network_spec: NetworkSpec | None = None
    # a multi-agent run's policies (None: one policy on single-agent environments)
    setup: PolicySetup | None = None
    # what holds each worker's environments: None, the worker's process; with remote_worker_envs,
    # Ray actors (volley.engines.ray_envs.RemoteVectorEnv)
    env_vector: VectorOf | None = None

    def __post_init__(self) -> None:
        if self.config.remote_worker_envs and self.env_vector is None:
            if self.setup is not None:
                raise ConfigError("remote_worker_envs=True is not supported with a multi-agent environment: "
                                  "its worker steps its environments in its own process")
            from volley.engines.ray_envs import RemoteVectorEnv
            object.__setattr__(self, "env_vector", RemoteVectorEnv)
        if self.callbacks_class is None:
            object.__setattr__(self, "callbacks_class", callbacks_class_of(self.config.callbacks_class))
        if self.network_spec is None:
            object.__setattr__(self, "network_spec", NetworkSpec.of(self.config))

    def build(self, index: int, slot: int | None = None) -> RolloutWorker | MultiAgentRolloutWorker:
        """Worker ``index``; ``slot`` (default ``index``) picks its environments' seeds. A multi-agent
        run's is a :class:`MultiAgentRolloutWorker`, which the groups of synchronous sampling and the
        streams of fragments host."""
        if self.setup is not None:
            return MultiAgentRolloutWorker(self.config, index, self.postprocess, self.env_creator,
                                           seed_offset=self.seed_offset, plan=self.plan, setup=self.setup, slot=slot,
                                           callbacks_class=self.callbacks_class)
        return self.build_rollout_worker(index, slot)

    def build_rollout_worker(self, index: int, slot: int | None = None) -> RolloutWorker:
        """A single-agent worker (asynchronous groups host only these)."""
        return RolloutWorker(self.config, index, self.postprocess, self.env_creator,
                             seed_offset=self.seed_offset, plan=self.plan, slot=slot,
                             network_spec=self.network_spec, callbacks_class=self.callbacks_class,
                             env_vector=self.env_vector)


class WorkerGroup(ABC):
    """A fixed set of :class:`~volley.rollout.worker.RolloutWorker` s, wherever they run.

    Algorithms only ever talk to workers through :meth:`call`, so an algorithm runs
    unchanged on every engine.
    """

    num_workers: int
    plan: RolloutPlan  # the sizes the driver resolved for this group
    num_restarts: int = 0  # dead workers replaced so far (the Ray engine replaces them)
    # False on MPI ranks other than 0: they serve rank 0 (serve_forever) instead of training
    is_driver: bool = True
    # False where the algorithm built around this group never updates (MPI gather mode, ranks
    # other than 0: they only sample for rank 0), so its learner needs no GPU
    learns: bool = True
    # RLlib's local worker (its ``env``, ``get_policy()``): the driver's side of the run, which the
    # algorithm built around this group gives it
    local: Any = None

    def local_worker(self) -> Any:
        """RLlib's ``WorkerSet.local_worker()``, as scripts reach the driver's environment
        (``algo.workers.local_worker().env``)."""
        if self.local is None:
            raise ConfigError(f"{type(self).__name__} has no local worker: build it through an algorithm "
                              "(algo.workers.local_worker())")
        return self.local

    @abstractmethod
    def call(self, method: str, *args: Any) -> list[Any]:
        """Run ``worker.method(*args)`` on every worker at once; results in worker order.

        Array arguments are shipped once per call, not once per worker.
        """

    def foreach_env(self, func: Callable[[Any], Any]) -> list[list[Any]]:
        """RLlib's ``WorkerSet.foreach_env``: ``func(env)`` for each environment of each worker (an
        actor with ``remote_worker_envs``), a list per worker."""
        return self.call("foreach_env", func)

    def foreach_env_with_context(self, func: Callable[[Any, Any], Any]) -> list[list[Any]]:
        """RLlib's ``WorkerSet.foreach_env_with_context``: ``func(env, env_context)`` for each
        environment of each worker, a list per worker."""
        return self.call("foreach_env_with_context", func)

    def call_async(self, method: str, *args: Any) -> Callable[[], list[Any]]:
        """:meth:`call`, started now and left running: the returned function waits for the
        results. Only where workers are processes of their own (the Ray engine)."""
        raise NotImplementedError(f"{type(self).__name__} runs its workers in step with the learner")

    @abstractmethod
    def spaces(self) -> Any:
        """Observation and action space of one environment (asked of one worker only); a multi-agent
        run's workers give each policy's, by policy id."""

    def serve_forever(self, replica: Replica) -> None:  # noqa: B027 (an optional hook)
        """On MPI ranks other than 0: serve rank 0 until it stops. The driver has nothing to serve."""

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


# worker-side: set a run's exploration on the acting worker's policy (Ape-X: ε on the Q-network)
Explore = Callable[["Policy", float], None]
# worker-side: the first priorities [B] of a fragment's rows (Ape-X: |TD error| by its own network)
Priorities = Callable[["Policy", Batch, AlgorithmConfig], np.ndarray]


@dataclass(frozen=True)
class AsyncSpec:
    """What an asynchronous algorithm asks of the engine's acting workers and replay shards.

    The numbers are resolved by the algorithm; what is the algorithm's own comes in as
    callables that the acting workers run on their copy of the policy.
    """

    num_replay_shards: int
    replay_capacity: int  # rows over all shards together
    prioritization: Prioritization | None  # None: uniform replay shards
    steps_per_run: int  # environment steps an acting worker takes between weight fetches and reports
    minibatch_size: int
    prefetch: int  # minibatch requests the learner keeps in flight per shard
    # None: workers act with the published weights as they are (SAC's warm-up rides in them), in
    # numpy where the network can, never building a torch network
    explore: Explore | None = None
    priorities: Priorities | None = None  # None: new rows get the shard's largest priority


@dataclass
class ActorReport:
    """What an acting worker sends the learner after each run of ``steps_per_run`` steps."""

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
    num_shard_restarts: int  # replay shards replaced (empty) after they died
    weight_version: int  # of the weights last published (0: none yet)

    @abstractmethod
    def start(self, weights: np.ndarray, exploration_of: Callable[[int], float],
              may_sample: Callable[[], bool]) -> None:
        """Publish the first weights and set every acting worker going. Each time a worker is
        given more steps to take, ``exploration_of(i)`` is worker ``i``'s exploration (handed
        to :attr:`AsyncSpec.explore`); while ``may_sample()`` is False, finished workers wait."""

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


@dataclass(frozen=True)
class StreamSpec:
    """What a streaming algorithm (IMPALA, APPO) asks of the engine: how many fragments each worker
    is asked for ahead, and how the learner's train batches are made of them."""

    max_requests_in_flight: int  # fragments requested ahead of each worker
    train_batch_size: int  # environment steps of a train batch, at least
    learner_queue_size: int  # train batches ready ahead of the learner
    replay_proportion: float  # replayed fragments per new one
    replay_slots: int  # new fragments kept for replay


class StreamingWorkerGroup(WorkerGroup):
    """Workers that sample fragments without waiting for the learner, and the learner's side of them:
    train batches of whatever fragments arrived (any worker, any order), new weights sent to the
    workers when the learner says so (design: the fourth way of sharing work). A multi-agent run's
    workers are multi-agent ones: its weights, filter statistics and versions are dicts by policy id.

    The local engine runs it serially (the reference); the Ray engine keeps
    ``max_requests_in_flight`` fragments requested from every worker and builds the train batches
    in a thread of its own while the learner updates.
    """

    num_dropped_fragments: int  # fragments lost with workers that died while sampling them

    @abstractmethod
    def start(self, weights: Weights, filters: Filters, version: Version) -> None:
        """Set the workers going with the learner's weights and filter statistics (``version``: its
        updates so far)."""

    @abstractmethod
    def publish(self, weights: Weights, filters: Filters, version: Version) -> None:
        """Each worker acts with these weights and filter statistics from the next fragment it is
        asked for."""

    @abstractmethod
    def next_batch(self) -> TrainBatch:
        """The next train batch, waiting for one only if none is ready."""
