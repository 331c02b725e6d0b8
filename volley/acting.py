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
from typing import NamedTuple, Protocol

import gymnasium as gym
import numpy as np

from volley.config import ModelConfig, NetworkKind
from volley.errors import ConfigError, VolleyError

# -- observations --------------------------------------------------------------------------


def is_image_space(space: gym.Space) -> bool:
    """uint8 boxes of rank 3 (one image) or 4 (stacked images) go to the CNN."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (3, 4)


def _flat_size(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Dict):
        return sum(_flat_size(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(_flat_size(s) for s in space.spaces)
    raise VolleyError(f"observation space {space} is not supported: volley takes Box, Discrete, "
                      "and Dict or Tuple of those")


def _flatten_batch(space: gym.Space, obs: object, n: int) -> np.ndarray:
    """Batched observations ``[n, ...]`` of ``space`` as float32 ``[n, flat_size]``."""
    if isinstance(space, gym.spaces.Discrete):
        one_hot = np.zeros((n, int(space.n)), np.float32)
        one_hot[np.arange(n), np.asarray(obs, np.int64).reshape(n) - int(space.start)] = 1.0
        return one_hot
    if isinstance(space, gym.spaces.Box):
        return np.asarray(obs, np.float32).reshape(n, -1)
    if isinstance(space, gym.spaces.Dict):
        assert isinstance(obs, dict)
        return np.concatenate([_flatten_batch(s, obs[k], n) for k, s in space.spaces.items()], axis=1)
    assert isinstance(space, gym.spaces.Tuple) and isinstance(obs, tuple)
    return np.concatenate([_flatten_batch(s, o, n) for s, o in zip(space.spaces, obs, strict=True)],
                          axis=1)


class ObsPreprocessor:
    """Turns a batch of raw observations into the array the network reads.

    Images stay uint8 (the CNN scales them); everything else becomes a flat float32
    vector: Discrete one-hot, Dict and Tuple concatenated in key order.
    """

    def __init__(self, space: gym.Space) -> None:
        self.space = space
        self.is_image = is_image_space(space)
        self.shape: tuple[int, ...] = space.shape if self.is_image else (_flat_size(space),)  # type: ignore[assignment]

    def __call__(self, obs: object, n: int) -> np.ndarray:
        if self.is_image:
            return np.asarray(obs)
        return _flatten_batch(self.space, obs, n)


# -- action spaces and draws -----------------------------------------------------------------


def policy_outputs(action_space: gym.Space) -> tuple[int, bool]:
    """Outputs of a policy head for ``action_space`` and whether they are a Gaussian's means
    (one-dimensional Box) rather than logits (Discrete); a VolleyError for other spaces."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n), False
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return int(action_space.shape[0]), True
    raise VolleyError(f"action space {action_space} is not supported: volley takes "
                      "Discrete or a one-dimensional Box")


def q_outputs(action_space: gym.Space) -> int:
    """Q-values of a Q-network for ``action_space``; a VolleyError unless it is Discrete."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise VolleyError(f"action space {action_space} is not supported by Q-learning: "
                          "DQN takes Discrete actions")
    return int(action_space.n)


def squashed_outputs(action_space: gym.Space) -> int:
    """Action dimensions of a tanh-squashed Gaussian policy (SAC) for ``action_space``; a
    ConfigError naming the space unless it is a one-dimensional Box with finite bounds."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ConfigError(f"action space {action_space} is not supported by SAC: it takes a one-dimensional "
                          "Box (continuous actions); for Discrete actions use dqn or ppo")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ConfigError(f"action space {action_space} has infinite bounds: SAC squashes its actions with "
                          "tanh into the bounds, so they must be finite (wrap the environment with "
                          "gymnasium.wrappers.ClipAction on a bounded Box)")
    return int(action_space.shape[0])


class RandomStreams(Protocol):
    """One random stream per environment (see RolloutWorker)."""

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


def epsilon_greedy_logp(q_values: np.ndarray, epsilon: float) -> np.ndarray:
    """Log-probabilities ``[..., n]`` of ε-greedy acting: ``ε/n + (1 - ε)·[a = argmax Q]``."""
    n = q_values.shape[-1]
    probs = np.full(q_values.shape, epsilon / n, q_values.dtype)
    np.put_along_axis(probs, q_values.argmax(-1)[..., None], epsilon / n + 1 - epsilon, -1)
    return np.log(np.maximum(probs, np.finfo(probs.dtype).tiny))  # finite at ε = 0


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


