"""IMPALA (Espeholt et al., 2018): actors that never wait for the learner, and V-trace to correct
for the lag of the policy they acted with.

The layout (design: the fourth way of sharing work), hosted by the engine's stream of fragments
(``volley/engines/streaming.py`` on Ray, ``volley/engines/local.py`` serially; this file never
talks to Ray, it hands the engine a :class:`~volley.engines.StreamSpec` of numbers):

1. every **actor** (rollout worker) samples fragments of ``rollout_fragment_length`` steps of its
   environments with the weights it was sent last, one per request, with
   ``max_requests_in_flight_per_sampler_worker`` requests queued so it never idles. It keeps the
   behaviour policy's ``log μ(a|x)`` of every step and the observations the learner needs to
   bootstrap from (:func:`~volley.rollout.advantages.vtrace_columns`);
2. the **learner** (this class, in the driver process) takes train batches of whatever fragments
   arrived, and per update (section 4 of the paper):

   - runs its network over the batch: ``log π(a|x)`` and ``V(x)``;
   - computes V-trace targets ``v_s`` and advantages with ``ρ_t = min(ρ̄, π/μ)`` and
     ``c_t = min(1, π/μ)`` (equations 1 and 2; :func:`~volley.rollout.advantages.vtrace`);
   - takes one optimizer step on
     ``−mean(ρ_s (r_s + γ v_{s+1} − V(x_s)) log π(a_s|x_s)) + vf_loss_coeff · ½ mean((v_s − V(x_s))²)
     − entropy_coeff · mean(H[π(·|x_s)])``;
   - every ``broadcast_interval`` updates, publishes its weights: each actor gets them with its
     next request.

Each train batch is trained on ``num_epochs`` times, in turn with the other
``minibatch_buffer_size − 1`` batches of RLlib's minibatch buffer. ``train()`` learns for
``min_time_s_per_iteration`` seconds and reports, beside the losses, how stale the data was:
``policy_lag_mean`` / ``policy_lag_max`` (learner updates between the weights a fragment was
sampled with and its first update), ``learner_idle_fraction`` (the time it waited for a batch)
and ``worker_idle_fraction`` (the time workers had no request to work on).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from volley.action_dists import Distribution
from volley.algorithm import Algorithm
from volley.algorithms.impala.config import IMPALAConfig
from volley.algorithms.impala.loss import vtrace_policy_loss, vtrace_value_loss
from volley.engines import StreamingWorkerGroup, StreamSpec, WorkerGroup, make_streaming_group
from volley.envs import EnvCreator
from volley.errors import ConfigError
from volley.optim import Adam, Optimizer, RMSprop
from volley.policies import PolicySetup
from volley.rollout.advantages import explained_variance, vtrace_columns, vtrace_targets
from volley.rollout.batch import Batch
from volley.rollout.fragments import TrainBatch
from volley.torch_networks.actor_critic import ActorCritic

# Settings with which two Ray workers of 8 environments reach 475 on CartPole-v1 (the learning test,
# the benchmark and docs use them): ``IMPALAConfig().update(**CARTPOLE)``; APPO's are in appo.py.
# Small fragments and batches give the learner many small steps (PPO takes 40 a 2048-step batch),
# and one request in flight and one batch queued keep the policy lag near 2 updates. Without
# PPO's clip IMPALA's policy can collapse onto one action (lr 2e-3: 2 of 4 seeds; lr 1e-3 with
# RLlib's entropy 0.01: 1 of 12 runs), which an entropy bonus of 0.03 prevented: on a machine
# loaded 20-30 times over its 2 cores, 9 of 9 runs reached 475 in 77k-293k steps (median 124k).
# With the value loss at 0.05 a run could still climb to ~250 and fall back for good (1 of 16 runs
# of seed 0 two at a time, and one CI run, at ~130-230 after 600k); RLlib's value weight 0.5 with
# entropy 0.05 reached 475 in 40 of 40 (73k-465k, median 139k).
CARTPOLE = {"rollout_fragment_length": 20, "max_requests_in_flight_per_sampler_worker": 1,
            "learner_queue_size": 1, "train_batch_size": 160, "num_epochs": 2, "lr": 1e-3, "gamma": 0.98,
            "vf_loss_coeff": 0.5, "entropy_coeff": 0.05}


class MinibatchBuffer:
    """RLlib's ring of ``size`` train batches, each trained on ``uses`` times, in turn with the others:
    a slot is refilled from the stream once its batch was used up."""

    def __init__(self, size: int, uses: int) -> None:
        self.slots: list[Batch | None] = [None] * size
        self.used = [0] * size
        self.uses, self.index = uses, 0

    def next(self, fetch: Callable[[], Batch]) -> Batch:
        index = self.index
        batch = self.slots[index]
        if batch is None:
            batch = self.slots[index] = fetch()
        self.used[index] += 1
        if self.used[index] == self.uses:
            self.slots[index], self.used[index] = None, 0
        self.index = (index + 1) % len(self.slots)
        return batch


@dataclass
class StreamMeter:
    """One iteration's updates, and how stale and how busy their stream was."""

    stats: list[torch.Tensor] = field(default_factory=list)  # per update: the STATS
    lags: list[int] = field(default_factory=list)  # per new fragment: updates since its weights
    waited_s: float = 0.0  # the learner, for train batches
    sample_s: float = 0.0  # the workers, sampling the new fragments
    idle_s: float = 0.0  # the workers, with nothing to do before them
    replayed: int = 0  # fragments replayed


