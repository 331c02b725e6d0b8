"""Ape-X's learner (Horgan et al., 2018): acting workers, replay shards and a learner, asynchronously,
for an algorithm that learns from replay (Ape-X DQN, asynchronous SAC).

The layout (design: the third way of sharing work), hosted by the engine's asynchronous
actors (``volley/engines/async_actors.py``; this file never talks to Ray itself, it hands
the engine an :class:`~volley.engines.AsyncSpec` of numbers and callables):

1. a **parameter server** holds the learner's latest weights and their version;
2. ``num_workers`` **acting workers** step their environments continuously with the weights
   they last fetched (and the exploration the algorithm gives each run), turn every fragment
   into n-step transitions (the algorithm's ``postprocess``) and push them as one chunk to a
   replay shard; every ``weight_sync_interval`` steps they report episode statistics and
   fetch new weights;
3. ``num_replay_shards`` **replay shards** host the replay buffers of :mod:`volley.replay`;
4. the **learner** (:class:`ApexLearner`, in the driver process) takes the algorithm's
   gradient steps on minibatches the shards prepared ahead of time, sends the new
   priorities back and publishes its weights every ``weight_publish_interval`` updates. It
   never takes more than ``updates_per_step`` updates per sampled environment step (after
   ``learning_starts``); the workers wait for it only with ``max_sample_lead``.

``train()`` returns after ``min_time_s_per_iteration`` seconds (the first one after the workers
start, also not before a worker has reported, for up to ``FIRST_REPORT_WAIT_S``: their start-up
can outlast the iteration's time, which would report no steps) with the algorithm's statistics
and ``learner_updates``, ``replay_size``, ``weight_version_lag``, ``sample_throughput``,
``train_throughput``, ``num_worker_restarts`` (acting workers that died and were replaced)
and ``num_shard_restarts`` (replay shards replaced, empty).
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from volley.algorithm import Algorithm
from volley.checkpoint import replay_shards, replay_tensors
from volley.engines import AsyncSpec, WorkerGroup, make_async_worker_group
from volley.engines.base import ActorReport, AsyncWorkerGroup, Explore, Priorities
from volley.envs import EnvCreator
from volley.policies import PolicySetup
from volley.rollout.batch import Batch

# the longest the first iteration after the workers start waits for a first report (a worker
# starts in 1-3 s here; ten times that on a loaded machine)
FIRST_REPORT_WAIT_S = 60.0


class ApexLearner(Algorithm):
    """The learner's loop of Ape-X's layout. An algorithm mixes it in before its synchronous
    class (``class ApexSAC(ApexLearner, SAC)``) and gives what is its own: the engine's
    :meth:`worker_explore` and :meth:`worker_priorities`, each worker's :meth:`worker_exploration` and one gradient step
    (:meth:`learn`); and, from its synchronous class or its own, the hooks declared below
    (what follows each update, statistics, the learner's checkpoint state)."""

    config: Any  # the algorithm's config with ApexKeys and ReplayKeys
    workers: AsyncWorkerGroup
    updates_per_step: float  # the most gradient steps per sampled environment step
    multi_agent_feed = None  # its acting workers push into replay shards: no run's sample to split by policy

    def worker_explore(self) -> Explore | None:
        """Worker-side: what a run's exploration does to the worker's network (a function of a
        module: it travels to the workers); None: workers act with the published weights as they are."""
        return None

    def worker_priorities(self) -> Priorities | None:
        """Worker-side: the first priorities of fresh rows; None: the shard's largest."""
        return None

    @abstractmethod
    def worker_exploration(self, worker_index: int) -> float:
        """The exploration worker ``worker_index``'s next run gets (handed to ``AsyncSpec.explore``)."""

    @abstractmethod
    def learn(self, batch: Batch) -> np.ndarray | None:
        """One gradient step on a replayed minibatch; its TD errors (new priorities), None if skipped."""

    if TYPE_CHECKING:  # what the algorithm's synchronous class (or its Ape-X class) defines
        def setup_learner(self) -> None:
            """The learner's networks and optimizers, wherever its replay buffer lives."""

        def begin_updates(self) -> None:
            """Before an iteration's updates: learning rates, statistics afresh."""

        def after_update(self) -> None:
            """After each update (``learner_updates`` counts it already): target networks."""

        def learner_statistics(self) -> dict[str, float]:
            """The algorithm's statistics of this iteration's updates."""

        def learner_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
            """The learner's checkpoint tensors and JSON state beside the policy and its optimizers."""

        def load_learner_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
            """Restore what :meth:`learner_state` saved."""

    def make_workers(self, env_creator: EnvCreator | None, setup: PolicySetup | None = None) -> WorkerGroup:
        cfg = self.config
        self.spec = AsyncSpec(num_replay_shards=cfg.num_replay_shards, replay_capacity=cfg.replay_buffer_capacity,
                              prioritization=cfg.prioritization, steps_per_run=cfg.weight_sync_interval,
                              minibatch_size=cfg.replay_batch_size, prefetch=cfg.replay_prefetch,
                              explore=self.worker_explore(),
                              priorities=self.worker_priorities() if cfg.prioritized_replay else None)
        return make_async_worker_group(cfg, type(self).postprocess, env_creator, self.spec)

    def concurrent_workers(self) -> int:
        return self.workers.num_workers  # acting workers never wait for the learner

    def setup(self) -> None:
        self.setup_learner()
        self.learner_updates = 0
        self.started = False  # the workers start on the first train(), after any restore
        self.reported = False  # a worker has reported since they started

    def may_update(self) -> bool:
        """Learning has started and the learner is not ahead of ``updates_per_step``."""
        return self.learner_updates < self.updates_per_step * (self.steps_sampled - self.config.learning_starts)

    def may_sample(self) -> bool:
        """The workers are less than ``max_sample_lead`` steps ahead of ``updates_per_step``."""
        lead, rate = self.config.max_sample_lead, self.updates_per_step
        return lead is None or self.steps_sampled * rate <= self.learner_updates + rate * (
            self.config.learning_starts + lead)

    def training_step(self) -> dict[str, float]:
        cfg = self.config
        if not self.started:
            self.workers.start(self.policy.get_flat_weights(), self.worker_exploration, self.may_sample)
            self.started = True
        start = time.perf_counter()
        updates_before, lags = self.learner_updates, list[int]()
        self.begin_updates()
        while (time.perf_counter() < start + cfg.min_time_s_per_iteration
               or not self.reported and time.perf_counter() < start + FIRST_REPORT_WAIT_S):
            drawn = self.workers.next_minibatch() if self.may_update() else None
            # waits only when there is nothing to learn from yet
            self.take_reports(self.workers.poll(timeout=0.0 if drawn else 0.01), lags)
            if drawn is None:
                continue
            shard, batch = drawn
            td_errors = self.learn(batch)
            if td_errors is not None and cfg.prioritized_replay:
                self.workers.update_priorities(shard, batch["indices"], td_errors)
            self.learner_updates += 1
            if self.learner_updates % cfg.weight_publish_interval == 0:
                self.workers.publish(self.policy.get_flat_weights())
            self.after_update()
        took = time.perf_counter() - start
        updates = self.learner_updates - updates_before
        return {**self.learner_statistics(), "num_updates": updates, "learner_updates": self.learner_updates,
                "replay_size": self.workers.replay_size(),
                "weight_version_lag": float(np.mean(lags)) if lags else math.nan,
                "sample_throughput": self._steps_this_iter / took,
                "train_throughput": updates * self.spec.minibatch_size / took,
                "num_shard_restarts": self.workers.num_shard_restarts}

    def take_reports(self, reports: list[ActorReport], lags: list[int]) -> None:
        """Fold the workers' episodes and steps into the counters; note how stale their weights were."""
        self._merge([report.result for report in reports])
        self.reported = self.reported or bool(reports)
        lags.extend(self.workers.weight_version - report.weight_version for report in reports)

    # -- checkpoints: the learner's state, counters and (optionally) the replay shards ----------

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors, state = self.learner_state()
        shards = self.workers.replay_state() if self.config.checkpoint_replay else []
        tensors.update(replay_tensors(shards))
        return tensors, {**state, "learner_updates": self.learner_updates, "weight_version": self.workers.weight_version,
                         "replay_shards": len(shards), "num_shard_restarts": self.workers.num_shard_restarts}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.load_learner_state(tensors, state)
        self.learner_updates = state["learner_updates"]
        self.workers.num_shard_restarts = state.get("num_shard_restarts", 0)  # older checkpoints: none
        shards = replay_shards(tensors, state["replay_shards"])
        if shards:
            self.workers.load_replay_state(shards)
        self.workers.weight_version = state["weight_version"]  # versions go on from the saved one
        if self.started:
            self.workers.publish(self.policy.get_flat_weights())
