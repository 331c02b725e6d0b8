"""volley's MLP actor-critic (PPO, PG, TRPO, IMPALA, APPO): the layout of its flat weights and its
numpy twin. Its torch network is :class:`volley.torch_networks.actor_critic.ActorCritic`, which
``tests/unit/test_network_twins.py`` holds equal to this twin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig
from volley.heads import Head, RandomStreams, action_head, masked_logits, policy_outputs
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
from volley.spaces import action_layout


def tower_shapes(obs_size: int, action_space: gym.Space, model: ModelConfig) -> Shapes:
    """A Gaussian's log-std (the network's own parameter) first, then the policy's body and, unless
    ``vf_share_layers``, the value function's."""
    _, n_log_std = policy_outputs(action_space)
    shapes: Shapes = [("log_std", (n_log_std,))] if n_log_std else []
    shapes += body_shapes("pi_body", obs_size, model.fcnet_hiddens)
    if not model.vf_share_layers:
        shapes += body_shapes("vf_body", obs_size, model.fcnet_hiddens)
    return shapes


def head_shapes(width: int, action_space: gym.Space) -> Shapes:
    """The policy's and the value function's heads on features of ``width``."""
    return linear_shapes("pi_head", width, policy_outputs(action_space)[0]) + linear_shapes("vf_head", width, 1)


def shapes(obs_size: int, action_space: gym.Space, model: ModelConfig, head_hiddens: Sequence[int] = ()) -> Shapes:
    """The tensors of the MLP actor-critic, in the order of its flat weights."""
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size
    return tower_shapes(obs_size, action_space, model) + head_shapes(width, action_space)


def actor_critic_twin(weights: Mapping[str, np.ndarray], activation: str, action_space: gym.Space,
                      mask: ObsMask | None = None) -> Twin:
    """How an MLP actor-critic with these named ``weights`` acts: actions sampled with each
    environment's own stream when ``explore``, else the most likely; the logits (or the
    Gaussian's mean) and the values. With ``mask``, the network reads the observation's other
    columns and the logits the mask forbids are set to MASKED."""
    pi_head, vf_head = NumpyMLP.of(weights, "pi_head"), NumpyMLP.of(weights, "vf_head")
    # one network whose output is [logits or mean, value in column 0]
    if "vf_body.0.weight" not in weights:  # the shared body, then both heads as one layer
        both = NumpyMLP.of(weights, "pi_body", activation) + NumpyMLP.stacked(pi_head, vf_head)
    else:  # policy and value networks stacked
        both = NumpyMLP.stacked(NumpyMLP.of(weights, "pi_body", activation) + pi_head,
                                NumpyMLP.of(weights, "vf_body", activation) + vf_head)
    head = policy_head(weights, action_space)
    draw = head.draw

    def act(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool, prev: Previous = None) -> Acting:
        both_out = both(obs)
        out = both_out[0]
        return draw(out, streams, explore), out, both_out[1, :, 0], state

    if mask is None:
        return Twin(act, head.log_prob)
    net, columns = mask.net, mask.mask

    def act_masked(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
                   prev: Previous = None) -> Acting:
        both_out = both(obs[:, net])
        out = masked_logits(both_out[0], obs[:, columns])
        return draw(out, streams, explore), out, both_out[1, :, 0], state
    return Twin(act_masked, head.log_prob)


def policy_head(weights: Mapping[str, np.ndarray], action_space: gym.Space) -> Head:
    """The action distribution of an actor-critic with these ``weights`` over ``action_space``."""
    return action_head(action_layout(action_space), weights.get("log_std"))




KIND = TwinKind(shapes, lambda weights, action_space, model, mask: actor_critic_twin(
    weights, model.fcnet_activation, action_space, mask))
