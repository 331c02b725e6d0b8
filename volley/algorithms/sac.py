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
from typing import Any, NamedTuple

import numpy as np
import torch

from volley.algorithm import Algorithm
from volley.algorithm_configs.sac import ApexSACConfig, SACConfig
from volley.algorithms.apex import ApexLearner
from volley.checkpoint import replay_shards, replay_tensors
from volley.models import SquashedGaussianActor, StackedQ
from volley.optim import Adam, Optimizer
from volley.replay import PrioritizedReplayBuffer, make_replay_buffer, n_step_columns
from volley.rollout.batch import Batch

STATS = ("critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean")


@torch.no_grad()
def critic_targets(actor: SquashedGaussianActor, target_critics: StackedQ, alpha: torch.Tensor,
                   returns: torch.Tensor, next_obs: torch.Tensor, discounts: torch.Tensor) -> torch.Tensor:
    """The soft Bellman targets ``y = R + discount·(min_i Q̂_i(s', a') − α·log π(a'|s'))`` ``[B]``,
    ``a'`` drawn from the current policy: the smaller of the twin targets keeps either critic's
    overestimates out (clipped double Q, Fujimoto et al., 2018); ``discount`` is ``γ^m`` after
    ``m`` rewards, 0 where the episode terminated."""
    next_actions, next_logp = actor.distribution(next_obs).rsample()
    return soft_targets(returns, discounts, target_critics(next_obs, next_actions), alpha, next_logp)


def soft_targets(returns: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor, alpha: torch.Tensor,
                 next_logp: torch.Tensor) -> torch.Tensor:
    """``R + discount·(min_i next_q_i − α·log π(a'|s'))`` ``[B]``, ``next_q`` ``[k, B]``."""
    return returns + discounts * (next_q.min(0).values - alpha * next_logp)


def critic_loss(q: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``½ Σ_i mean_b w_b (Q_i(s, a) − y)²`` of the critics' ``q`` ``[k, B]``."""
    return 0.5 * (weights * (q - targets).square()).mean(-1).sum()


def actor_loss(alpha: torch.Tensor, log_prob: torch.Tensor, q_policy: torch.Tensor) -> torch.Tensor:
    """``mean(α·log π(ã|s) − min_i Q_i(s, ã))``, ``ã`` the policy's reparameterised draw, ``q_policy`` ``[k, B]``."""
    return (alpha * log_prob - q_policy.min(0).values).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``−mean(log α · (log π(ã|s) + H̄))``: α grows while the entropy is below the target ``H̄``
    (Haarnoja et al., 2018b, eq. 18, on log α); the log-probability carries no gradient."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


class Losses(NamedTuple):
    critic: torch.Tensor  # ½ Σ_i mean_b w_b (Q_i(s, a) − y)²
    actor: torch.Tensor
    alpha: torch.Tensor
    td_errors: torch.Tensor  # [B] mean over the critics of |Q_i(s, a) − y|: new replay priorities
    log_prob: torch.Tensor  # [B] log π(ã|s)
    q: torch.Tensor  # [k, B] Q_i(s, a)


def sac_losses(actor: SquashedGaussianActor, critics: StackedQ, target_critics: StackedQ,
               log_alpha: torch.Tensor, target_entropy: float, batch: dict[str, torch.Tensor]) -> Losses:
    """SAC's three losses on one minibatch (``obs``, ``actions``, ``returns``, ``next_obs``,
    ``discounts``, importance ``weights``), each with gradients for its own parameters only:
    the critics' loss reads detached targets, the actor's reads the critics through detached
    weights (the gradient reaches the actions, never the critics), the temperature's reads a
    detached log-probability. So one ``backward()`` of their sum gives every network its own
    gradient."""
    alpha = log_alpha.detach().exp()
    targets = critic_targets(actor, target_critics, alpha, batch["returns"], batch["next_obs"], batch["discounts"])
    q = critics(batch["obs"], batch["actions"])  # [k, B], every critic in one pass
    actions, log_prob = actor.distribution(batch["obs"]).rsample()
    return Losses(critic_loss(q, targets, batch["weights"]),
                  actor_loss(alpha, log_prob, critics(batch["obs"], actions, frozen=True)),
                  temperature_loss(log_alpha, log_prob, target_entropy),
                  (q.detach() - targets).abs().mean(0), log_prob.detach(), q.detach())


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
        obs_size, action_dim = self.preprocess.shape[0], self.action_space.shape[0]  # type: ignore[index]
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
                            {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()})
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
        """The critics, their targets and the temperature (the policy and the optimizers are saved
        by every algorithm)."""
        return {**{f"critics.{k}": v for k, v in self.critics.state_dict().items()},
                **{f"target_critics.{k}": v for k, v in self.target_critics.state_dict().items()},
                "log_alpha": self.log_alpha.detach()}, {"last_target_update": self.last_target_update}

    def load_learner_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        for prefix, module in (("critics.", self.critics), ("target_critics.", self.target_critics)):
            module.load_state_dict({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})
        with torch.no_grad():
            self.log_alpha.copy_(tensors["log_alpha"])
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
