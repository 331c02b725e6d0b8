"""volley's actor-critic with an LSTM on each body (``use_lstm``): the layout of its flat weights
and its numpy twin, one LSTM step per call. Its torch network is
:class:`volley.torch_networks.lstm.LSTMActorCritic`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig
from volley.errors import ConfigError
from volley.heads import RandomStreams, masked_logits
from volley.networks.actor_critic import head_shapes, policy_head, tower_shapes
from volley.networks.numpy_layers import Acting, NumpyMLP, Previous, Shapes, State, Twin, TwinKind
from volley.observations import ObsMask


def lstm_shapes(name: str, n_in: int, cell: int) -> Shapes:
    """torch's ``nn.LSTM`` of one layer: input and hidden weights of the four gates (i, f, g, o)."""
    return [(f"{name}.weight_ih_l0", (4 * cell, n_in)), (f"{name}.weight_hh_l0", (4 * cell, cell)),
            (f"{name}.bias_ih_l0", (4 * cell,)), (f"{name}.bias_hh_l0", (4 * cell,))]


def previous_width(action_space: gym.Space) -> int:
    """Inputs a previous action adds (``lstm_use_prev_action``): one per action of a Discrete space
    (one-hot), the values of a float Box; a ConfigError for other spaces."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.Box) and action_space.dtype.kind == "f":
        return int(np.prod(action_space.shape))
    raise ConfigError(f"model.lstm_use_prev_action=True with action space {action_space}: volley's LSTM reads "
                      "the previous action of a Discrete (one-hot) or float Box action space only")


def shapes(obs_size: int, action_space: gym.Space, model: ModelConfig, head_hiddens: Sequence[int] = ()) -> Shapes:
    """The tensors of the actor-critic with its LSTMs, in the order of its flat weights."""
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size
    n_in = width + (previous_width(action_space) if model.lstm_use_prev_action else 0) \
        + int(model.lstm_use_prev_reward)
    memory = [shape for tower in ("pi", "vf")[:1 if model.vf_share_layers else 2]
              for shape in lstm_shapes(f"{tower}_lstm", n_in, model.lstm_cell_size)]
    return tower_shapes(obs_size, action_space, model) + memory + head_shapes(model.lstm_cell_size, action_space)


class NumpyLSTM:
    """One step of torch's one-layer ``nn.LSTM`` in numpy, for one tower (``[N, ...]``) or two
    stacked (``[2, N, ...]``, each with its own weights, as :meth:`NumpyMLP.stacked`).

    The input and hidden weights are one matrix (one product of ``[x, h]``), and the rows of the
    input, forget and output gates are halved, so that one ``tanh`` of all four gates gives
    ``tanh(z)`` for the cell's candidate and ``σ(z) = (1 + tanh(z/2)) / 2`` for the others: a
    step is ten numpy calls (the halving is exact, so it acts as torch's LSTM to float32 rounding)."""

    def __init__(self, weights: Mapping[str, np.ndarray], towers: Sequence[str]) -> None:
        def stacked(key: str) -> np.ndarray:
            return np.stack([weights[f"{tower}.{key}"] for tower in towers])  # [towers, ...]
        self.cell = stacked("weight_hh_l0").shape[-1]
        half = np.full(4 * self.cell, 0.5, np.float32)
        half[2 * self.cell:3 * self.cell] = 1.0  # gates i, f, g, o in torch's order: g keeps its scale
        weight = np.concatenate([stacked("weight_ih_l0"), stacked("weight_hh_l0")], axis=-1)  # [towers, 4H, in + H]
        self.weight = np.ascontiguousarray(np.swapaxes(weight * half[:, None], -1, -2))
        self.bias = ((stacked("bias_ih_l0") + stacked("bias_hh_l0")) * half)[:, None, :]
        if len(towers) == 1:
            self.weight, self.bias = self.weight[0], self.bias[0, 0]

    def __call__(self, x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(h', c')`` after input ``x`` from ``(h, c)`` (``x`` ``[N, in]`` goes to both towers)."""
        if x.ndim < h.ndim:
            x = np.broadcast_to(x, (*h.shape[:-1], x.shape[-1]))
        gates = np.tanh(np.concatenate([x, h], axis=-1) @ self.weight + self.bias)
        sig = gates * 0.5 + 0.5  # σ of the i, f and o gates
        cell = self.cell
        c_out = sig[..., cell:2 * cell] * c + sig[..., :cell] * gates[..., 2 * cell:3 * cell]
        return sig[..., 3 * cell:] * np.tanh(c_out), c_out


def lstm_actor_critic_twin(weights: Mapping[str, np.ndarray], activation: str, action_space: gym.Space,
                           mask: ObsMask | None = None, prev_action: bool = False,
                           prev_reward: bool = False) -> Twin:
    """How an MLP actor-critic with an LSTM on its body (``volley.torch_networks.lstm``) acts: as
    :func:`actor_critic_twin` (``mask`` too), one LSTM step per call from the environments' state
    ``[h, c]`` (each ``[N, cell]``, or ``[N, 2, cell]`` with the value function's own LSTM: the two
    towers stacked, so each layer of both is one numpy call), the LSTM also reading the previous
    action (one-hot if Discrete) and reward where ``prev_action`` / ``prev_reward``."""
    separate = "vf_lstm.weight_ih_l0" in weights
    body = NumpyMLP.of(weights, "pi_body", activation)
    if separate:  # [2, N, width]: each tower's body; each LSTM and head then reads its own
        body = NumpyMLP.stacked(body, NumpyMLP.of(weights, "vf_body", activation))
    lstm = NumpyLSTM(weights, ["pi_lstm", "vf_lstm"] if separate else ["pi_lstm"])
    heads = NumpyMLP.stacked(NumpyMLP.of(weights, "pi_head"), NumpyMLP.of(weights, "vf_head"))
    one_hot = np.eye(previous_width(action_space), dtype=np.float32) \
        if prev_action and isinstance(action_space, gym.spaces.Discrete) else None
    head = policy_head(weights, action_space)
    draw = head.draw
    net, columns = (mask.net, mask.mask) if mask is not None else (slice(None), None)

    def act(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool, prev: Previous = None) -> Acting:
        features = body(obs if columns is None else obs[:, net])
        if prev_action or prev_reward:
            assert prev is not None, "this network reads the previous actions and rewards"
            actions, rewards = prev
            extra = [one_hot[actions] if one_hot is not None else actions.reshape(len(obs), -1)] if prev_action else []
            extra += [rewards.reshape(len(obs), 1)] if prev_reward else []
            more = np.concatenate(extra, axis=1, dtype=np.float32)
            features = np.concatenate([features, np.broadcast_to(more, (*features.shape[:-1], more.shape[1]))], -1)
        if separate:  # the environments' states are [N, 2, cell]: the towers' [2, N, cell] as views
            h, c = lstm(features, state[0].swapaxes(0, 1), state[1].swapaxes(0, 1))
            state_out = [h.swapaxes(0, 1), c.swapaxes(0, 1)]
        else:
            h, c = lstm(features, state[0], state[1])
            state_out = [h, c]
        out = heads(h)  # [2, N, width]: the policy's outputs, the value in column 0
        logits = out[0] if columns is None else masked_logits(out[0], obs[:, columns])
        return draw(logits, streams, explore), logits, out[1, :, 0], state_out
    return Twin(act, head.log_prob)




KIND = TwinKind(
    shapes,
    lambda weights, action_space, model, mask: lstm_actor_critic_twin(
        weights, model.fcnet_activation, action_space, mask, model.lstm_use_prev_action, model.lstm_use_prev_reward),
    state_shapes=lambda model: [(model.lstm_cell_size,) if model.vf_share_layers else (2, model.lstm_cell_size)] * 2,
    reads_prev=lambda model: model.lstm_use_prev_action or model.lstm_use_prev_reward)
