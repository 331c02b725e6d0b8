"""volley's MLP Q-network (DQN, Ape-X; dueling, and with head layers): the layout of its flat
weights and its numpy twin. Its torch network is :class:`volley.torch_networks.q_network.QNetwork`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig
from volley.heads import RandomStreams, epsilon_greedy_head, masked_logits, q_outputs
from volley.networks.numpy_layers import (
    Acting,
    NumpyMLP,
    Previous,
    Shapes,
    State,
    Twin,
    TwinKind,
    body_shapes,
    linear_shapes,
)
from volley.observations import ObsMask


def shapes(obs_size: int, action_space: gym.Space, model: ModelConfig, head_hiddens: Sequence[int] = (),
           dueling: bool = False) -> Shapes:
    """ε (the network's own parameter) first, then the body, the head layers, the Q head and a
    dueling network's value head."""
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size
    layers = [("epsilon", ()), *body_shapes("body", obs_size, model.fcnet_hiddens),
              *body_shapes("hidden", width, head_hiddens)]
    width = head_hiddens[-1] if head_hiddens else width
    layers += linear_shapes("q_head", width, q_outputs(action_space))
    return layers + (linear_shapes("value_head", width, 1) if dueling else [])


def q_network_twin(weights: Mapping[str, np.ndarray], activation: str, mask: ObsMask | None = None) -> Twin:
    """How an MLP Q-network with these named ``weights`` acts: ε-greedy (ε among the weights);
    the Q-values and the greedy values ``max_a Q``; dueling when it has a ``value_head``. With
    ``mask``, the Q-values of forbidden actions are MASKED, so neither the greedy choice nor ε's
    draw takes them."""
    body = NumpyMLP.of(weights, "body", activation) + NumpyMLP.of(weights, "hidden", activation)
    q_head = NumpyMLP.of(weights, "q_head")
    value_head = NumpyMLP.of(weights, "value_head") if "value_head.weight" in weights else None
    head = epsilon_greedy_head(float(weights["epsilon"]), masked=mask is not None)
    draw = head.draw
    net, columns = (mask.net, mask.mask) if mask is not None else (slice(None), None)

    def act(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool, prev: Previous = None) -> Acting:
        features = body(obs if columns is None else obs[:, net])
        q = q_head(features)
        if value_head is not None:
            q = value_head(features) + q - q.mean(-1, keepdims=True)
        if columns is not None:
            q = masked_logits(q, obs[:, columns])
        return draw(q, streams, explore), q, q.max(-1), state
    return Twin(act, head.log_prob)


def twin(weights: Mapping[str, np.ndarray], action_space: gym.Space, model: ModelConfig,
         mask: ObsMask | None) -> Twin:
    return q_network_twin(weights, model.fcnet_activation, mask)


KIND = TwinKind(shapes, twin)
DUELING = TwinKind(lambda obs_size, action_space, model, head_hiddens: shapes(
    obs_size, action_space, model, head_hiddens, dueling=True), twin)
