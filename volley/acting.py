"""Acting without torch: observation preprocessing, and an MLP network's forward pass and action
draw in numpy, from the flat weights the learner sends.

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
from typing import Any, NamedTuple, Protocol

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig, NetworkKind
from volley.errors import ConfigError, VolleyError
from volley.spaces import MASKED, ActionLayout, action_layout

# -- observations --------------------------------------------------------------------------


def is_image_space(space: gym.Space) -> bool:
    """uint8 boxes of rank 3 (one image) or 4 (stacked images) go to the CNN."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (3, 4)


def flat_size(space: gym.Space) -> int:
    """The width of a flattened observation of ``space`` (Discrete one-hot)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(space.nvec.sum())
    if isinstance(space, gym.spaces.Dict):
        return sum(flat_size(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(flat_size(s) for s in space.spaces)
    raise VolleyError(f"observation space {space} is not supported: volley takes Box, Discrete, "
                      "MultiDiscrete, MultiBinary, and Dict or Tuple of those")


def _flatten_batch(space: gym.Space, obs: object, n: int) -> np.ndarray:
    """Batched observations ``[n, ...]`` of ``space`` as float32 ``[n, flat_size]``."""
    if isinstance(space, gym.spaces.Discrete):
        one_hot = np.zeros((n, int(space.n)), np.float32)
        one_hot[np.arange(n), np.asarray(obs, np.int64).reshape(n) - int(space.start)] = 1.0
        return one_hot
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        return np.asarray(obs, np.float32).reshape(n, -1)
    if isinstance(space, gym.spaces.MultiDiscrete):  # each element one-hot, as RLlib's preprocessor
        offsets = np.cumsum(space.nvec.ravel()) - space.nvec.ravel()
        one_hot = np.zeros((n, int(space.nvec.sum())), np.float32)
        indices = (np.asarray(obs, np.int64).reshape(n, -1) - np.asarray(space.start).ravel()) + offsets
        np.put_along_axis(one_hot, indices, 1.0, 1)
        return one_hot
    if isinstance(space, gym.spaces.Dict):
        assert isinstance(obs, dict)
        return np.concatenate([_flatten_batch(s, obs[k], n) for k, s in space.spaces.items()], axis=1)
    assert isinstance(space, gym.spaces.Tuple) and isinstance(obs, tuple)
    return np.concatenate([_flatten_batch(s, o, n) for s, o in zip(space.spaces, obs, strict=True)],
                          axis=1)


class ObsMask(NamedTuple):
    """Where an observation's action mask sits among its flat columns, and which columns the network
    reads: the others for volley's own networks, all of them for a custom model (which gets the
    mask too, as in RLlib)."""

    mask: slice
    net: slice | np.ndarray


def find_action_mask(obs_space: gym.Space, action_space: gym.Space, key: str) -> ObsMask | None:
    """Where the action mask ``key`` (RLlib's ``action_mask_key``) sits in a Dict observation, or None
    when the observation has none; a ConfigError naming the mask's space if it cannot mask
    ``action_space`` (one entry per logit: :meth:`volley.spaces.ActionLayout.mask_width`)."""
    if not isinstance(obs_space, gym.spaces.Dict) or key not in obs_space.spaces:
        return None
    mask_space = obs_space.spaces[key]
    width = action_layout(action_space).mask_width()
    if not isinstance(mask_space, gym.spaces.Box | gym.spaces.MultiBinary) or mask_space.shape != (width,):
        raise ConfigError(f"observation key {key!r} (the action mask, action_mask_key) is {mask_space}: the mask "
                          f"of {action_space} is a Box or MultiBinary of shape ({width},), one 0/1 entry per "
                          f"{'action' if isinstance(action_space, gym.spaces.Discrete) else 'choice of each part'}")
    start = 0
    for name, subspace in obs_space.spaces.items():
        if name == key:
            break
        start += flat_size(subspace)
    stop, total = start + width, flat_size(obs_space)
    net = slice(stop, total) if start == 0 else slice(0, start) if stop == total else np.r_[0:start, stop:total]
    return ObsMask(slice(start, stop), net)


class ObsPreprocessor:
    """Turns a batch of raw observations into the array the network reads.

    Images stay uint8 (the CNN scales them); everything else becomes a flat float32
    vector: Discrete one-hot (MultiDiscrete each element one-hot), Dict and Tuple concatenated in
    key order. An action mask in a
    Dict observation (``mask``) stays among the columns, so it travels with the batch (to the
    learner, into DQN's replay as ``next_obs``); ``net_shape`` is what volley's own network reads.
    """

    def __init__(self, space: gym.Space, mask: ObsMask | None = None) -> None:
        self.space = space
        self.is_image = is_image_space(space)
        self.shape: tuple[int, ...] = space.shape if self.is_image else (flat_size(space),)  # type: ignore[assignment]
        self.mask = mask
        width = 0 if mask is None else mask.mask.stop - mask.mask.start
        self.net_shape = self.shape if mask is None else (self.shape[0] - width,)

    def __call__(self, obs: object, n: int) -> np.ndarray:
        if self.is_image:
            return np.asarray(obs)
        return _flatten_batch(self.space, obs, n)


# -- action spaces and draws -----------------------------------------------------------------


def policy_outputs(action_space: gym.Space) -> tuple[int, int]:
    """Outputs of volley's policy head for ``action_space`` (its distribution's inputs, a float Box's
    means without log-stds) and the size of the learned log-std beside them (0 without a float
    Box); a ConfigError naming a space volley cannot take (:mod:`volley.spaces`)."""
    layout = action_layout(action_space)
    return layout.inputs(log_stds=False).width, layout.dims


def q_outputs(action_space: gym.Space) -> int:
    """Q-values of a Q-network for ``action_space``; a VolleyError unless it is Discrete."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise VolleyError(f"action space {action_space} is not supported by Q-learning: "
                          "DQN takes Discrete actions")
    return int(action_space.n)