def parameter_shapes(obs_size: int, action_space: gym.Space, model: ModelConfig,
                     network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = ()) -> Shapes:
    """The tensors of an MLP network over ``obs_size`` inputs, in the order of its flat weights:
    the network's own parameter first (a Gaussian's log-std, a Q-network's ε), then its layers
    in the order they were built."""
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size
    if network == "actor_critic":
        n_out, continuous = policy_outputs(action_space)
        shapes: Shapes = [("log_std", (n_out,))] if continuous else []
        shapes += _body_shapes("pi_body", obs_size, model.fcnet_hiddens)
        if not model.vf_share_layers:
            shapes += _body_shapes("vf_body", obs_size, model.fcnet_hiddens)
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


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"tanh": np.tanh, "relu": _relu}

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
        while f"{prefix}.{len(layers)}.weight" in weights:  # Linear, activation, Linear, ...
            index = len(layers)
            layers += [(np.ascontiguousarray(weights[f"{prefix}.{index}.weight"].T),
                        weights[f"{prefix}.{index}.bias"]), ACTIVATIONS[activation]]
        return cls(layers)

    def __add__(self, other: NumpyMLP) -> NumpyMLP:
        """This network, then ``other`` on its output."""
        return NumpyMLP(self.layers + other.layers)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for layer in self.layers:
            x = x @ layer[0] + layer[1] if isinstance(layer, tuple) else layer(x)
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
        width = max(a[0].shape[-1] for a in (left.layers[-1], right.layers[-1]) if isinstance(a, tuple))
        for i, (a, b) in enumerate(zip(left.layers, right.layers, strict=True)):
            if not isinstance(a, tuple) or not isinstance(b, tuple):
                assert a is b, "stacked needs the same activations in the same places"
                fused.layers.append(a)
                continue
            if i == len(left.layers) - 1:
                a, b = (_padded(layer, width) for layer in (a, b))
            fused.layers.append((np.stack([a[0], b[0]]), np.stack([a[1], b[1]])[:, None, :]))
        return fused


