"""APPO: IMPALA's actors and V-trace with PPO's clipped surrogate against a target network (IMPACT,
Luo et al., 2020, as RLlib's APPO).

A fragment may have been sampled many updates ago, so PPO's ratio ``π/μ`` against the behaviour
policy can sit far outside the clip range before the learner has moved at all. IMPACT takes the
ratio against a **target network** ``π_target`` that trails the learner instead, and corrects for
the behaviour policy with a clipped importance weight (section 4.1 of the paper):

- V-trace targets and advantages (IMPALA's, equations 1 and 2) with ``π_target`` as the policy
  corrected towards;
- the surrogate ``min(r A, clip(r, 1 − ε, 1 + ε) A)`` with
  ``r = min(μ/π_target, target_worker_clipping) · π/μ`` (≈ ``π/π_target``), ε = ``clip_param``;
- with ``use_kl_loss``, ``kl_coeff · KL(π_target ‖ π)``, its weight adapted by RLlib's rule at every
  target update towards ``kl_target``;
- IMPALA's value loss and entropy bonus.

The target moves towards the learner (``tau``; 1 copies it) every ``target_network_update_freq``
x ``minibatch_buffer_size`` x ``num_epochs`` updates. Everything else (the stream of fragments,
the statistics, checkpoints) is IMPALA's, inherited.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from volley.action_dists import Distribution
from volley.algorithms.impala import learner as impala
from volley.algorithms.impala.config import APPOConfig
from volley.algorithms.impala.learner import IMPALA, PolicyTerms
from volley.algorithms.impala.loss import appo_surrogate
from volley.algorithms.ppo.loss import adapt_kl_coeff

TARGET_PREFIX = "target."  # checkpoint tensors of the target network

# IMPALA's CartPole settings with RLlib's entropy bonus and twice the step size: the clip keeps the
# policy from collapsing (``APPOConfig().update(**CARTPOLE)``). 2 Ray workers x 8 environments,
# seed 0 repeated (the stream's arrival order differs run to run), one core taken by another job:
# at IMPALA's lr 1e-3, 13 of 14 runs took 90k-234k steps to 475 but one fell back to 147 and was
# still there at 605k (a CI run saw the same at 607k); at 2e-3, 24 runs took 62k-274k
# (median 107k), none fell back, with the value loss at 0.05 (IMPALA's weight then).
CARTPOLE = {**impala.CARTPOLE, "entropy_coeff": 0.01, "lr": 2e-3, "vf_loss_coeff": 0.05}


class APPO(IMPALA):
    """IMPALA's learner with the clipped surrogate against a target network."""

    config_class = APPOConfig
    config: APPOConfig
    STATS = (*IMPALA.STATS, "kl", "clip_fraction")

    def setup(self) -> None:
        super().setup()
        self.target = copy.deepcopy(self.policy).requires_grad_(False)
        self.kl_coeff = self.config.kl_coeff  # the KL loss's current weight
        self.num_target_updates = 0
        self.kls: list[torch.Tensor] = []  # since the last target update

    def target_distribution(self, obs: torch.Tensor) -> Distribution | None:
        with torch.no_grad():
            return self.target.distribution(obs)

    def policy_loss(self, terms: PolicyTerms) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:func:`appo_surrogate`, and the KL loss."""
        cfg = self.config
        assert terms.target is not None
        loss, clipped = appo_surrogate(terms.logp, terms.behaviour_logp, terms.target_logp, terms.advantages,
                                       clip_param=cfg.clip_param, target_worker_clipping=cfg.target_worker_clipping)
        kl = terms.target.kl(terms.dist)[terms.mask].mean()
        if cfg.use_kl_loss:
            loss = loss + self.kl_coeff * kl
        self.kls.append(kl.detach())
        return loss, [kl.detach(), clipped]

    def after_update(self) -> None:
        """Every ``target_network_update_freq`` passes through the minibatch buffer: move the target
        towards the learner and adapt the KL loss's weight to the KL measured since the last time."""
        cfg = self.config
        period = cfg.target_network_update_freq * cfg.minibatch_buffer_size * cfg.num_epochs
        if self.learner_updates % period:
            return
        with torch.no_grad():
            for target, online in zip(self.target.parameters(), self.policy.parameters(), strict=True):
                target.lerp_(online, cfg.tau)
        self.num_target_updates += 1
        if cfg.use_kl_loss and self.kls:
            self.kl_coeff = adapt_kl_coeff(self.kl_coeff, float(torch.stack(self.kls).mean()), cfg.kl_target)
        self.kls = []

    def updates_statistics(self, took: float) -> dict[str, Any]:
        return {**super().updates_statistics(took), "kl_coeff": self.kl_coeff,
                "num_target_updates": self.num_target_updates}

    # -- checkpoints: IMPALA's, and the target network and the KL loss's weight ------------------

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors, state = super().extra_state()
        tensors = {**tensors, **{f"{TARGET_PREFIX}{k}": v for k, v in self.target.state_dict().items()}}
        return tensors, {**state, "kl_coeff": self.kl_coeff, "num_target_updates": self.num_target_updates}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        super().load_extra_state(tensors, state)
        self.target.load_state_dict({k[len(TARGET_PREFIX):]: v for k, v in tensors.items()
                                     if k.startswith(TARGET_PREFIX)})
        self.kl_coeff = state["kl_coeff"]
        self.num_target_updates = state["num_target_updates"]