def squashed_outputs(action_space: gym.Space) -> int:
    """Action dimensions of a tanh-squashed Gaussian policy (SAC) for ``action_space``; a
    ConfigError naming the space unless it is a one-dimensional float Box with finite bounds."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1 \
            or action_space.dtype.kind != "f":
        raise ConfigError(f"action space {action_space} is not supported by SAC: it takes a one-dimensional "
                          "float Box (continuous actions); for Discrete and composite actions use ppo "
                          "(dqn for Discrete)")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ConfigError(f"action space {action_space} has infinite bounds: SAC squashes its actions with "
                          "tanh into the bounds, so they must be finite (wrap the environment with "
                          "gymnasium.wrappers.ClipAction on a bounded Box)")
    return int(action_space.shape[0])


class RandomStreams(Protocol):
    """One random stream per environment (see RolloutWorker), and for a custom action distribution,
    which draws in torch, the state of one torch generator for them all (None before the first
    draw: it starts from ``torch_seed``)."""

    torch_seed: int
    torch_state: Any

    def gumbel(self, n: int) -> np.ndarray: ...  # float64 [N, n]
    def normal(self, dim: int) -> np.ndarray: ...  # float32 [N, dim]


def gumbel_max(log_weights: np.ndarray, streams: RandomStreams) -> np.ndarray:
    """One categorical draw per row of unnormalised log-probabilities ``[B, n]``: the argmax of
    each row plus its environment's Gumbel noise (Gumbel, 1954; the "Gumbel-max trick"). Two
    numpy calls a step: no softmax, no cumulative sum, and the noise comes in blocks."""
    return (log_weights + streams.gumbel(log_weights.shape[-1])).argmax(-1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def pick(values: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``values[..., a]`` for each action ``a`` of ``actions`` ``[...]`` (``values`` ``[..., n]``)."""
    return np.take_along_axis(values, actions[..., None].astype(np.intp), -1)[..., 0]


# A squashed Gaussian's log-std is clipped to this range (SB3's and RLlib's bounds): e^-20 keeps
# the log-density finite, e^2 keeps exploration from saturating tanh at every step
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def uniform_actions(streams: RandomStreams, dim: int) -> np.ndarray:
    """Actions ``[N, dim]`` uniform in (-1, 1), each environment's from its own stream (SAC's warm-up,
    as SB3 acts before learning starts): ``exp(-exp(-g))`` is uniform on (0, 1) when ``g`` is
    Gumbel-distributed (its distribution function), so the draw reuses the Gumbel blocks."""
    return (2.0 * np.exp(-np.exp(-streams.gumbel(dim))) - 1.0).astype(np.float32)