def _padded(layer: tuple[np.ndarray, np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """A Linear layer ``(Wᵀ, b)`` with zero output columns added up to ``width`` (not ``np.pad``: a
    worker rebuilds its network with every new set of weights, and each ``np.pad`` costs 10 µs)."""
    weight, bias = layer
    padded_weight, padded_bias = np.zeros((len(weight), width), weight.dtype), np.zeros(width, bias.dtype)
    padded_weight[:, :weight.shape[1]], padded_bias[:len(bias)] = weight, bias
    return padded_weight, padded_bias


# actions [B, ...], the inputs of their distribution [B, ...] (logits, a Gaussian's mean,
# Q-values), values [B]. Log-probabilities are not computed per step: a worker computes a
# whole fragment's at once from the stacked inputs (:class:`Twin`'s ``log_prob``).
Acting = tuple[np.ndarray, np.ndarray, np.ndarray]
ActFn = Callable[[np.ndarray, RandomStreams, bool], Acting]
LogProbFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (distribution inputs, actions) -> log π(a)


class Twin(NamedTuple):
    """How a network acts, and the log-probabilities of its actions from what ``act`` returned."""

    act: ActFn
    log_prob: LogProbFn


def actor_critic_twin(weights: Mapping[str, np.ndarray], activation: str) -> Twin:
    """How an MLP actor-critic with these named ``weights`` acts: actions sampled with each
    environment's own stream when ``explore``, else the most likely; the logits (or the
    Gaussian's mean) and the values."""
    pi_head, vf_head = NumpyMLP.of(weights, "pi_head"), NumpyMLP.of(weights, "vf_head")
    # one network whose output is [logits or mean, value in column 0]
    if "vf_body.0.weight" not in weights:  # the shared body, then both heads as one layer
        both = NumpyMLP.of(weights, "pi_body", activation) + NumpyMLP.stacked(pi_head, vf_head)
    else:  # policy and value networks stacked
        both = NumpyMLP.stacked(NumpyMLP.of(weights, "pi_body", activation) + pi_head,
                                NumpyMLP.of(weights, "vf_body", activation) + vf_head)
    continuous = "log_std" in weights
    log_std = weights["log_std"].astype(np.float64) if continuous else np.zeros(0)
    std = np.exp(log_std).astype(np.float32)
    log_norm = np.float32(-(log_std.sum() + 0.5 * len(log_std) * np.log(2 * np.pi)))

    def act(obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        both_out = both(obs)
        out, values = both_out[0], both_out[1, :, 0]
        if continuous:
            return (out + std * streams.normal(len(std)) if explore else out), out, values
        return (gumbel_max(out, streams) if explore else out.argmax(-1)), out, values

    def log_prob(out: np.ndarray, actions: np.ndarray) -> np.ndarray:
        if not continuous:
            return pick(log_softmax(out), actions)
        z = (actions - out) / std  # log N(a; out, std) = -½‖z‖² - Σ log std - ½·d·log 2π
        return log_norm - np.float32(0.5) * (z * z).sum(-1)
    return Twin(act, log_prob)


def q_network_twin(weights: Mapping[str, np.ndarray], activation: str) -> Twin:
    """How an MLP Q-network with these named ``weights`` acts: ε-greedy (ε among the weights);
    the Q-values and the greedy values ``max_a Q``; dueling when it has a ``value_head``."""
    body = NumpyMLP.of(weights, "body", activation) + NumpyMLP.of(weights, "hidden", activation)
    q_head = NumpyMLP.of(weights, "q_head")
    value_head = NumpyMLP.of(weights, "value_head") if "value_head.weight" in weights else None
    epsilon = float(weights["epsilon"])

    def act(obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        features = body(obs)
        q = q_head(features)
        if value_head is not None:
            q = value_head(features) + q - q.mean(-1, keepdims=True)
        actions = gumbel_max(epsilon_greedy_logp(q, epsilon), streams) if explore else q.argmax(-1)
        return actions, q, q.max(-1)

    def log_prob(q: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return pick(epsilon_greedy_logp(q, epsilon), actions)
    return Twin(act, log_prob)


def squashed_gaussian_twin(weights: Mapping[str, np.ndarray], activation: str) -> Twin:
    """How an MLP squashed-Gaussian policy (SAC's actor) with these named ``weights`` acts: its head
    gives the Gaussian's mean and log-std ``[B, 2d]``; actions are ``tanh(mean + std·ε)`` when
    exploring, else ``tanh(mean)``, and uniform in (-1, 1) while ``random_actions`` (among the
    weights, set by the learner before learning starts) is 1. It has no values: zeros."""
    net = NumpyMLP.of(weights, "body", activation) + NumpyMLP.of(weights, "head")
    uniform = bool(weights["random_actions"] > 0.5)

    def split(out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dim = out.shape[-1] // 2
        return out[..., :dim], np.clip(out[..., dim:], LOG_STD_MIN, LOG_STD_MAX)

    def act(obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        out = net(obs)
        mean, log_std = split(out)
        if not explore:
            actions = np.tanh(mean)
        elif uniform:
            actions = uniform_actions(streams, mean.shape[-1])
        else:
            actions = np.tanh(mean + np.exp(log_std) * streams.normal(mean.shape[-1]))
        return actions, out, np.zeros(len(out), np.float32)

    def log_prob(out: np.ndarray, actions: np.ndarray) -> np.ndarray:
        if uniform:  # density 2^-d on (-1, 1)^d
            return np.full(actions.shape[:-1], -actions.shape[-1] * np.log(2.0), np.float32)
        return squashed_gaussian_logp(*split(out), actions)
    return Twin(act, log_prob)


TWINS = {"actor_critic": actor_critic_twin, "q": q_network_twin, "dueling_q": q_network_twin,
         "squashed_gaussian": squashed_gaussian_twin}


class NumpyActor:
    """Acts like an MLP network with the flat weights it was last given (:meth:`load`), on numpy
    alone: what a rollout worker acts with unless something asks it for the torch network."""

    def __init__(self, obs_size: int, action_space: gym.Space, model: ModelConfig,
                 network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = ()) -> None:
        shapes = parameter_shapes(obs_size, action_space, model, network, head_hiddens)
        ends = np.cumsum([int(np.prod(shape)) for _, shape in shapes]).tolist()
        self.size = ends[-1]
        self._slices = [(name, end - int(np.prod(shape)), end, shape)  # where each tensor sits
                        for (name, shape), end in zip(shapes, ends, strict=True)]
        self.activation = model.fcnet_activation
        self.build = TWINS[network]
        self._twin: Twin | None = None

    def load(self, flat: np.ndarray) -> None:
        if flat.shape != (self.size,):
            raise VolleyError(f"weights of shape {flat.shape} given to a network of {self.size} weights")
        weights = {name: flat[start:end].reshape(shape) for name, start, end, shape in self._slices}
        self._twin = self.build(weights, self.activation)

    def act(self, obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        """As :meth:`volley.models.Policy.act`."""
        assert self._twin is not None, "load() the weights before acting"
        return self._twin.act(obs, streams, explore)

    def log_prob(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` ``[...]`` from the distribution inputs acting returned."""
        assert self._twin is not None, "load() the weights before acting"
        return self._twin.log_prob(dist_inputs, actions)
