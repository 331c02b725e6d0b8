"""What every numpy twin is made of: where a tensor sits in the flat weights (:data:`Shapes`),
Linear and activation layers in numpy (:class:`NumpyMLP`, two towers stacked into one), and how a
twin acts (:class:`Twin`). Torch-free: a rollout worker acting through a twin never imports torch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig
from volley.heads import LogProbFn, RandomStreams
from volley.observations import ObsMask

Shapes = list[tuple[str, tuple[int, ...]]]  # tensor names (torch's) and shapes, in flat-vector order


def body_shapes(prefix: str, n_in: int, hiddens: Sequence[int]) -> Shapes:
    """An ``nn.Sequential`` of Linear and activation layers: the Linears are its even entries."""
    shapes: Shapes = []
    for i, width in enumerate(hiddens):
        shapes += [(f"{prefix}.{2 * i}.weight", (width, n_in)), (f"{prefix}.{2 * i}.bias", (width,))]
        n_in = width
    return shapes


def linear_shapes(name: str, n_in: int, n_out: int) -> Shapes:
    return [(f"{name}.weight", (n_out, n_in)), (f"{name}.bias", (n_out,))]


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0, out=x)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray] | None] = {"tanh": np.tanh, "relu": _relu,
                                                                      "linear": None}  # None: no call at all

Layer = tuple[np.ndarray, np.ndarray] | Callable[[np.ndarray], np.ndarray]  # (Wᵀ, b) or an activation


class NumpyMLP:
    """Linear and activation layers in numpy; gives what the torch layers give, to float32 rounding."""

    def __init__(self, layers: Sequence[Layer] = ()) -> None:
        self.layers = list(layers)

    @classmethod
    def of(cls, weights: Mapping[str, np.ndarray], prefix: str, activation: str = "") -> NumpyMLP:
        """The layer ``prefix`` (``pi_head``), or with ``activation`` the Sequential body ``prefix``
        (``pi_body``: every Linear of it, each followed by the activation)."""
        if not activation:
            return cls([(np.ascontiguousarray(weights[f"{prefix}.weight"].T), weights[f"{prefix}.bias"])])
        layers: list[Layer] = []
        act = ACTIVATIONS[activation]
        index = 0
        while f"{prefix}.{index}.weight" in weights:  # Linear, activation, Linear, ...
            layers.append((np.ascontiguousarray(weights[f"{prefix}.{index}.weight"].T), weights[f"{prefix}.{index}.bias"]))
            layers += [act] if act is not None else []
            index += 2
        return cls(layers)

    def __add__(self, other: NumpyMLP) -> NumpyMLP:
        """This network, then ``other`` on its output."""
        return NumpyMLP(self.layers + other.layers)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for i, layer in enumerate(self.layers):
            if isinstance(layer, tuple):
                x = (_input_product(x, layer[0]) if i == 0 else x @ layer[0]) + layer[1]
            else:
                x = layer(x)
        return x

    @staticmethod
    def stacked(left: NumpyMLP, right: NumpyMLP) -> NumpyMLP:
        """One network computing ``left`` and ``right`` on the same input, output ``[2, B, width]``:
        each pair of Linear weights stacked as ``[2, n_in, n_out]``, so numpy's batched matmul
        runs both in one call, and a policy and its value function act in half the numpy
        calls of two networks (≈ 7 µs a step saved on two 64x64 bodies). Stacked, not
        block-diagonal: a block-diagonal product does twice the multiply-adds (16 rows through
        two 64x64 layers: 6.4 µs, stacked 3.3). The narrower last layer is padded with zero
        columns. Both must be the same kinds of layer in the same order."""
        fused = NumpyMLP()
        width = max((a[0].shape[-1] for a in left.layers[-1:] + right.layers[-1:] if isinstance(a, tuple)),
                    default=0)  # 0: they end in an activation, and no layer is padded
        for i, (a, b) in enumerate(zip(left.layers, right.layers, strict=True)):
            if not isinstance(a, tuple) or not isinstance(b, tuple):
                assert a is b, "stacked needs the same activations in the same places"
                fused.layers.append(a)
                continue
            if i == len(left.layers) - 1:
                a, b = (_padded(layer, width) for layer in (a, b))
            fused.layers.append((np.stack([a[0], b[0]]), np.stack([a[1], b[1]])[:, None, :]))
        return fused


SPARSE_MIN_INPUTS = 1024  # the input width from which the first layer looks for zeros


def _input_product(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``x @ weight`` for the network's input ``x`` ``[B, n]``; for a wide input that is mostly
    zeros (a frame difference, one-hot codes), over its nonzero columns alone. A product with
    a 6,400x200 matrix reads all 5 MB of it at every step; a Pong frame difference has some
    50 nonzero pixels, whose rows take a tenth of the time."""
    if x.shape[-1] >= SPARSE_MIN_INPUTS:
        used = np.flatnonzero(x.any(axis=0))
        if len(used) * 8 < x.shape[-1]:
            return x[:, used] @ weight[..., used, :]
    return x @ weight


def _padded(layer: tuple[np.ndarray, np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """A Linear layer ``(Wᵀ, b)`` with zero output columns added up to ``width`` (not ``np.pad``: a
    worker rebuilds its network with every new set of weights, and each ``np.pad`` costs 10 µs)."""
    weight, bias = layer
    padded_weight, padded_bias = np.zeros((len(weight), width), weight.dtype), np.zeros(width, bias.dtype)
    padded_weight[:, :weight.shape[1]], padded_bias[:len(bias)] = weight, bias
    return padded_weight, padded_bias


# A recurrent network's state for a batch of environments: one array [B, ...] per tensor of its
# state; [] for a feed-forward network. See volley.torch_networks.policy.Policy.
State = list[np.ndarray]
# What a recurrent network with lstm_use_prev_action / lstm_use_prev_reward also reads: each
# environment's previous action [B, ...] and reward [B] (zeros at an episode start); None elsewhere
Previous = tuple[np.ndarray, np.ndarray] | None
# actions [B, ...], the inputs of their distribution [B, ...] (logits, a Gaussian's mean,
# Q-values), values [B] and the state after this step. Log-probabilities are not computed per
# step: a worker computes a whole fragment's at once from the stacked inputs (``log_prob``).
Acting = tuple[np.ndarray, np.ndarray, np.ndarray, State]
ActFn = Callable[[np.ndarray, State, RandomStreams, bool, Previous], Acting]  # (obs, state, streams, explore, prev)


class Twin(NamedTuple):
    """How a network acts, and the log-probabilities of its actions from what ``act`` returned."""

    act: ActFn
    log_prob: LogProbFn


class TwinKind(NamedTuple):
    """One network kind's numpy side, registered once (:mod:`volley.networks.registry`): the tensors
    of its flat weights over ``obs_size`` inputs, in torch's order (``shapes``), and how it acts
    from them (``twin``); for a recurrent kind, one environment's state and whether it reads the
    previous action and reward."""

    shapes: Callable[[int, gym.Space, ModelConfig, Sequence[int]], Shapes]
    twin: Callable[[Mapping[str, np.ndarray], gym.Space, ModelConfig, ObsMask | None], Twin]
    state_shapes: Callable[[ModelConfig], list[tuple[int, ...]]] = lambda model: []
    reads_prev: Callable[[ModelConfig], bool] = lambda model: False
