"""SAC's squashed-Gaussian policy: the layout of its flat weights and its numpy twin. Its torch
network is :class:`volley.torch_networks.squashed_gaussian.SquashedGaussianActor`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig
from volley.heads import RandomStreams, squashed_gaussian_head, squashed_outputs
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


def shapes(obs_size: int, action_space: gym.Space, model: ModelConfig, head_hiddens: Sequence[int] = ()) -> Shapes:
    """``random_actions`` (the network's own parameter) first, then the body and the head."""
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size
    return [("random_actions", ()), *body_shapes("body", obs_size, model.fcnet_hiddens),
            *linear_shapes("head", width, 2 * squashed_outputs(action_space))]


def squashed_gaussian_twin(weights: Mapping[str, np.ndarray], activation: str) -> Twin:
    """How an MLP squashed-Gaussian policy (SAC's actor) with these named ``weights`` acts: its head
    gives the Gaussian's mean and log-std ``[B, 2d]``, drawn from by :func:`squashed_gaussian_head`,
    uniformly while ``random_actions`` (among the weights, set by the learner before learning
    starts) is 1. It has no values (zeros) and no recurrent state (passed through)."""
    net = NumpyMLP.of(weights, "body", activation) + NumpyMLP.of(weights, "head")
    head = squashed_gaussian_head(bool(weights["random_actions"] > 0.5))
    draw = head.draw

    def act(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool, prev: Previous = None) -> Acting:
        out = net(obs)
        return draw(out, streams, explore), out, np.zeros(len(out), np.float32), state
    return Twin(act, head.log_prob)


KIND = TwinKind(shapes, lambda weights, action_space, model, mask: squashed_gaussian_twin(
    weights, model.fcnet_activation))
