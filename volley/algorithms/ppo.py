"""Proximal Policy Optimization (Schulman et al., 2017), clipped-surrogate variant.

Per iteration: sample a batch from every worker with the current weights (workers
compute GAE advantages on their own fragments), then run ``num_epochs`` passes of
minibatch SGD on the clipped surrogate, the (optionally clipped) value loss and
an entropy bonus (and, with ``kl_coeff`` > 0, RLlib's adaptive KL penalty: see
:func:`adapt_kl_coeff`); stop the epochs early when the approximate KL passes
``target_kl``; the next ``sample()`` ships the new weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from volley.algorithm import Algorithm
from volley.config import AlgorithmConfig, option
from volley.errors import ConfigError
from volley.optim import Adam
from volley.rollout.advantages import explained_variance, gae_columns
from volley.rollout.batch import Batch


@dataclass(kw_only=True)
class PPOConfig(AlgorithmConfig):
    """PPO's keys on top of :class:`~volley.config.AlgorithmConfig`.

    The defaults are tuned for the time-to-475 on CartPole-v1 (a short horizon, gamma
    0.98, lambda 0.8 as in rl-zoo; a large learning rate; 16 envs per worker): about
    80k steps and 5 s of training on two cores. For MuJoCo or Atari start from gamma
    0.99, gae_lambda 0.95, lr 3e-4 (see benchmarks/RESULTS.md for measured settings).
    """

    ALIASES: ClassVar[dict[str, str]] = {
        **AlgorithmConfig.ALIASES,
        "sgd_minibatch_size": "minibatch_size",
        "num_sgd_iter": "num_epochs",
        "lambda_": "gae_lambda",
        "lambda": "gae_lambda",
    }
    algo_name: ClassVar[str] = "ppo"

    gamma: float = option(0.98, "training", "discount factor")
    lr: float = option(2e-3, "training", "learning rate")
    train_batch_size: int = option(2048, "training", "environment steps per training iteration")
    gae_lambda: float = option(0.8, "training", "GAE lambda: 1 is Monte Carlo, 0 is one-step TD")
    clip_param: float = option(0.2, "training", "PPO's ratio clip epsilon")
    vf_clip_param: float | None = option(
        None, "training", "clip value updates to this distance from the old values (None: off)")
    vf_loss_coeff: float = option(0.5, "training", "weight of the value loss")
    entropy_coeff: float = option(0.0, "training", "weight of the entropy bonus")
    num_epochs: int = option(10, "training", "SGD passes over each batch (alias num_sgd_iter)")
    minibatch_size: int = option(512, "training", "rows per SGD step (alias sgd_minibatch_size)")
    kl_coeff: float = option(
        0.0, "training", "initial weight of the KL(old ‖ new) penalty in the loss, adapted after every "
        "iteration towards kl_target (RLlib's adaptive KL; 0: no penalty)")
    kl_target: float = option(
        0.01, "training", "the sampled KL the penalty's weight steers towards: x1.5 above 2·kl_target, "
        "x0.5 below kl_target/2")
    target_kl: float | None = option(
        None, "training", "stop the epochs once the approximate KL exceeds this (volley's early stop, "
        "not RLlib's kl_target; None: never)")
    normalize_advantages: bool = option(True, "training", "standardise advantages per minibatch")
    sample_async: bool = option(
        False, "rollouts", "Ray workers sample the next batch while the learner updates on this one "
        "(one update of policy lag; the ratio uses the sampling policy's probabilities)")

    def validate(self) -> None:
        super().validate()
        for key in ("clip_param", "num_epochs", "minibatch_size", "kl_target"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        if self.kl_coeff < 0:
            raise ConfigError(f"config key 'kl_coeff' must be >= 0, got {self.kl_coeff!r}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"config key 'gae_lambda' must be in [0, 1], got {self.gae_lambda!r}")
        if self.minibatch_size > self.train_batch_size:
            raise ConfigError(f"minibatch_size={self.minibatch_size} is larger than "
                              f"train_batch_size={self.train_batch_size}")
        if self.sample_async and (self.engine != "ray" or self.num_workers == 0):
            raise ConfigError(f"sample_async=True needs Ray workers (engine='ray', num_workers >= 1), got "
                              f"engine={self.engine!r}, num_workers={self.num_workers!r}: workers in the "
                              "learner's process cannot sample while it learns")
        if self.target_kl is not None and self.mpi_mode == "allreduce":  # ranks would stop apart
            raise ConfigError(f"target_kl={self.target_kl} cannot be used with mpi_mode='allreduce'")

    def build(self, env: Any = None) -> PPO:
        return PPO(self._prepare_build(env))


def adapt_kl_coeff(kl_coeff: float, sampled_kl: float, kl_target: float) -> float:
    """The KL penalty's weight for the next iteration, by RLlib's rule.

    x1.5 when the iteration's sampled KL(old ‖ new) was above ``2 · kl_target``, x0.5 when it
    was below ``kl_target / 2``, else unchanged. The PPO paper (Schulman et al., 2017,
    section 4) states the idea with other constants: β x 2 when d > 1.5 · d_targ, β / 2 when
    d < d_targ / 1.5. volley uses RLlib's, so that a config ported from RLlib adapts as it did.
    """
    if sampled_kl > 2.0 * kl_target:
        return kl_coeff * 1.5
    if sampled_kl < 0.5 * kl_target:
        return kl_coeff * 0.5
    return kl_coeff


class PPO(Algorithm):
    """Synchronous PPO: gather samples, update on the learner, broadcast weights."""

    config_class = PPOConfig
    config: PPOConfig
    averages_gradients = True

    postprocess = staticmethod(gae_columns)  # worker-side: GAE advantages and value targets

    def setup(self) -> None:
        self.optimizer = Adam(self.policy.parameters(), lr=self.config.lr, eps=1e-5)
        self.kl_coeff = self.config.kl_coeff  # the adaptive KL penalty's current weight

    def concurrent_workers(self) -> int:
        return self.workers.plan.num_workers if self.config.sample_async else 0  # they sample while it learns

    def training_step(self) -> dict[str, float]:
        batch = self.sample_ahead() if self.config.sample_async else self.sample()
        for group in self.optimizer.param_groups:
            group["lr"] = self.current_lr()
        stats = self.update(batch)
        if self.config.kl_coeff > 0:
            # MPI allreduce replicas each measure KL on their own data: they adapt with the mean,
            # so every replica's loss keeps the same weight
            self.kl_coeff = adapt_kl_coeff(self.kl_coeff, self.replica_mean(stats["kl"]), self.config.kl_target)
        return stats

    def update(self, batch: Batch) -> dict[str, float]:
        """Minibatch SGD epochs on the clipped PPO objective (plus ``kl_coeff`` x KL(old ‖ new), the KL
        estimated from the batch's actions as mean((r - 1) - log r), Schulman's low-variance
        estimator, which is also the ``kl`` reported; RLlib computes it from the whole old
        distribution)."""
        cfg = self.config
        tensors = {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        stats: list[torch.Tensor] = []  # per SGD step: policy loss, vf loss, entropy, kl, clip fraction
        epochs_done = 0
        for _ in range(cfg.num_epochs):
            for index in Batch.minibatch_indices(len(batch), cfg.minibatch_size, self.rng):
                mb = {k: v[index] for k, v in tensors.items()}
                dist, values = self.policy(mb["obs"])
                logp = dist.log_prob(mb["actions"])
                log_ratio = logp - mb["logp"]
                ratio = log_ratio.exp()
                adv = mb["advantages"]
                if cfg.normalize_advantages and len(adv) > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio,
                                        -adv * ratio.clamp(1 - cfg.clip_param, 1 + cfg.clip_param)).mean()
                vf_loss = self._value_loss(values, mb["values"], mb["value_targets"])
                entropy = dist.entropy().mean()
                kl = ((ratio - 1) - log_ratio).mean()
                loss = policy_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * entropy
                if cfg.kl_coeff > 0:
                    loss = loss + self.kl_coeff * kl

                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer_step(self.optimizer, self.policy.parameters(), loss, cfg.grad_clip)

                with torch.no_grad():
                    clipped = ((ratio - 1).abs() > cfg.clip_param).float().mean()
                    stats.append(torch.stack([policy_loss, vf_loss, entropy, kl, clipped]))
            epochs_done += 1
            if cfg.target_kl is not None and stats[-1][3] > cfg.target_kl:
                break
        means = torch.stack(stats).mean(0).tolist()
        names = ("policy_loss", "vf_loss", "entropy", "kl", "clip_fraction")
        return {**dict(zip(names, means, strict=True)),
                "num_epochs_done": epochs_done, "lr": self.optimizer.param_groups[0]["lr"],
                "kl_coeff": self.kl_coeff,
                "explained_variance": explained_variance(batch["values"], batch["value_targets"])}

    def _value_loss(self, values: torch.Tensor, old_values: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
        clip = self.config.vf_clip_param
        loss = (values - targets) ** 2
        if clip is not None:  # PPO2's clipped value loss
            clipped = old_values + (values - old_values).clamp(-clip, clip)
            loss = torch.max(loss, (clipped - targets) ** 2)
        return 0.5 * loss.mean()

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {}, {"kl_coeff": self.kl_coeff}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.kl_coeff = state.get("kl_coeff", self.config.kl_coeff)  # older checkpoints have none
