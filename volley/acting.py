"""Acting without torch: an MLP network's forward pass in numpy, from the flat weights the learner
sends, and its action draw through a numpy head (:mod:`volley.heads`).

Workers act on a few rows at a time, where torch's per-operation overhead (several
microseconds an op) is most of the cost of a small MLP; and a rollout worker that only acts
has no other use for torch, whose import is about a second of every Ray worker's start. So
an MLP network acts here, on numpy alone: :func:`parameter_shapes` says where each of its
tensors sits in the flat float32 vector (the order of torch's ``parameters()``, which
:func:`volley.models.build_policy` checks against the network it builds), and
:class:`NumpyActor` acts with them. The Nature CNN acts in torch (:mod:`volley.models`), as
does everything that learns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig, NetworkKind
from volley.errors import ConfigError, VolleyError
from volley.heads import (
    Head,
    LogProbFn,
    RandomStreams,
    action_head,
    epsilon_greedy_head,
    masked_logits,
    policy_outputs,
    q_outputs,
    squashed_gaussian_head,
    squashed_outputs,
)
from volley.observations import ObsMask
from volley.policy_spec import PolicySpec
from volley.spaces import action_layout

# -- where the weights sit in the flat vector ------------------------------------------------

Shapes = list[tuple[str, tuple[int, ...]]]  # tensor names (torch's) and shapes, in flat-vector order


def _body_shapes(prefix: str, n_in: int, hiddens: Sequence[int]) -> Shapes:
    """An ``nn.Sequential`` of Linear and activation layers: the Linears are its even entries."""
    shapes: Shapes = []
    for i, width in enumerate(hiddens):
        shapes += [(f"{prefix}.{2 * i}.weight", (width, n_in)), (f"{prefix}.{2 * i}.bias", (width,))]
        n_in = width
    return shapes


def _linear_shapes(name: str, n_in: int, n_out: int) -> Shapes:
    return [(f"{name}.weight", (n_out, n_in)), (f"{name}.bias", (n_out,))]


def _lstm_shapes(name: str, n_in: int, cell: int) -> Shapes:
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


def zero_actions(action_space: gym.Space, n: int) -> np.ndarray:
    """``n`` actions of zeros in the flat layout of batches (:mod:`volley.spaces`): the previous
    action a recurrent network reads at an episode start."""
    layout = action_layout(action_space)
    return np.zeros((n,) if layout.kind == "discrete" else (n, layout.width), layout.dtype)


def parameter_shapes(obs_size: int, action_space: gym.Space, model: ModelConfig,
                     network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = ()) -> Shapes:
    """The tensors of an MLP network over ``obs_size`` inputs, in the order of its flat weights:
    the network's own parameter first (a Gaussian's log-std, a Q-network's ε), then its layers
    in the order they were built."""
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size
    if network == "actor_critic":
        n_out, n_log_std = policy_outputs(action_space)
        shapes: Shapes = [("log_std", (n_log_std,))] if n_log_std else []
        shapes += _body_shapes("pi_body", obs_size, model.fcnet_hiddens)
        if not model.vf_share_layers:
            shapes += _body_shapes("vf_body", obs_size, model.fcnet_hiddens)
        if model.use_lstm:  # volley.recurrent: an LSTM after each body
            n_in = width + (previous_width(action_space) if model.lstm_use_prev_action else 0) \
                + int(model.lstm_use_prev_reward)
            for tower in ("pi", "vf")[:1 if model.vf_share_layers else 2]:
                shapes += _lstm_shapes(f"{tower}_lstm", n_in, model.lstm_cell_size)
            width = model.lstm_cell_size
        return shapes + _linear_shapes("pi_head", width, n_out) + _linear_shapes("vf_head", width, 1)
    if network == "squashed_gaussian":
        n_out = squashed_outputs(action_space)
        return [("random_actions", ()), *_body_shapes("body", obs_size, model.fcnet_hiddens),
                *_linear_shapes("head", width, 2 * n_out)]
    n_actions = q_outputs(action_space)
    shapes = [("epsilon", ()), *_body_shapes("body", obs_size, model.fcnet_hiddens),
              *_body_shapes("hidden", width, head_hiddens)]
    width = head_hiddens[-1] if head_hiddens else width
    shapes += _linear_shapes("q_head", width, n_actions)
    return shapes + (_linear_shapes("value_head", width, 1) if network == "dueling_q" else [])


# -- the forward pass ------------------------------------------------------------------------


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
# state; [] for a feed-forward network. See volley.models.Policy.
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
    head = _policy_head(weights, action_space)
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


def _policy_head(weights: Mapping[str, np.ndarray], action_space: gym.Space) -> Head:
    """The action distribution of an actor-critic with these ``weights`` over ``action_space``."""
    return action_head(action_layout(action_space), weights.get("log_std"))


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
    """How an MLP actor-critic with an LSTM on its body (``volley.recurrent``) acts: as
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
    head = _policy_head(weights, action_space)
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
        activation = model.fcnet_activation
        self.build: Callable[[Mapping[str, np.ndarray]], Twin] = (
            (lambda weights: actor_critic_twin(weights, activation, action_space, mask)) if network == "actor_critic"
            else (lambda weights: squashed_gaussian_twin(weights, activation)) if network == "squashed_gaussian"
            else (lambda weights: q_network_twin(weights, activation, mask)))
        self.state_shapes: list[tuple[int, ...]] = []
        self.reads_prev = False
        if model.use_lstm:
            prev_action, prev_reward = model.lstm_use_prev_action, model.lstm_use_prev_reward
            self.build = lambda weights: lstm_actor_critic_twin(weights, activation, action_space, mask,
                                                                prev_action, prev_reward)
            self.state_shapes = [(model.lstm_cell_size,) if model.vf_share_layers else (2, model.lstm_cell_size)] * 2
            self.reads_prev = prev_action or prev_reward
        self._twin: Twin | None = None

    @classmethod
    def of(cls, spec: PolicySpec) -> NumpyActor | None:
        """The numpy twin of the network ``spec`` (bound to its spaces) describes; None where it has
        none (:attr:`PolicySpec.acts_in_numpy`)."""
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
        """As :meth:`volley.models.Policy.initial_state`: zeros of an LSTM's ``[h, c]``; ``[]`` for an MLP."""
        return [np.zeros(shape, np.float32) for shape in self.state_shapes]

    def act(self, obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
            prev: Previous = None) -> Acting:
        """As :meth:`volley.models.Policy.act`."""
        assert self._twin is not None, "load() the weights before acting"
        return self._twin.act(obs, state, streams, explore, prev)

    def log_prob(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` ``[...]`` from the distribution inputs acting returned."""
        assert self._twin is not None, "load() the weights before acting"
        return self._twin.log_prob(dist_inputs, actions)
