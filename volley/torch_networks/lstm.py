"""A policy with memory: an LSTM between volley's MLP or Nature CNN and its heads (RLlib's ``use_lstm``).

:class:`LSTMActorCritic` is :class:`volley.torch_networks.actor_critic.ActorCritic` with an LSTM of
``lstm_cell_size`` units after each body: the policy's and, unless ``vf_share_layers`` (or
for images, whose CNN is always shared), the value function's own, as RLlib's new stack and
sb3-contrib's ``RecurrentPPO`` build them (RLlib's old stack shares one). With
``lstm_use_prev_action`` / ``lstm_use_prev_reward`` the LSTM also reads the previous
action (one-hot when Discrete) and the environment's previous reward, concatenated to the
body's features, as RLlib's ``LSTMWrapper`` does.

The state of one environment is the LSTMs' ``[h, c]``, zeros at an episode start: each
``[lstm_cell_size]``, or ``[2, lstm_cell_size]`` with the value function's own LSTM (row 0 the
policy's, row 1 the value function's). Workers act on sequences of one step; the learner replays
sequences of up to ``max_seq_len`` steps from the states the workers stored at their starts
(:mod:`volley.rollout.sequences`), in RLlib's layout: rows ``[S·T, ...]`` of ``S`` padded
sequences of ``T`` steps, a state row per sequence. Padded steps come after a sequence's last
one, and an LSTM reads forward, so they change no output of a real step.

:class:`LSTMQNetwork` is R2D2's Q-network (:mod:`volley.algorithms.r2d2`): the same LSTM between
the body and a Q head; it acts in torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.action_dists import Distribution, masked
from volley.config import ModelConfig
from volley.networks.lstm import lstm_actor_critic_twin, previous_width
from volley.networks.numpy_layers import State, Twin
from volley.observations import ObsMask
from volley.torch_networks.actor_critic import ActorCritic
from volley.torch_networks.layers import named_arrays, split_mask
from volley.torch_networks.policy import TorchPrevious
from volley.torch_networks.q_network import QNetwork


def lstm_layer(n_in: int, cell_size: int) -> nn.LSTM:
    """An LSTM of one layer, batch-major: weights orthogonal, biases zero (CleanRL's
    ppo_atari_lstm, after Huang et al., 2022)."""
    lstm = nn.LSTM(n_in, cell_size, batch_first=True)
    for name, param in lstm.named_parameters():
        if name.startswith("weight"):
            nn.init.orthogonal_(param, 1.0)
        else:
            nn.init.zeros_(param)
    return lstm


def zero_previous(action_space: gym.Space, n: int, device: torch.device | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` environments' previous actions and rewards at an episode start: zeros."""
    dtype = torch.int64 if isinstance(action_space, gym.spaces.Discrete) else torch.float32
    return (torch.zeros((n, *(action_space.shape or ())), dtype=dtype, device=device),
            torch.zeros(n, device=device))


