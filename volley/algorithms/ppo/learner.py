"""Proximal Policy Optimization (Schulman et al., 2017), clipped-surrogate variant.

Per iteration: sample a batch from every worker with the current weights (workers
compute GAE advantages on their own fragments), then run ``num_epochs`` passes of
minibatch SGD on the clipped surrogate, the (optionally clipped) value loss and
an entropy bonus (and, with ``kl_coeff`` > 0 and ``use_kl_loss``, RLlib's adaptive KL penalty: see
:func:`adapt_kl_coeff`); stop the epochs early when the approximate KL passes
``target_kl``; the next ``sample()`` ships the new weights.
"""

from __future__ import annotations

from typing import Any

import torch

from volley.algorithm import Algorithm
from volley.algorithms.ppo.config import PPOConfig
from volley.algorithms.ppo.loss import adapt_kl_coeff, ppo_loss
from volley.errors import ConfigError
from volley.optim import Adam
from volley.rollout.advantages import explained_variance, gae_columns
from volley.rollout.batch import Batch
from volley.torch_networks.custom_model import model_metrics, with_custom_loss


class PPO(Algorithm):
    """Synchronous PPO: gather samples, update on the learner, broadcast weights."""

    config_class = PPOConfig
    config: PPOConfig
    averages_gradients = True
    adds_custom_loss = True

    postprocess = staticmethod(gae_columns)  # worker-side: GAE advantages and value targets

    def setup(self) -> None:
        max_seq_len = self.config.model.max_seq_len
        if self.policy.initial_state() and self.config.minibatch_size < max_seq_len:
            raise ConfigError(f"minibatch_size={self.config.minibatch_size} is smaller than model.max_seq_len="
                              f"{max_seq_len}: a recurrent policy's minibatches are whole sequences of up to "
                              "max_seq_len steps")
        self.optimizer = Adam(self.policy.parameters(), lr=self.scheduled("lr"), eps=1e-5)
        self.entropy_coeff = self.scheduled("entropy_coeff")
        self.kl_coeff = self.config.kl_coeff  # the adaptive KL penalty's current weight

    def concurrent_workers(self) -> int:
        return self.workers.plan.num_workers if self.config.sample_async else 0  # they sample while it learns

    def training_step(self) -> dict[str, float]:
        batch = self.sample_ahead() if self.config.sample_async else self.sample()
        stats = self.update(batch)
        # as RLlib's learner after an update: lr and the entropy weight at the steps sampled so far
        stats["lr"] = self.schedule_lr(self.optimizer)
        stats["entropy_coeff"] = self.entropy_coeff = self.scheduled("entropy_coeff")
        if self.kl_penalty:
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
        data = self.sequences(batch)  # rows, or a recurrent policy's padded sequences
        stats: list[torch.Tensor] = []  # per SGD step: policy loss, vf loss, entropy, kl, clip fraction
        epochs_done = 0
        for _ in range(cfg.num_epochs):
            for mb in data.minibatches(cfg.minibatch_size, self.rng):
                dist, values = self.policy(**mb.inputs)
                adv = mb["advantages"]
                if cfg.normalize_advantages and mb.steps > 1:
                    adv = mb.standardized(adv)
                loss = ppo_loss(dist.log_prob(mb["actions"]), mb["logp"], adv, values, mb["values"],
                                mb["value_targets"], dist.entropy(), clip_param=cfg.clip_param,
                                vf_clip_param=cfg.vf_clip_param, clip_range_vf=cfg.clip_range_vf, vf_loss_coeff=cfg.vf_loss_coeff,
                                entropy_coeff=self.entropy_coeff,
                                kl_coeff=self.kl_coeff if self.kl_penalty else None, mean=mb.mean)
                total = with_custom_loss(self.policy, loss.total, mb.columns)  # a custom model's own loss

                self.optimizer.zero_grad()
                total.backward()
                self.optimizer_step(self.optimizer, total, cfg.grad_clip)

                with torch.no_grad():
                    stats.append(torch.stack([loss.policy, loss.value, loss.entropy, loss.kl, loss.clip_fraction]))
            epochs_done += 1
            if cfg.target_kl is not None and stats[-1][3] > cfg.target_kl:
                break
        means = torch.stack(stats).mean(0).tolist()
        names = ("policy_loss", "vf_loss", "entropy", "kl", "clip_fraction")
        return {**dict(zip(names, means, strict=True)),
                "num_epochs_done": epochs_done, "kl_coeff": self.kl_coeff, **model_metrics(self.policy),
                "explained_variance": explained_variance(batch["values"], batch["value_targets"])}

    @property
    def kl_penalty(self) -> bool:
        """Whether the loss has the KL penalty: ``use_kl_loss`` and a weight to start from, as in RLlib."""
        return self.config.use_kl_loss and self.config.kl_coeff > 0

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {}, {"kl_coeff": self.kl_coeff}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.kl_coeff = state.get("kl_coeff", self.config.kl_coeff)  # older checkpoints have none
        self.entropy_coeff = self.scheduled("entropy_coeff")
