"""Deep Q-Networks (Mnih et al., 2015), synchronous: ε-greedy workers feed a replay buffer.

Per iteration:

1. ε from its schedule goes to every worker with the current weights; each acts
   ε-greedily for ``rollout_fragment_length`` steps and returns its transitions with
   n-step returns (``postprocess``);
2. the learner stores them in its replay buffer (uniform or prioritized);
3. once it holds ``learning_starts`` transitions, the learner takes
   ``train_intensity`` gradient steps per sampled environment step, each on a
   minibatch from the buffer: the Huber loss between ``Q(s, a)`` and the target
   ``R + γ^m · Q̂(s', a*)`` with ``a*`` chosen by the online network (double DQN) or
   by the target network ``Q̂``;
4. every ``target_update_freq`` environment steps, ``Q̂`` is reset to ``Q`` (or moved
   a fraction ``tau`` towards it).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch

from volley.algorithm import Algorithm
from volley.algorithms.dqn.config import DQNConfig
from volley.algorithms.dqn.loss import bootstrapped_targets, dqn_loss
from volley.optim import Adam
from volley.replay import PrioritizedReplayBuffer, make_replay_buffer, n_step_columns
from volley.rollout.batch import Batch
from volley.torch_networks.q_network import QNetwork


def exploration_epsilon(config: DQNConfig, timestep: int) -> float:
    """ε after ``timestep`` environment steps: from ``epsilon_start`` to ``epsilon_end`` over
    ``epsilon_decay_steps`` (linearly, or by a constant factor per step), then constant."""
    fraction = min(timestep / config.epsilon_decay_steps, 1.0)
    start, end = config.epsilon_start, config.epsilon_end
    if config.epsilon_schedule == "linear":
        return start + fraction * (end - start)
    return start * (end / start) ** fraction


@torch.no_grad()
def q_targets(online: QNetwork, target: QNetwork, returns: torch.Tensor, next_obs: torch.Tensor,
              discounts: torch.Tensor, double_q: bool) -> torch.Tensor:
    """:func:`bootstrapped_targets` of the networks at ``next_obs``."""
    return bootstrapped_targets(returns, discounts, target.q_values(next_obs),
                                online.q_values(next_obs) if double_q else None)


def q_and_targets(online: QNetwork, target: QNetwork, batch: dict[str, torch.Tensor],
                  double_q: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``Q(s, a)`` of the actions taken and their targets (:func:`q_targets`), each ``[B]``; their
    difference is the TD error that the loss shrinks and that prioritized replay ranks by."""
    targets = q_targets(online, target, batch["returns"], batch["next_obs"], batch["discounts"], double_q)
    q = online.q_values(batch["obs"]).gather(-1, batch["actions"].long().unsqueeze(-1)).squeeze(-1)
    return q, targets


class DQN(Algorithm):
    """Synchronous DQN: ε-greedy workers fill the learner's replay buffer; the learner trains on it."""

    config_class = DQNConfig
    config: DQNConfig
    policy: QNetwork

    # worker-side: n-step transitions (torch-free, so a worker that acts in numpy never imports torch)
    postprocess = staticmethod(n_step_columns)

    def setup(self) -> None:
        cfg = self.config
        self.setup_learner()
        self.replay = make_replay_buffer(cfg.replay_buffer_capacity, self.rng, cfg.prioritization)
        self.updates_owed = 0.0  # train_intensity x steps sampled, less the updates taken

    def setup_learner(self) -> None:
        """The target network and the optimizer (wherever the replay buffer lives)."""
        self.target = copy.deepcopy(self.policy).requires_grad_(False)
        self.optimizer = Adam(self.policy.q_parameters(), lr=self.scheduled("lr"))

    def training_step(self) -> dict[str, float]:
        cfg = self.config
        epsilon = exploration_epsilon(cfg, self.timesteps_total)
        self.policy.set_epsilon(epsilon)  # travels to the workers with the weights
        batch = self.sample()
        self.store(batch)
        steps_before, steps_after = self.timesteps_total, self.timesteps_total + len(batch)

        losses, q_means = [], []
        if self.learning_started():
            self.updates_owed += cfg.train_intensity * len(batch)
            for _ in range(int(self.updates_owed)):
                minibatch = self.replay.sample(cfg.minibatch_size)
                loss, q_mean, td_errors = self.update(minibatch)
                if td_errors is not None and isinstance(self.replay, PrioritizedReplayBuffer):
                    self.replay.update_priorities(minibatch["indices"], td_errors)
                losses.append(loss)
                q_means.append(q_mean)
            self.updates_owed -= len(losses)
            self.schedule_lr(self.optimizer)  # as RLlib's learner after its updates

        if steps_before // cfg.target_update_freq < steps_after // cfg.target_update_freq:
            self.update_target()
        return {"loss": float(torch.stack(losses).mean()) if losses else math.nan,
                "q_mean": float(torch.stack(q_means).mean()) if q_means else math.nan,
                "epsilon": epsilon, "num_updates": len(losses), "replay_size": len(self.replay),
                "lr": self.optimizer.param_groups[0]["lr"]}

    def store(self, batch: Batch) -> None:
        """Add the workers' sample to the replay buffer."""
        self.replay.add(batch)

    def learning_started(self) -> bool:
        """Whether the buffer holds ``learning_starts`` transitions."""
        return len(self.replay) >= self.config.learning_starts

    def update(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, np.ndarray | None]:
        """One gradient step on the importance-weighted Huber loss; returns the loss, the mean Q
        and the TD errors ``[B]`` (new priorities, wherever the batch's replay buffer lives), None
        when the step was skipped for a non-finite loss or gradient."""
        cfg = self.config
        mb = {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        q, targets = q_and_targets(self.policy, self.target, mb, cfg.double_q)
        loss = dqn_loss(q, targets, mb["weights"])

        self.optimizer.zero_grad()
        loss.backward()
        stepped = self.optimizer_step(self.optimizer, loss, cfg.grad_clip)
        td_errors = (q - targets).detach().cpu().numpy() if stepped else None  # never a NaN priority
        return loss.detach(), q.detach().mean(), td_errors

    @torch.no_grad()
    def update_target(self) -> None:
        """Reset Q̂ to Q, or with ``tau`` move it that fraction of the way (Polyak averaging)."""
        tau = self.config.tau
        for target, online in zip(self.target.q_parameters(), self.policy.q_parameters(), strict=True):
            if tau is None:
                target.copy_(online)
            else:
                target.lerp_(online, tau)

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        """On restore, the target network restarts as a copy of the restored Q-network and the
        replay buffer refills before learning resumes (neither is checkpointed: a buffer can
        hold gigabytes)."""
        self.target.load_state_dict(self.policy.state_dict())
