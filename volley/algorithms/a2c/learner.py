"""Advantage actor-critic, synchronous (A2C: Mnih et al., 2016, as SB3's and RLlib 2.9's A2C).

Per iteration: sample a batch from every worker with the current weights (workers compute GAE
advantages and value targets on their fragments; ``gae_lambda`` 1 gives each step its n-step
return, bootstrapped from the value at the fragment's end), then take one RMSProp step on
:func:`~volley.algorithms.a2c.loss.a2c_loss` over the whole batch. With ``microbatch_size`` the
gradient is accumulated over microbatches first (RLlib's A2C), still one step per batch.
"""

from __future__ import annotations

import torch

from volley.algorithm import Algorithm
from volley.algorithms.a2c.config import A2CConfig
from volley.algorithms.a2c.loss import a2c_loss
from volley.optim import RMSprop
from volley.rollout.advantages import explained_variance, gae_columns
from volley.rollout.batch import Batch
from volley.torch_networks.custom_model import model_metrics, with_custom_loss


class A2C(Algorithm):
    """Synchronous advantage actor-critic: one gradient step per sampled batch."""

    config_class = A2CConfig
    config: A2CConfig
    averages_gradients = True
    adds_custom_loss = True

    postprocess = staticmethod(gae_columns)  # worker-side: GAE advantages and value targets

    def setup(self) -> None:
        # SB3's RMSProp: alpha 0.99, eps 1e-5 (torch's default eps 1e-8 is unstable here)
        self.optimizer = RMSprop(self.policy.parameters(), lr=self.scheduled("lr"),
                                 alpha=self.config.decay_rate, eps=1e-5)
        self.entropy_coeff = self.scheduled("entropy_coeff")

    def training_step(self) -> dict[str, float]:
        stats = self.update(self.sample())
        stats["lr"] = self.schedule_lr(self.optimizer)
        stats["entropy_coeff"] = self.entropy_coeff = self.scheduled("entropy_coeff")
        return stats

    def update(self, batch: Batch) -> dict[str, float]:
        """One optimizer step on the batch's loss, its gradient summed over microbatches weighted by
        their share of the batch's steps (so it equals the whole batch's)."""
        cfg = self.config
        data = self.sequences(batch)  # rows, or a recurrent policy's padded sequences
        chunks = [data] if cfg.microbatch_size is None else data.minibatches(cfg.microbatch_size, self.rng)
        self.optimizer.zero_grad()
        stats = torch.zeros(4)  # the batch's total, policy, value and entropy terms
        for mb in chunks:
            dist, values = self.policy(**mb.inputs)
            loss = a2c_loss(dist.log_prob(mb["actions"]), mb["advantages"], values, mb["value_targets"],
                            dist.entropy(), vf_loss_coeff=cfg.vf_loss_coeff, entropy_coeff=self.entropy_coeff,
                            mean=mb.mean)
            share = mb.steps / data.steps
            (with_custom_loss(self.policy, loss.total, mb.columns) * share).backward()
            stats += share * torch.stack(loss).detach().cpu()
        self.optimizer_step(self.optimizer, float(stats[0]), cfg.grad_clip)
        names = ("policy_loss", "vf_loss", "entropy")
        return {**dict(zip(names, stats[1:].tolist(), strict=True)), **model_metrics(self.policy),
                "explained_variance": explained_variance(batch["values"], batch["value_targets"])}