def squashed_gaussian_logp(mean: np.ndarray, log_std: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``log π(a)`` ``[...]`` of squashed actions ``a = tanh(u)``, ``u ~ N(mean, std)``: the Gaussian's
    density of ``u = atanh(a)`` less ``Σ log(1 − a²)``, tanh's log-determinant (Haarnoja et al.,
    2018, appendix C). Actions at ±1 (tanh rounds there in float32) are taken 1e-6 inside."""
    a = np.clip(actions.astype(np.float64), -1 + 1e-6, 1 - 1e-6)
    z = (np.arctanh(a) - mean) / np.exp(log_std)
    gaussian = -0.5 * z * z - log_std - 0.5 * np.log(2 * np.pi)
    return (gaussian - np.log1p(-a * a)).sum(-1).astype(np.float32)


def epsilon_greedy_logp(q_values: np.ndarray, epsilon: float, masked: bool = False) -> np.ndarray:
    """Log-probabilities ``[..., n]`` of ε-greedy acting: ``ε/n + (1 - ε)·[a = argmax Q]``. With
    ``masked``, the actions whose Q-value is :data:`~volley.spaces.MASKED` are not drawn: ``ε`` is
    shared by the ``m`` allowed ones (``ε/m``) and the masked ones keep MASKED."""
    n = q_values.shape[-1]
    greedy = q_values.argmax(-1)[..., None]
    tiny = np.finfo(q_values.dtype).tiny  # a log-probability finite at ε = 0
    if not masked:
        probs = np.full(q_values.shape, epsilon / n, q_values.dtype)
        np.put_along_axis(probs, greedy, epsilon / n + 1 - epsilon, -1)
        return np.log(np.maximum(probs, tiny))
    allowed = q_values > MASKED
    probs = np.where(allowed, epsilon / np.maximum(allowed.sum(-1, keepdims=True), 1), 0).astype(q_values.dtype)
    np.put_along_axis(probs, greedy, np.take_along_axis(probs, greedy, -1) + (1 - epsilon), -1)
    return np.where(allowed, np.log(np.maximum(probs, tiny)), MASKED)


def masked_logits(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``logits`` ``[B, n]`` with those ``mask`` ``[B, n]`` forbids (0) at :data:`~volley.spaces.MASKED`."""
    return np.where(mask != 0, logits, MASKED)


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
LogProbFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (distribution inputs, actions) -> log π(a)


class Twin(NamedTuple):
    """How a network acts, and the log-probabilities of its actions from what ``act`` returned."""

    act: ActFn
    log_prob: LogProbFn


DrawFn = Callable[[np.ndarray, RandomStreams, bool], np.ndarray]  # (dist inputs, streams, explore) -> actions


class Head(NamedTuple):
    """An action distribution in numpy, from its inputs ``[B, ...]``: each environment's draw (or,
    without ``explore``, the most likely action) and a fragment's log-probabilities. Every network
    acts through one, after its forward pass in numpy or in torch: sampling is one function."""

    draw: DrawFn
    log_prob: LogProbFn