class LSTMActorCritic(ActorCritic):
    """volley's actor-critic with an LSTM on each body (``model.use_lstm``): every action space,
    action mask and custom action distribution :class:`~volley.torch_networks.actor_critic.ActorCritic` takes, the
    mask's columns read by no body and applied to the logits after the LSTM."""

    def __init__(self, obs_shape: tuple[int, ...], is_image: bool, action_space: gym.Space,
                 model: ModelConfig, mask: ObsMask | None = None,
                 custom_dist: tuple[type, int] | None = None) -> None:
        super().__init__(obs_shape, is_image, action_space, model, mask, custom_dist)
        self.action_space = action_space

    def add_memory(self, n_feat: int, action_space: gym.Space, model: ModelConfig) -> int:
        self.cell_size = model.lstm_cell_size
        self.prev_action_width = previous_width(action_space) if model.lstm_use_prev_action else 0
        self.prev_reward = model.lstm_use_prev_reward
        self.reads_prev = bool(self.prev_action_width or self.prev_reward)
        n_in = n_feat + self.prev_action_width + int(self.prev_reward)
        self.pi_lstm = lstm_layer(n_in, model.lstm_cell_size)
        self.vf_lstm = None if self.vf_body is None else lstm_layer(n_in, model.lstm_cell_size)
        return model.lstm_cell_size

    def initial_state(self) -> State:
        shape = (self.cell_size,) if self.vf_lstm is None else (2, self.cell_size)
        return [np.zeros(shape, np.float32), np.zeros(shape, np.float32)]

    def _memory(self, body: nn.Module, lstm: nn.LSTM, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                prev: TorchPrevious) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One tower: the body's features of rows ``[S·T, ...]``, with the previous action and
        reward where it reads them, through the LSTM from ``state`` (``(h, c)``, each ``[S, cell]``): features
        ``[S·T, cell]`` and ``[h, c]`` after each sequence's last row."""
        features = body(obs)
        if self.reads_prev:
            if prev is None:
                prev = zero_previous(self.action_space, len(obs), obs.device)
            actions, rewards = prev
            extra = []
            if self.prev_action_width:
                extra.append(nn.functional.one_hot(actions.long(), self.prev_action_width).float()
                             if isinstance(self.action_space, gym.spaces.Discrete)
                             else actions.float().reshape(len(obs), -1))
            if self.prev_reward:
                extra.append(rewards.float().reshape(len(obs), 1))
            features = torch.cat([features, *extra], dim=1)
        h, c = state
        steps = len(features) // len(h)  # T: RLlib's add_time_dimension
        out, (h_out, c_out) = lstm(features.reshape(len(h), steps, -1), (h[None], c[None]))
        return out.reshape(len(features), -1), [h_out[0], c_out[0]]

    def _tower_state(self, obs: torch.Tensor, state: Sequence[torch.Tensor],
                     tower: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h, c)`` of the policy's LSTM (``tower`` 0) or the value function's (1): from ``state``,
        or without one the initial state of every row (each a sequence of one step)."""
        if not state:
            zeros = torch.zeros(len(obs), self.cell_size, device=obs.device)
            return zeros, zeros
        h, c = state
        return (h, c) if self.vf_lstm is None else (h[:, tower], c[:, tower])

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        net, mask = split_mask(obs, self.mask)
        features, state_out = self._memory(self.pi_body, self.pi_lstm, net, self._tower_state(net, state, 0), prev)
        value_features = features
        if self.vf_lstm is not None:
            assert self.vf_body is not None
            value_features, vf_state = self._memory(self.vf_body, self.vf_lstm, net,
                                                    self._tower_state(net, state, 1), prev)
            state_out = [torch.stack(pair, dim=1) for pair in zip(state_out, vf_state, strict=True)]
        return self.policy_head(features, mask), self.vf_head(value_features).squeeze(-1), state_out

    def distribution(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                     seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> Distribution:
        net, mask = split_mask(obs, self.mask)
        features, _ = self._memory(self.pi_body, self.pi_lstm, net, self._tower_state(net, state, 0), prev)
        return self.distribution_of(self.policy_head(features, mask))

    def value(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
              seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> torch.Tensor:
        if self.vf_lstm is None:
            return self.outputs(obs, state, seq_lens, prev)[1]
        assert self.vf_body is not None
        net = split_mask(obs, self.mask)[0]
        features, _ = self._memory(self.vf_body, self.vf_lstm, net, self._tower_state(net, state, 1), prev)
        return self.vf_head(features).squeeze(-1)

    def numpy_twin(self) -> Twin | None:
        if not isinstance(self.pi_body, nn.Sequential) or self.custom_dist is not None:
            return None  # the CNN, and a custom distribution's draws, act in torch
        return lstm_actor_critic_twin(named_arrays(self), self.activation, self.action_space, self.mask,
                                      bool(self.prev_action_width), self.prev_reward)

    def policy_parameters(self) -> list[nn.Parameter]:
        return super().policy_parameters() + list(self.pi_lstm.parameters())

    def value_parameters(self) -> list[nn.Parameter]:
        lstm = [] if self.vf_lstm is None else list(self.vf_lstm.parameters())
        return super().value_parameters() + lstm


class LSTMQNetwork(QNetwork):
    """Q-values from an LSTM of ``lstm_cell_size`` units over the body's features (R2D2, Kapturowski
    et al., 2019), acting ε-greedily as :class:`~volley.torch_networks.q_network.QNetwork`; its state is ``[h, c]``."""

    def __init__(self, body: nn.Module, n_feat: int, action_space: gym.Space, model: ModelConfig,
                 dueling: bool, hiddens: Sequence[int] = (), mask: ObsMask | None = None) -> None:
        super().__init__(body, model.lstm_cell_size, action_space, model, dueling, hiddens, mask)
        self.cell_size = model.lstm_cell_size
        self.lstm = lstm_layer(n_feat, model.lstm_cell_size)

    def initial_state(self) -> State:
        return [np.zeros(self.cell_size, np.float32), np.zeros(self.cell_size, np.float32)]

    def _features(self, obs: torch.Tensor, sequences: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The body's features of rows ``[S·T, ...]`` as ``[S, T, n_feat]``, and the action mask's rows."""
        net, mask = split_mask(obs, self.mask)
        features = self.body(net)
        return features.reshape(sequences, len(features) // sequences, -1), mask

    def sequence_q(self, obs: torch.Tensor, state: Sequence[torch.Tensor]
                   ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Q-values ``[S·T, n]`` of ``S`` sequences of ``T`` steps (rows ``[S·T, ...]``) read from
        ``state`` (``h, c``, each ``[S, cell]``), and ``[h, c]`` after each sequence's last step."""
        h, c = state
        features, mask = self._features(obs, len(h))
        out, (h_out, c_out) = self.lstm(features, (h[None].contiguous(), c[None].contiguous()))
        q = self.hidden(out.reshape(len(obs), -1))
        head = self.q_head(q)
        if self.value_head is not None:
            head = self.value_head(q) + head - head.mean(-1, keepdim=True)
        return head if mask is None else masked(head, mask), [h_out[0], c_out[0]]

    def burn_in(self, obs: torch.Tensor, state: Sequence[torch.Tensor], lengths: torch.Tensor) -> list[torch.Tensor]:
        """``[h, c]`` after the first ``lengths[i]`` (``[S]``, 0 keeps the state) of each sequence's
        steps ``obs`` (rows ``[S·B, ...]``): R2D2's burn-in, which warms the state up."""
        h, c = state
        features, _ = self._features(obs, len(h))
        packed = nn.utils.rnn.pack_padded_sequence(features, lengths.clamp(min=1).cpu(), batch_first=True,
                                                   enforce_sorted=False)
        _, (h_out, c_out) = self.lstm(packed, (h[None].contiguous(), c[None].contiguous()))
        kept = (lengths == 0)[:, None]
        return [torch.where(kept, h, h_out[0]), torch.where(kept, c, c_out[0])]

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, n]`` with each row a sequence of one step from the initial state."""
        zeros = torch.zeros(len(obs), self.cell_size, device=obs.device)
        return self.sequence_q(obs, [zeros, zeros])[0]

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        if not state:
            zeros = torch.zeros(len(obs), self.cell_size, device=obs.device)
            state = [zeros, zeros]
        q, state_out = self.sequence_q(obs, state)
        return q, q.max(-1).values, state_out

    def numpy_twin(self) -> Twin | None:
        return None  # acts in torch
