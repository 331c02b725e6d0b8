"""Ape-X DQN (Horgan et al., 2018): DQN's update on Ape-X's asynchronous layout.

The learner's loop, the acting workers, replay shards and parameter server are Ape-X's
(:mod:`volley.algorithms.apex`); what is DQN's here: worker ``i`` of ``N`` explores with its
own ``ε_i = ε^(1 + α·i/(N−1))`` (``ε`` follows the ``epsilon_*`` schedule, ``α`` is
``worker_epsilon_alpha``), set on its copy of the Q-network each run; fresh transitions get
their first priorities ``|δ|`` from the worker's own network; the learner's update is DQN's,
inherited, and the target network is copied every ``target_update_freq`` learner updates.
Results add DQN's ``loss``, ``q_mean``, ``epsilon`` (worker 0's) and ``lr``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from volley.algorithms.apex import ApexLearner
from volley.algorithms.dqn.config import ApexDQNConfig, DQNConfig
from volley.algorithms.dqn.learner import DQN, exploration_epsilon, q_and_targets
from volley.config import AlgorithmConfig
from volley.engines.base import Explore, Priorities
from volley.rollout.batch import Batch
from volley.torch_networks.policy import Policy
from volley.torch_networks.q_network import QNetwork

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


class ApexDQN(ApexLearner, DQN):
    """Asynchronous DQN on Ray: the learner here, everything else in actors."""

    config_class = ApexDQNConfig
    config: ApexDQNConfig

    def worker_explore(self) -> Explore:
        return set_epsilon

    def worker_priorities(self) -> Priorities:
        return initial_td_errors

    @property
    def updates_per_step(self) -> float:  # type: ignore[override]
        return self.config.train_intensity

    def worker_exploration(self, worker_index: int) -> float:
        return per_worker_epsilon(self.config, worker_index, self.workers.num_workers, self.steps_sampled)

    def begin_updates(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.q_means: list[torch.Tensor] = []

    def learn(self, batch: Batch) -> np.ndarray | None:
        loss, q_mean, td_errors = self.update(batch)
        self.losses.append(loss)
        self.q_means.append(q_mean)
        return td_errors

    def after_update(self) -> None:
        if self.learner_updates % self.config.target_update_freq == 0:
            self.update_target()

    def learner_statistics(self) -> dict[str, float]:
        return {"loss": float(torch.stack(self.losses).mean()) if self.losses else math.nan,
                "q_mean": float(torch.stack(self.q_means).mean()) if self.q_means else math.nan,
                "epsilon": self.worker_exploration(0),
                "lr": self.schedule_lr(self.optimizer)}  # as RLlib's learner after its updates

    def learner_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {f"target.{k}": v for k, v in self.target.state_dict().items()}, {}

    def load_learner_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.target.load_state_dict({k[len("target."):]: v for k, v in tensors.items() if k.startswith("target.")})
