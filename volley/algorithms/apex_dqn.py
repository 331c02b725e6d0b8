"""Ape-X DQN (Horgan et al., 2018): acting workers, replay shards and a learner, asynchronously.

The layout (design: the third way of sharing work), hosted by the engine's asynchronous
actors (``volley/engines/async_actors.py``; this file never talks to Ray itself, it
hands the engine an :class:`~volley.engines.AsyncSpec` of numbers and callables):

1. a **parameter server** holds the learner's latest weights and their version;
2. ``num_workers`` **acting workers** step their environments continuously, each with
   its own ε (worker ``i`` of ``N``: ``ε_i = ε^(1 + α·i/(N−1))``, where ``ε`` follows the
   ``epsilon_*`` schedule and ``α`` is ``worker_epsilon_alpha``), turn every fragment into
   n-step transitions (:meth:`DQN.postprocess`), give them initial priorities ``|δ|`` from
   their own copy of the network, and push them as one chunk to a replay shard; every
   ``weight_sync_interval`` steps they report episode statistics and fetch new weights;
3. ``num_replay_shards`` **replay shards** host the replay buffers of :mod:`volley.replay`;
4. the **learner** (this class, in the driver process) trains on minibatches the shards
   prepared ahead of time, sends the new priorities back, publishes its weights every
   ``weight_publish_interval`` updates and copies them into the target network every
   ``target_update_freq`` updates. It never takes more than ``train_intensity`` updates
   per sampled environment step; the workers wait for it only with ``max_sample_lead``.

``train()`` returns after ``min_time_s_per_iteration`` seconds with DQN's statistics and
``learner_updates``, ``replay_size``, ``weight_version_lag``, ``sample_throughput``,
``train_throughput``, ``num_worker_restarts`` (acting workers that died and were
replaced) and ``num_shard_restarts`` (replay shards replaced, empty). The update and
target math is DQN's, inherited.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from volley.algorithm_configs import ApexDQNConfig, DQNConfig
from volley.algorithms.dqn import DQN, exploration_epsilon, q_and_targets
from volley.config import AlgorithmConfig
from volley.engines import AsyncSpec, WorkerGroup, make_async_worker_group
from volley.engines.base import ActorReport, AsyncWorkerGroup
from volley.envs import EnvCreator
from volley.models import Policy, QNetwork
from volley.rollout.batch import Batch

REPLAY_PREFIX = "replay."  # checkpoint tensors "replay.{shard}.{column}"


# Settings with which two acting workers and one shard reach 475 on CartPole-v1 (the learning
# test, the example and the benchmark use them): ``ApexDQNConfig().training(**CARTPOLE)``.
# Without the decaying lr, runs that had reached ~400 fell back (1 of 5, then seed 0 of the
# learning test); with it seeds 0, 1 and 2 reached 475 in 43.4k-43.9k learner updates.
CARTPOLE = {"epsilon_start": 1.0, "epsilon_end": 0.0, "prioritized_replay": False, "max_sample_lead": 1000,
            "lr_schedule": [[0, 1e-3], [60_000, 3e-4], [200_000, 1e-4]]}


def per_worker_epsilon(config: ApexDQNConfig, worker_index: int, num_workers: int, timestep: int) -> float:
    """Worker ``i`` of ``N`` explores with ``ε^(1 + α·i/(N−1))`` (Ape-X), ``ε`` the scheduled base."""
    base = exploration_epsilon(config, timestep)
    if num_workers == 1:
        return base
    return base ** (1 + config.worker_epsilon_alpha * worker_index / (num_workers - 1))


def set_epsilon(policy: Policy, epsilon: float) -> None:
    """Worker-side: an acting worker's ε for its next run rides in its Q-network."""
    assert isinstance(policy, QNetwork)
    policy.set_epsilon(epsilon)


@torch.inference_mode()
def initial_td_errors(policy: Policy, batch: Batch, config: AlgorithmConfig) -> np.ndarray:
    """Worker-side: TD errors ``[B]`` of fresh transitions by the worker's own network (its own
    target too: workers hold no target network), their first priorities as in Ape-X."""
    assert isinstance(policy, QNetwork) and isinstance(config, DQNConfig)
    columns = {key: torch.as_tensor(batch[key]) for key in ("obs", "actions", "returns", "next_obs",
                                                            "discounts")}
    q, targets = q_and_targets(policy, policy, columns, config.double_q)
    return (q - targets).numpy()


