"""Soft Actor-Critic (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications").

SAC maximises reward plus the policy's entropy, ``Σ_t γ^t (r_t + α·H(π(·|s_t)))``, with a
tanh-squashed Gaussian policy ``π``, two Q-networks ``Q_1, Q_2`` and slowly moving copies
``Q̂_1, Q̂_2`` of them. Synchronously, per sampling round:

1. every worker steps its environments ``rollout_fragment_length`` steps with the current
   policy (uniformly at random before learning starts, ``random_warmup``) and returns n-step
   transitions ``(s, a, R, s', γ^m)`` (``postprocess``, the same as DQN's);
2. the learner stores them in its replay buffer;
3. once ``learning_starts`` steps were sampled, it takes ``updates_per_step`` gradient steps per
   sampled step, each on a minibatch of ``train_batch_size`` transitions (:func:`sac_losses`):

   - critics: ``y = R + γ^m·(min_i Q̂_i(s', a') − α·log π(a'|s'))``, ``a' ~ π(·|s')``, and
     ``L_Q = ½ Σ_i mean (Q_i(s, a) − y)²``;
   - actor: ``L_π = mean(α·log π(ã|s) − min_i Q_i(s, ã))``, ``ã ~ π(·|s)`` reparameterised;
   - temperature: ``L_α = −mean(log α · (log π(ã|s) + H̄))``, which raises α while the policy's
     entropy is below the target ``H̄`` and lowers it above;

   all three losses come from one forward and one backward pass over the same minibatch (as
   in the authors' softlearning and in RLlib), then each network takes its Adam step;
4. after every gradient step (or every ``target_network_update_freq`` environment steps) the
   targets move a fraction ``tau`` towards the critics (Polyak averaging).

The asynchronous mode (:class:`ApexSAC`, ``SACConfig().async_mode()``) runs steps 1 and 2 in
Ape-X's acting workers and replay shards on Ray, and its learner never waits for them; the
learner's loop is Ape-X's (:class:`~volley.algorithms.apex.ApexLearner`), with this file's
update and targets.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch

from volley.algorithm import Algorithm
from volley.algorithms.apex import ApexLearner
from volley.algorithms.sac.config import ApexSACConfig, SACConfig
from volley.algorithms.sac.loss import sac_losses
from volley.checkpoint import replay_shards, replay_tensors
from volley.optim import Adam, Optimizer
from volley.replay import PrioritizedReplayBuffer, make_replay_buffer, n_step_columns
from volley.rollout.batch import Batch
from volley.torch_networks.squashed_gaussian import SquashedGaussianActor, StackedQ

STATS = ("critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean")


NOISE_STREAM = 2  # the learner's generator is seeded from (seed, NOISE_STREAM)


class SAC(Algorithm):
    """Synchronous SAC: workers fill the learner's replay buffer; the learner trains on it."""

    config_class = SACConfig
    config: SACConfig
    policy: SquashedGaussianActor

    # worker-side: n-step transitions (torch-free, so a worker that acts in numpy never imports torch)
    postprocess = staticmethod(n_step_columns)

    def setup(self) -> None:
        self.setup_learner()
        self.replay = make_replay_buffer(self.config.replay_buffer_capacity, self.rng, self.config.prioritization)
        self.updates_owed = 0.0  # updates_per_step x steps sampled, less the updates taken
        self.learner_updates = 0

    def setup_learner(self) -> None:
        """The critics, their targets, the temperature and the three optimizers (wherever the
        replay buffer lives)."""
        cfg = self.config
        obs_size, action_dim = self.preprocess.shape[0], self.action_space.shape[0]
        q_model = cfg.q_model_config
        self.critics = StackedQ(obs_size + action_dim, q_model.fcnet_hiddens, q_model.fcnet_activation,
                                2 if cfg.twin_q else 1).to(self.device)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.critic_parameters: list[torch.Tensor] = list(self.critics.parameters())
        self.target_parameters: list[torch.Tensor] = list(self.target_critics.parameters())
        self.log_alpha = torch.tensor(math.log(cfg.initial_alpha), device=self.device, requires_grad=True)
        self.target_entropy = -float(action_dim) if cfg.target_entropy == "auto" else float(cfg.target_entropy)
        actor_lr, critic_lr, alpha_lr = cfg.learning_rates(self.scheduled("lr"))
        self.actor_optimizer = Adam(self.policy.actor_parameters(), lr=actor_lr)
        self.critic_optimizer = Adam(self.critics.parameters(), lr=critic_lr)
        self.alpha_optimizer = Adam([self.log_alpha], lr=alpha_lr)
        # the losses' draws come from the learner's own generator, seeded apart from the one that
        # initialised the networks: a run stays a function of its seed whatever else in the process
        # draws from torch's global generator (another run, a callback)
        self.noise = torch.Generator(self.device).manual_seed(
            int(np.random.SeedSequence([cfg.seed, NOISE_STREAM]).generate_state(1)[0]))
        self.lr_scheduled = isinstance(cfg.lr, list) or cfg.lr_schedule is not None
        self.updates_per_step = cfg.updates_per_step(self.workers.plan)
        self.last_target_update = 0  # environment steps sampled at the last one (target_network_update_freq)
        self._stat_sums = torch.zeros(len(STATS) + 1)  # this iteration's sums, and its update count
        self.warming_up = False
        self.follow_warmup()

    def optimizers(self) -> dict[str, Optimizer]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer, "alpha": self.alpha_optimizer}

    def training_step(self) -> dict[str, float]:
        cfg = self.config
        if self._steps_this_iter == 0:  # a new iteration: its statistics start afresh
            self.begin_updates()
        batch = self.sample()
        self.replay.add(batch)
        if self.steps_sampled >= cfg.learning_starts:
            self.updates_owed += self.updates_per_step * len(batch)
            for _ in range(int(self.updates_owed)):
                minibatch = self.replay.sample(cfg.train_batch_size)
                td_errors = self.update(minibatch)
                if td_errors is not None and isinstance(self.replay, PrioritizedReplayBuffer):
                    self.replay.update_priorities(minibatch["indices"], td_errors)
                self.learner_updates += 1
                self.updates_owed -= 1
                self.after_update()
        self.follow_warmup()
        return {**self.learner_statistics(), "replay_size": len(self.replay)}

    def begin_updates(self) -> None:
        """An iteration's statistics start afresh."""
        self._stat_sums.zero_()

    def follow_lr_schedule(self) -> None:
        """After an update, as RLlib's learners: each network whose own rate is unset takes ``lr``'s
        schedule at the steps sampled so far (nothing to do when ``lr`` is a number)."""
        if self.lr_scheduled:
            own = (self.config.actor_lr, self.config.critic_lr, self.config.alpha_lr)
            for optimizer, rate in zip(self.optimizers().values(), own, strict=True):
                if rate is None:
                    self.schedule_lr(optimizer)

    def follow_warmup(self) -> None:
        """Workers act uniformly at random until learning starts (``random_warmup``): the flag rides
        in the policy's weights, so it reaches them with the next weights they get."""
        warming_up = self.config.random_warmup and self.steps_sampled < self.config.learning_starts
        if warming_up != self.warming_up:
            self.policy.set_random_actions(warming_up)
            self.warming_up = warming_up

    def update(self, batch: Batch) -> np.ndarray | None:
        """One gradient step of the actor, the critics and the temperature on a replayed minibatch;
        returns the TD errors ``[B]`` (new priorities), None when a step was skipped for a
        non-finite loss or gradient."""
        cfg = self.config
        losses = sac_losses(self.policy, self.critics, self.target_critics, self.log_alpha, self.target_entropy,
                            {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}, self.noise)
        for optimizer in self.optimizers().values():
            optimizer.zero_grad()
        (losses.critic + losses.actor + losses.alpha).backward()
        # a skipped step (a non-finite loss or gradient) skips the ones after it: they read the same
        # minibatch, and a network stepping on would reset the count of skips in a row
        stepped = (self.optimizer_step(self.critic_optimizer, losses.critic, cfg.grad_clip)
                   and self.optimizer_step(self.actor_optimizer, losses.actor, cfg.grad_clip)
                   and (self.alpha_optimizer.param_groups[0]["lr"] == 0  # alpha_lr=0: α stays where it started
                        or self.optimizer_step(self.alpha_optimizer, losses.alpha, None)))
        self._stat_sums += torch.stack([losses.critic.detach(), losses.actor.detach(), losses.alpha.detach(),
                                        self.log_alpha.detach().exp(), -losses.log_prob.mean(),
                                        losses.q.mean(), torch.ones(())])
        return losses.td_errors.cpu().numpy() if stepped else None  # never a NaN priority

    def after_update(self) -> None:
        """Polyak-average the targets after every gradient step, or every
        ``target_network_update_freq`` environment steps sampled; follow ``lr``'s schedule."""
        freq = self.config.target_network_update_freq
        if freq == 0 or self.steps_sampled // freq > self.last_target_update // freq:
            self.update_target()
            self.last_target_update = self.steps_sampled
        self.follow_lr_schedule()

    @torch.no_grad()
    def update_target(self) -> None:
        """Move each target critic a fraction ``tau`` towards its critic (one fused call for all)."""
        torch._foreach_lerp_(self.target_parameters, self.critic_parameters, self.config.tau)

    def learner_statistics(self) -> dict[str, float]:
        """This iteration's means of the update statistics (NaN before learning starts)."""
        *sums, count = self._stat_sums.tolist()
        return {**{key: value / count if count else math.nan for key, value in zip(STATS, sums, strict=True)},
                "num_updates": int(count), "learner_updates": self.learner_updates}

    # -- checkpoints: critics, targets, temperature, counters and (optionally) the replay buffer ----

    def learner_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The critics, their targets, the temperature and the losses' generator (the policy and the
        optimizers are saved by every algorithm)."""
        tensors = {**{f"critics.{k}": v for k, v in self.critics.state_dict().items()},
                   **{f"target_critics.{k}": v for k, v in self.target_critics.state_dict().items()},
                   "log_alpha": self.log_alpha.detach(), "rng.noise": self.noise.get_state()}
        return tensors, {"last_target_update": self.last_target_update}

    def load_learner_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        for prefix, module in (("critics.", self.critics), ("target_critics.", self.target_critics)):
            module.load_state_dict({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})
        with torch.no_grad():
            self.log_alpha.copy_(tensors["log_alpha"])
        if "rng.noise" in tensors:  # older checkpoints have none: the generator goes on from its seed
            self.noise.set_state(tensors["rng.noise"])
        self.last_target_update = state["last_target_update"]
        self.follow_warmup()

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors, state = self.learner_state()
        shards = [self.replay.state()] if self.config.checkpoint_replay else []
        return {**tensors, **replay_tensors(shards)}, {**state, "learner_updates": self.learner_updates,
                                                       "updates_owed": self.updates_owed, "replay_shards": len(shards)}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.load_learner_state(tensors, state)
        self.learner_updates, self.updates_owed = state["learner_updates"], state["updates_owed"]
        for shard in replay_shards(tensors, state["replay_shards"]):
            self.replay.load_state(shard)


class ApexSAC(ApexLearner, SAC):
    """Asynchronous SAC on Ray: Ape-X's acting workers and replay shards, SAC's learner.

    The workers act in numpy with the weights they last fetched (uniformly at random while the
    published weights say so, before learning starts) and give fresh rows the shard's largest
    priority; the learner's loop is Ape-X's, its update and targets SAC's."""

    config_class = ApexSACConfig
    config: ApexSACConfig

    def worker_exploration(self, worker_index: int) -> float:
        return 0.0  # every worker acts with the policy's own noise

    def learn(self, batch: Batch) -> np.ndarray | None:
        return self.update(batch)

    def after_update(self) -> None:
        SAC.after_update(self)
        if self.warming_up:
            self.follow_warmup()
