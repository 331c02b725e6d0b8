"""Acting without torch: a network's numpy twin acting from the flat weights the learner sends.

Workers act on a few rows at a time, where torch's per-operation overhead (several
microseconds an op) is most of the cost of a small MLP; and a rollout worker that only acts
has no other use for torch, whose import is about a second of every Ray worker's start. So
an MLP network acts in numpy: :func:`parameter_shapes` says where each of its
tensors sits in the flat float32 vector (the order of torch's ``parameters()``, which
:func:`volley.catalog.build_network` checks against the network it builds), and
:class:`NumpyActor` acts with them, each kind's layout and twin looked up in
:mod:`volley.networks.registry`. The Nature CNN acts in torch (:mod:`volley.torch_networks`), as
does everything that learns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig, NetworkKind
from volley.errors import VolleyError
from volley.heads import RandomStreams
from volley.network_spec import NetworkSpec
from volley.networks.numpy_layers import Acting, Previous, Shapes, State, Twin
from volley.networks.registry import twin_kind
from volley.observations import ObsMask
from volley.spaces import action_layout


class TakesFlatWeights(Protocol):
    """What :func:`load_flat_weights` needs of a torch network (a
    :class:`volley.torch_networks.policy.Policy`), named here so that this module imports no torch."""

    def set_flat_weights(self, flat: np.ndarray) -> None: ...


def zero_actions(action_space: gym.Space, n: int) -> np.ndarray:
    """``n`` actions of zeros in the flat layout of batches (:mod:`volley.spaces`): the previous
    action a recurrent network reads at an episode start."""
    layout = action_layout(action_space)
    return np.zeros((n,) if layout.kind == "discrete" else (n, layout.width), layout.dtype)


def load_flat_weights(weights: np.ndarray, loaded: np.ndarray | None, network: TakesFlatWeights | None,
                      actor: NumpyActor | None) -> np.ndarray:
    """A worker's copy of a policy takes the learner's flat ``weights``: into the torch ``network``
    once it is built (from then on it is what acts), else into the numpy ``actor``; nothing when
    they are ``loaded``, the very array loaded last (a streaming worker samples fragment after
    fragment with one). Returns the array now loaded."""
    if weights is not loaded:
        if network is not None:
            network.set_flat_weights(weights)
        elif actor is not None:
            actor.load(weights)
    return weights


def parameter_shapes(obs_size: int, action_space: gym.Space, model: ModelConfig,
                     network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = ()) -> Shapes:
    """The tensors of an MLP network over ``obs_size`` inputs, in the order of its flat weights:
    the network's own parameter first (a Gaussian's log-std, a Q-network's ε), then its layers
    in the order they were built."""
    return twin_kind(network, model).shapes(obs_size, action_space, model, head_hiddens)


class NumpyActor:
    """Acts like an MLP network with the flat weights it was last given (:meth:`load`), on numpy
    alone: what a rollout worker acts with unless something asks it for the torch network."""

    def __init__(self, obs_size: int, action_space: gym.Space, model: ModelConfig,
                 network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = (),
                 mask: ObsMask | None = None) -> None:
        """``obs_size``: the network's inputs (without an action mask's columns, ``mask``)."""
        shapes = parameter_shapes(obs_size, action_space, model, network, head_hiddens)
        ends = np.cumsum([int(np.prod(shape)) for _, shape in shapes]).tolist()
        self.size = ends[-1]
        self._slices = [(name, end - int(np.prod(shape)), end, shape)  # where each tensor sits
                        for (name, shape), end in zip(shapes, ends, strict=True)]
        kind = twin_kind(network, model)
        self.build: Callable[[Mapping[str, np.ndarray]], Twin] = lambda weights: kind.twin(
            weights, action_space, model, mask)
        self.state_shapes = kind.state_shapes(model)
        self.reads_prev = kind.reads_prev(model)
        self._twin: Twin | None = None

    @classmethod
    def of(cls, spec: NetworkSpec) -> NumpyActor | None:
        """The numpy twin of the network ``spec`` (bound to its spaces) describes; None where it has
        none (:attr:`NetworkSpec.acts_in_numpy`)."""
        if not spec.acts_in_numpy:
            return None
        observation = spec.observation
        return cls(observation.net_shape[0], spec.spaces[1], spec.model, spec.network, spec.head_hiddens,
                   observation.mask)

    def load(self, flat: np.ndarray) -> None:
        if flat.shape != (self.size,):
            raise VolleyError(f"weights of shape {flat.shape} given to a network of {self.size} weights")
        weights = {name: flat[start:end].reshape(shape) for name, start, end, shape in self._slices}
        self._twin = self.build(weights)

    def initial_state(self) -> State:
        """As :meth:`volley.torch_networks.policy.Policy.initial_state`: zeros of an LSTM's ``[h, c]``; ``[]`` for an MLP."""
        return [np.zeros(shape, np.float32) for shape in self.state_shapes]

    def act(self, obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
            prev: Previous = None) -> Acting:
        """As :meth:`volley.torch_networks.policy.Policy.act`."""
        assert self._twin is not None, "load() the weights before acting"
        return self._twin.act(obs, state, streams, explore, prev)

    def log_prob(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` ``[...]`` from the distribution inputs acting returned."""
        assert self._twin is not None, "load() the weights before acting"
        return self._twin.log_prob(dist_inputs, actions)