class ApexDQN(DQN):
    """Asynchronous DQN on Ray: the learner here, everything else in actors."""

    config_class = ApexDQNConfig
    config: ApexDQNConfig
    workers: AsyncWorkerGroup

    def make_workers(self, env_creator: EnvCreator | None) -> WorkerGroup:
        cfg = self.config
        spec = AsyncSpec(num_replay_shards=cfg.num_replay_shards, replay_capacity=cfg.replay_buffer_capacity,
                         prioritization=cfg.prioritization, steps_per_run=cfg.weight_sync_interval,
                         minibatch_size=cfg.minibatch_size, prefetch=cfg.replay_prefetch,
                         explore=set_epsilon,
                         priorities=initial_td_errors if cfg.prioritized_replay else None)
        return make_async_worker_group(cfg, type(self).postprocess, env_creator, spec)

    def concurrent_workers(self) -> int:
        return self.workers.num_workers  # acting workers never wait for the learner

    def setup(self) -> None:
        self.setup_learner()
        self.learner_updates = 0
        self.started = False  # the workers start on the first train(), after any restore

    @property
    def steps_sampled(self) -> int:
        """Environment steps the workers reported so far (this iteration's included)."""
        return self.timesteps_total + self._steps_this_iter

    def worker_epsilon(self, worker_index: int) -> float:
        return per_worker_epsilon(self.config, worker_index, self.workers.num_workers, self.steps_sampled)

    def may_update(self) -> bool:
        """Learning has started and the learner is not ahead of ``train_intensity``."""
        cfg = self.config
        return self.learner_updates < cfg.train_intensity * (self.steps_sampled - cfg.learning_starts)

    def may_sample(self) -> bool:
        """The workers are less than ``max_sample_lead`` steps ahead of ``train_intensity``."""
        lead = self.config.max_sample_lead
        return lead is None or self.steps_sampled * self.config.train_intensity <= (
            self.learner_updates + self.config.train_intensity * (self.config.learning_starts + lead))

    def training_step(self) -> dict[str, float]:
        cfg = self.config
        if not self.started:
            self.workers.start(self.policy.get_flat_weights(), self.worker_epsilon, self.may_sample)
            self.started = True
        start = time.perf_counter()
        updates_before, losses, q_means = self.learner_updates, [], []
        lags: list[int] = []
        while time.perf_counter() < start + cfg.min_time_s_per_iteration:
            drawn = self.workers.next_minibatch() if self.may_update() else None
            # waits only when there is nothing to learn from yet
            self.take_reports(self.workers.poll(timeout=0.0 if drawn else 0.01), lags)
            if drawn is None:
                continue
            shard, batch = drawn
            loss, q_mean, td_errors = self.update(batch)
            if td_errors is not None and cfg.prioritized_replay:
                self.workers.update_priorities(shard, batch["indices"], td_errors)
            losses.append(loss)
            q_means.append(q_mean)
            self.learner_updates += 1
            if self.learner_updates % cfg.weight_publish_interval == 0:
                self.workers.publish(self.policy.get_flat_weights())
            if self.learner_updates % cfg.target_update_freq == 0:
                self.update_target()
        took = time.perf_counter() - start
        updates = self.learner_updates - updates_before
        return {"loss": float(torch.stack(losses).mean()) if losses else math.nan,
                "q_mean": float(torch.stack(q_means).mean()) if q_means else math.nan,
                "epsilon": self.worker_epsilon(0), "num_updates": updates,
                "learner_updates": self.learner_updates, "replay_size": self.workers.replay_size(),
                "weight_version_lag": float(np.mean(lags)) if lags else math.nan,
                "sample_throughput": self._steps_this_iter / took,
                "train_throughput": updates * cfg.minibatch_size / took,
                "num_shard_restarts": self.workers.num_shard_restarts,
                "lr": self.schedule_lr(self.optimizer)}  # as RLlib's learner after its updates

    def take_reports(self, reports: list[ActorReport], lags: list[int]) -> None:
        """Fold the workers' episodes and steps into the counters; note how stale their weights were."""
        self._merge([report.result for report in reports])
        lags.extend(self.workers.weight_version - report.weight_version for report in reports)

    # -- checkpoints: the target network, counters and (optionally) the replay shards -----------

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors = {f"target.{k}": v for k, v in self.target.state_dict().items()}
        shards = self.workers.replay_state() if self.config.checkpoint_replay else []
        for index, columns in enumerate(shards):
            tensors.update({f"{REPLAY_PREFIX}{index}.{name}": torch.tensor(column)
                            for name, column in columns.items()})
        return tensors, {"learner_updates": self.learner_updates, "weight_version": self.workers.weight_version,
                         "replay_shards": len(shards), "num_shard_restarts": self.workers.num_shard_restarts}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.target.load_state_dict({k[len("target."):]: v for k, v in tensors.items()
                                     if k.startswith("target.")})
        self.learner_updates = state["learner_updates"]
        self.workers.num_shard_restarts = state.get("num_shard_restarts", 0)  # older checkpoints: none
        shards: list[dict[str, np.ndarray]] = [{} for _ in range(state["replay_shards"])]
        for name, tensor in tensors.items():
            if name.startswith(REPLAY_PREFIX):
                index, column = name[len(REPLAY_PREFIX):].split(".", 1)
                shards[int(index)][column] = tensor.numpy()
        if shards:
            self.workers.load_replay_state(shards)
        self.workers.weight_version = state["weight_version"]  # versions go on from the saved one
        if self.started:
            self.workers.publish(self.policy.get_flat_weights())