@dataclass
class PolicyTerms:
    """What a policy loss reads, on the batch's steps (its bootstrap rows left out) unless said."""

    dist: Distribution  # the learner's, on every row
    target: Distribution | None  # the policy V-trace corrects towards (None: the learner's own), every row
    mask: torch.Tensor  # [B] the steps
    logp: torch.Tensor  # log π(a|x) of the learner
    target_logp: torch.Tensor  # the same of the target policy (no gradient)
    behaviour_logp: torch.Tensor  # log μ(a|x) of the worker that acted
    advantages: torch.Tensor  # V-trace's


class IMPALA(Algorithm):
    """The learner of IMPALA; its actors are the engine's stream of fragments."""

    config_class = IMPALAConfig
    config: IMPALAConfig
    policy: ActorCritic
    workers: StreamingWorkerGroup
    # the statistics update() returns, in order; a subclass adds its own
    STATS: tuple[str, ...] = ("policy_loss", "vf_loss", "entropy", "mean_rho")

    postprocess = staticmethod(vtrace_columns)  # worker-side: steps and bootstrap observations
    multi_agent_feed = "stream"  # a multi-agent run splits each train batch by policy

    def make_workers(self, env_creator: EnvCreator | None, setup: PolicySetup | None = None) -> WorkerGroup:
        cfg = self.config
        spec = StreamSpec(cfg.max_requests_in_flight_per_sampler_worker, cfg.train_batch_size,
                          cfg.learner_queue_size, cfg.replay_proportion, cfg.replay_buffer_num_slots)
        return make_streaming_group(cfg, type(self).postprocess, env_creator, spec, setup)

    def concurrent_workers(self) -> int:
        return 0 if self.config.engine == "local" else self.workers.plan.num_workers

    def setup(self) -> None:
        cfg = self.config
        if self.policy.initial_state():  # as use_lstm (IMPALAConfig.validate): no sequences to replay
            raise ConfigError(f"custom model {cfg.model.custom_model!r} is recurrent (get_initial_state() is not "
                              f"empty): {cfg.algo_name}'s learner trains on fragments step by step, without "
                              "replaying sequences from stored states; recurrent networks train with ppo, pg and trpo")
        lr = self.scheduled("lr")
        self.optimizer: Optimizer = (RMSprop(self.policy.parameters(), lr=lr, alpha=cfg.decay, eps=cfg.epsilon)
                                     if cfg.opt_type == "rmsprop" else Adam(self.policy.parameters(), lr=lr))
        self.learner_updates = 0  # also the version of the current weights
        self.buffer = MinibatchBuffer(cfg.minibatch_buffer_size, cfg.num_epochs)
        self.started = False  # the workers start on the first train(), after any restore
        self.last_explained_variance = math.nan
        self.meter = StreamMeter()
        self.entropy_coeff = self.scheduled("entropy_coeff")

    def training_step(self) -> dict[str, Any]:
        """Updates for ``min_time_s_per_iteration`` seconds (and ``min_sample_timesteps_per_iteration``
        steps), one at a time, as a multi-agent run interleaves its policies' (:meth:`begin_updates`,
        :meth:`update_once`, :meth:`updates_statistics`)."""
        cfg = self.config
        start = time.perf_counter()
        self.begin_updates()
        while (not self.meter.stats or time.perf_counter() - start < cfg.min_time_s_per_iteration
               or self._steps_this_iter < cfg.min_sample_timesteps_per_iteration):
            self.update_once()
        return self.updates_statistics(time.perf_counter() - start)

    def begin_updates(self) -> None:
        """An iteration's updates begin: the workers start (on the first), the learning rate and the
        entropy bonus take their scheduled values (at the steps sampled so far, as RLlib's learner), and
        the meter starts afresh."""
        if not self.started:
            self.workers.start(self.policy.get_flat_weights(), self.filter_stats, self.learner_updates)
            self.started = True
        self.schedule_lr(self.optimizer)
        self.entropy_coeff = self.scheduled("entropy_coeff")
        self.meter = StreamMeter()

    def update_once(self) -> None:
        """One update on the minibatch buffer's next train batch; the weights go out every
        ``broadcast_interval`` updates."""
        batch = self.buffer.next(self.take)
        self.meter.stats.append(self.update(batch, self.entropy_coeff))
        self.learner_updates += 1
        if self.learner_updates % self.config.broadcast_interval == 0:
            self.workers.publish(self.policy.get_flat_weights(), self.filter_stats, self.learner_updates)
        self.after_update()

    def updates_statistics(self, took: float) -> dict[str, Any]:
        """The statistics of the updates since :meth:`begin_updates` (``took`` seconds): the losses'
        means, and how stale and how busy the stream was."""
        meter = self.meter
        means = dict(zip(self.STATS, torch.stack(meter.stats).mean(0).tolist(), strict=True))
        busy = meter.sample_s + meter.idle_s
        return {**means, "lr": self.optimizer.param_groups[0]["lr"], "entropy_coeff": self.entropy_coeff,
                "explained_variance": self.last_explained_variance, "num_updates": len(meter.stats),
                "learner_updates": self.learner_updates,
                "policy_lag_mean": float(np.mean(meter.lags)) if meter.lags else math.nan,
                "policy_lag_max": int(max(meter.lags)) if meter.lags else 0,
                "policy_lags_this_iter": meter.lags,
                "learner_idle_fraction": meter.waited_s / took,
                "worker_idle_fraction": meter.idle_s / busy if busy else math.nan,
                "num_replayed_fragments": meter.replayed,
                "num_dropped_fragments": self.workers.num_dropped_fragments}

    def take(self) -> Batch:
        """The next train batch of the stream; its new fragments' episodes and steps are counted, and
        how stale and how busy they were."""
        meter = self.meter
        waiting = time.perf_counter()
        train_batch: TrainBatch = self.workers.next_batch()
        waited = time.perf_counter() - waiting
        meter.waited_s += waited
        self._sample_time += waited
        self._merge(train_batch.results())
        meter.lags.extend(fragment.lag(self.learner_updates) for fragment in train_batch.fragments)
        meter.sample_s += sum(fragment.sample_s for fragment in train_batch.fragments)
        meter.idle_s += sum(fragment.idle_s for fragment in train_batch.fragments)
        meter.replayed += train_batch.num_replayed
        return train_batch.batch

    def update(self, batch: Batch, entropy_coeff: float) -> torch.Tensor:
        """One optimizer step on a train batch; returns the :attr:`STATS` as one tensor."""
        cfg = self.config
        obs = torch.as_tensor(batch["obs"], device=self.device)
        actions = torch.as_tensor(batch["actions"], device=self.device)
        dist, values = self.policy(obs)
        logp = dist.log_prob(actions)
        target = self.target_distribution(obs)  # V-trace's π: None for the learner's own
        target_logp = logp.detach() if target is None else target.log_prob(actions)
        value_estimates = values.detach().cpu().numpy()
        log_rhos = target_logp.cpu().numpy() - batch["logp"]
        vs, advantages = vtrace_targets(log_rhos, batch["rewards"], value_estimates, batch["terminated"],
                                        batch["bootstrap"], cfg)
        steps = ~batch["bootstrap"]
        self.last_explained_variance = explained_variance(value_estimates[steps], vs)
        mask = torch.as_tensor(steps, device=self.device)
        terms = PolicyTerms(dist, target, mask, logp[mask], target_logp[mask],
                            torch.as_tensor(batch["logp"][steps], device=self.device),
                            torch.as_tensor(advantages, device=self.device))
        policy_loss, extra = self.policy_loss(terms)
        vf_loss = vtrace_value_loss(values[mask], torch.as_tensor(vs, device=self.device))
        entropy = dist.entropy()[mask].mean()
        loss = policy_loss + cfg.vf_loss_coeff * vf_loss - entropy_coeff * entropy

        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer_step(self.optimizer, loss, cfg.grad_clip)

        mean_rho = float(np.minimum(cfg.vtrace_clip_rho_threshold, np.exp(log_rhos[steps])).mean())
        return torch.stack([policy_loss.detach(), vf_loss.detach(), entropy.detach(),
                            torch.tensor(mean_rho), *extra])

    def target_distribution(self, obs: torch.Tensor) -> Distribution | None:
        """The policy V-trace corrects towards, if not the learner's own (APPO: its target network)."""
        return None

    def policy_loss(self, terms: PolicyTerms) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:func:`vtrace_policy_loss`, and no statistics of its own."""
        return vtrace_policy_loss(terms.logp, terms.advantages), []

    def after_update(self) -> None:
        """Called after every update (APPO moves its target network here)."""

    # -- checkpoints: the learner's update count, the weights' version ----------------------------

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {}, {"learner_updates": self.learner_updates}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.learner_updates = state["learner_updates"]
        if self.started:  # restored mid-run: the workers act with the restored weights from now on
            self.workers.publish(self.policy.get_flat_weights(), self.filter_stats, self.learner_updates)
