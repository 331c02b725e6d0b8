"""Recurrent Replay Distributed DQN (Kapturowski et al., 2019), synchronous: DQN's loop on sequences.

Per iteration, as DQN (:mod:`volley.algorithms.dqn.learner`), except:

1. workers act ε-greedily with an LSTM Q-network, carrying each environment's state, and cut
   their fragments into sequences of up to ``model.max_seq_len`` steps, each with the state it
   started from (:mod:`volley.rollout.sequences`);
2. the learner stores each sequence as one row of its replay buffer: its steps, the observation
   after its last step, the ``replay_burn_in`` steps of the episode before it, and its start
   state (zeros with ``zero_init_states``);
3. a gradient step replays ``minibatch_size`` sequences: both networks read the burn-in without
   a gradient, then the sequence; each step's target bootstraps from the next step
   (:func:`~volley.algorithms.r2d2.loss.sequence_targets`, with the value rescaling h), and
   prioritized replay ranks sequences by ``0.9·max|δ| + 0.1·mean|δ|``.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from volley.algorithms.dqn.learner import DQN
from volley.algorithms.r2d2.config import R2D2Config
from volley.algorithms.r2d2.loss import r2d2_loss, sequence_priorities, sequence_targets
from volley.config import AlgorithmConfig
from volley.rollout.batch import SEQ_LENS, STATE_IN, Batch
from volley.torch_networks.lstm import LSTMQNetwork


def r2d2_columns(columns: dict[str, np.ndarray], config: AlgorithmConfig) -> dict[str, np.ndarray]:
    """A worker fragment's steps (time-major ``[T, N]``) with the observation after each and
    ``since_start``, the steps of the same episode before it in this fragment: the learner's
    burn-in reads those before a sequence."""
    ends = columns["cuts"]
    index = np.arange(len(ends))[:, None]
    fresh = np.ones(ends.shape, bool)
    fresh[1:] = ends[:-1]
    since_start = index - np.maximum.accumulate(np.where(fresh, index, 0), axis=0)
    return {"obs": columns["obs"], "actions": columns["actions"], "rewards": columns["rewards"],
            "terminated": columns["terminated"], "next_obs": columns["next_obs"], "since_start": since_start,
            "valid": columns["valid"]}


def sequence_rows(batch: Batch, burn_in: int, zero_init_states: bool, cell_size: int) -> dict[str, np.ndarray]:
    """One replay row per sequence of ``batch`` (env-major steps as :func:`r2d2_columns` left them, ``seq_lens``, ``state_in_0/1``),
    each padded to the longest ``max_seq_len`` ``L`` of the batch: ``obs`` ``[L + 1, ...]`` (the
    steps, then the observation after the last), ``actions``, ``rewards``, ``terminated``,
    ``mask`` ``[L]`` (1 on real steps), ``burn_obs`` ``[burn_in, ...]`` (the episode's steps before
    the sequence, left-aligned), ``burn_len`` and the start state ``h``, ``c``."""
    lengths = np.asarray(batch[SEQ_LENS], np.int64)
    starts = np.cumsum(lengths) - lengths
    last = starts + lengths - 1
    burn_len = np.minimum(burn_in, batch["since_start"][starts])
    span = int(lengths.max())
    offset = np.arange(span + 1)[None, :]
    real = offset < lengths[:, None]
    steps = np.minimum(starts[:, None] + offset, last[:, None])
    obs, next_obs = batch["obs"], batch["next_obs"]
    shape = (1,) * (obs.ndim - 1)
    sequence_obs = np.where(real.reshape(*real.shape, *shape), obs[steps], next_obs[last][:, None])
    burn = np.minimum((starts - burn_len)[:, None] + np.arange(burn_in)[None, :], len(obs) - 1)
    if zero_init_states:
        h = c = np.zeros((len(lengths), cell_size), np.float32)
    else:
        h, c = batch[f"{STATE_IN}0"], batch[f"{STATE_IN}1"]
    return {"obs": sequence_obs, "actions": batch["actions"][steps[:, :-1]],
            "rewards": batch["rewards"][steps[:, :-1]].astype(np.float32),
            "terminated": batch["terminated"][steps[:, :-1]].astype(np.float32),
            "mask": real[:, :-1].astype(np.float32), "burn_obs": obs[burn], "burn_len": burn_len, "h": h, "c": c}


class R2D2(DQN):
    """Synchronous R2D2: DQN whose replay holds sequences and whose Q-network is an LSTM."""

    config_class = R2D2Config
    multi_agent_feed = None  # its postprocess cuts a single-agent worker's fragments into burn-in sequences
    config: R2D2Config
    policy: LSTMQNetwork

    postprocess = staticmethod(r2d2_columns)

    def store(self, batch: Batch) -> None:
        cfg = self.config
        if len(batch):
            self.replay.add(sequence_rows(batch, cfg.replay_burn_in, cfg.zero_init_states, cfg.model.lstm_cell_size))

    def learning_started(self) -> bool:
        """Whether ``learning_starts`` environment steps were sampled (RLlib's rule)."""
        return len(self.replay) > 0 and self.timesteps_total >= self.config.learning_starts

    def update(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, np.ndarray | None]:
        """One gradient step on a minibatch of sequences; returns the loss, the mean Q of the kept
        steps and each sequence's priority (None when the step was skipped)."""
        cfg = self.config
        mb = {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        q, targets, mask = self.q_and_targets(mb)
        loss = r2d2_loss(q, targets, mask, mb["weights"])
        self.optimizer.zero_grad()
        loss.backward()
        stepped = self.optimizer_step(self.optimizer, loss, cfg.grad_clip)
        priorities = sequence_priorities((q - targets).detach(), mask).cpu().numpy() if stepped else None
        return loss.detach(), (q.detach() * mask).sum() / mask.sum(), priorities

    def q_and_targets(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``Q(s, a)`` ``[S, L]`` of the replayed sequences, their targets and the mask of real steps."""
        cfg = self.config
        obs = mb["obs"].flatten(0, 1)  # [S·(L+1), ...]
        count, span = mb["actions"].shape
        online, target = self.policy, cast(LSTMQNetwork, self.target)
        state = [mb["h"], mb["c"]]
        online_state, target_state = state, state
        if cfg.replay_burn_in:
            with torch.no_grad():
                burn = mb["burn_obs"].flatten(0, 1)
                online_state = online.burn_in(burn, state, mb["burn_len"])
                target_state = target.burn_in(burn, state, mb["burn_len"])
        q_all = online.sequence_q(obs, online_state)[0].reshape(count, span + 1, -1)
        with torch.no_grad():
            q_next = target.sequence_q(obs, target_state)[0].reshape(count, span + 1, -1)[:, 1:]
            targets = sequence_targets(mb["rewards"], mb["terminated"], q_next,
                                       q_all[:, 1:].detach() if cfg.double_q else None, cfg.gamma,
                                       cfg.h_function_epsilon if cfg.use_h_function else None)
        q = q_all[:, :-1].gather(-1, mb["actions"].long().unsqueeze(-1)).squeeze(-1)
        return q, targets, mb["mask"]