def categorical_head() -> Head:
    """Categorical over logits ``[..., n]``: Gumbel-max draws, log-softmax log-probabilities."""
    def draw(logits: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        return gumbel_max(logits, streams) if explore else logits.argmax(-1)
    return Head(draw, lambda logits, actions: pick(log_softmax(logits), actions))


def gaussian_head(log_std: np.ndarray | None) -> Head:
    """Diagonal Gaussian: inputs are the means ``[..., d]`` and ``log_std`` ``[d]`` is fixed (volley's
    own networks), or with ``log_std`` None the inputs hold the means then the log-stds ``[..., 2d]``
    (RLlib's DiagGaussian, what a custom model outputs)."""
    if log_std is None:
        def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
            mean, log_stds = np.split(inputs, 2, axis=-1)
            return mean + np.exp(log_stds) * streams.normal(mean.shape[-1]) if explore else mean

        def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
            mean, log_stds = np.split(inputs, 2, axis=-1)
            z = (actions - mean) / np.exp(log_stds)
            return (-0.5 * z * z - log_stds).sum(-1) - np.float32(0.5 * mean.shape[-1] * np.log(2 * np.pi))
        return Head(draw, log_prob)
    log_std = log_std.astype(np.float64)
    std = np.exp(log_std).astype(np.float32)
    log_norm = np.float32(-(log_std.sum() + 0.5 * len(log_std) * np.log(2 * np.pi)))

    def draw_fixed(mean: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        return mean + std * streams.normal(len(std)) if explore else mean

    def log_prob_fixed(mean: np.ndarray, actions: np.ndarray) -> np.ndarray:
        z = (actions - mean) / std  # log N(a; mean, std) = -½‖z‖² - Σ log std - ½·d·log 2π
        return log_norm - np.float32(0.5) * (z * z).sum(-1)
    return Head(draw_fixed, log_prob_fixed)


def epsilon_greedy_head(epsilon: float, masked: bool = False) -> Head:
    """ε-greedy over Q-values ``[..., n]``: a uniformly random action with probability ε (drawn as a
    categorical, each environment's own noise), else the greedy one, which is also the mode. With
    ``masked``, Q-values at :data:`~volley.spaces.MASKED` are never drawn (see :func:`epsilon_greedy_logp`)."""
    def draw(q: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        return gumbel_max(epsilon_greedy_logp(q, epsilon, masked), streams) if explore else q.argmax(-1)
    return Head(draw, lambda q, actions: pick(epsilon_greedy_logp(q, epsilon, masked), actions))


def composite_head(layout: ActionLayout, log_std: np.ndarray | None) -> Head:
    """The product of a composite space's parts (:mod:`volley.spaces`): every categorical drawn at
    once on the padded view of the logits (Gumbel-max, padding at MASKED), the float Boxes' values
    as one diagonal Gaussian, their log-probabilities summed. ``log_std`` as :func:`gaussian_head`:
    volley's network's, or None where the inputs hold the log-stds (a custom model's)."""
    where = layout.inputs(log_stds=log_std is None)
    num, widest = layout.padded.shape
    categorical, gaussian = layout.categorical_columns, layout.gaussian_columns
    half_log_2pi = np.float32(0.5 * layout.dims * np.log(2 * np.pi))

    def padded_logits(inputs: np.ndarray) -> np.ndarray:  # [..., K, widest]
        logits = inputs[..., where.logits]
        padding = np.full((*logits.shape[:-1], 1), MASKED, logits.dtype)
        return np.concatenate([logits, padding], -1)[..., layout.padded]

    def mean_and_log_std(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean = inputs[..., where.means]
        if where.log_stds is not None:
            return mean, inputs[..., where.log_stds]
        assert log_std is not None
        return mean, np.broadcast_to(log_std, mean.shape)

    def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        actions = np.empty((len(inputs), layout.width), layout.dtype)
        if num:
            logits = padded_logits(inputs)
            noise = streams.gumbel(num * widest).reshape(-1, num, widest) if explore else 0.0
            actions[:, categorical] = (logits + noise).argmax(-1)
        if layout.dims:
            mean, log_stds = mean_and_log_std(inputs)
            actions[:, gaussian] = mean + np.exp(log_stds) * streams.normal(layout.dims) if explore else mean
        return actions

    def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        total = np.zeros(inputs.shape[:-1], np.float32)
        if num:
            total += pick(log_softmax(padded_logits(inputs)), actions[..., categorical]).sum(-1)
        if layout.dims:
            mean, log_stds = mean_and_log_std(inputs)
            z = (actions[..., gaussian] - mean) / np.exp(log_stds)
            total += (-0.5 * z * z - log_stds).sum(-1) - half_log_2pi
        return total
    return Head(draw, log_prob)


def action_head(layout: ActionLayout, log_std: np.ndarray | None) -> Head:
    """The numpy head of a policy over ``layout``'s space: categorical for ``Discrete``, Gaussian for a
    one-dimensional float ``Box`` (today's two fast paths), else the product of the parts."""
    if layout.kind == "discrete":
        return categorical_head()
    if layout.kind == "box":
        return gaussian_head(log_std)
    return composite_head(layout, log_std)


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


def squashed_gaussian_head(uniform: bool) -> Head:
    """SAC's squashed Gaussian over inputs ``[..., 2d]`` (the means, then the log-stds, clipped to
    [LOG_STD_MIN, LOG_STD_MAX]): ``tanh(mean + std·ε)`` when exploring, else ``tanh(mean)``; with
    ``uniform`` (the warm-up before learning starts) actions uniform in (-1, 1) when exploring,
    of density ``2^-d``."""
    def split(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dim = inputs.shape[-1] // 2
        return inputs[..., :dim], np.clip(inputs[..., dim:], LOG_STD_MIN, LOG_STD_MAX)

    def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        mean, log_std = split(inputs)
        if not explore:
            return np.tanh(mean)
        if uniform:
            return uniform_actions(streams, mean.shape[-1])
        return np.tanh(mean + np.exp(log_std) * streams.normal(mean.shape[-1]))

    def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        if uniform:
            return np.full(actions.shape[:-1], -actions.shape[-1] * np.log(2.0), np.float32)
        return squashed_gaussian_logp(*split(inputs), actions)
    return Head(draw, log_prob)


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
