"""Policy/value networks, observation preprocessing and action distributions.

One :class:`ActorCritic` serves every on-policy algorithm: an MLP for vector
observations (separate or shared policy and value bodies) or the Nature CNN for
images, with a categorical head for ``Discrete`` actions and a diagonal Gaussian
with a state-independent log-std for ``Box`` actions. A :class:`QNetwork` (DQN)
puts Q-values on the same bodies and acts ε-greedily. Both are a :class:`Policy`:
workers call them alike (:meth:`Policy.act`), and their weights travel between
processes as one flat float32 vector.

Workers act on a few rows at a time, where torch's per-operation overhead (several
microseconds an op) is most of the cost of a small MLP. So an MLP policy acts through a
numpy copy of its weights (:class:`NumpyMLP`), several times cheaper per step; the CNN
acts in torch, and all learning is torch's. Sampling is one function for both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.config import ModelConfig, NetworkKind
from volley.errors import VolleyError

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


# -- action distributions --------------------------------------------------------------------


class RandomStreams(Protocol):
    """One random stream per environment (see RolloutWorker)."""

    def uniform(self) -> np.ndarray: ...
    def normal(self, dim: int) -> np.ndarray: ...


def inverse_cdf(probs: np.ndarray, streams: RandomStreams) -> np.ndarray:
    """One categorical draw per row of ``probs`` ``[B, n]``, each with its environment's own uniform."""
    cdf = probs.cumsum(-1)
    u = streams.uniform()[:, None] * cdf[:, -1:]
    return (u >= cdf).sum(-1).clip(max=cdf.shape[-1] - 1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def epsilon_greedy_logp(q_values: np.ndarray, epsilon: float) -> np.ndarray:
    """Log-probabilities ``[B, n]`` of ε-greedy acting: ``ε/n + (1 - ε)·[a = argmax Q]``."""
    n = q_values.shape[-1]
    probs = np.full(q_values.shape, epsilon / n, q_values.dtype)
    probs[np.arange(len(q_values)), q_values.argmax(-1)] += 1 - epsilon
    return np.log(np.maximum(probs, np.finfo(probs.dtype).tiny))  # finite at ε = 0


class Categorical:
    """Distribution over ``Discrete`` actions from logits ``[B, n]``."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits.log_softmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def sample(self, streams: RandomStreams) -> torch.Tensor:
        """Inverse-CDF sampling with each environment's own uniform draw."""
        return torch.as_tensor(inverse_cdf(self.logits.exp().numpy(), streams))

    def kl(self, other: Categorical) -> torch.Tensor:
        return (self.logits.exp() * (self.logits - other.logits)).sum(-1)


class EpsilonGreedy(Categorical):
    """A Q-network's behaviour policy: a uniformly random action with probability ε, else
    the greedy one.

    It is the categorical distribution with probabilities ``ε/n + (1 - ε)·[a = argmax Q]``,
    so workers sample it like any policy (inverse CDF, one uniform draw per environment);
    its mode is the greedy action at every ε.
    """

    def __init__(self, q_values: torch.Tensor, epsilon: float) -> None:
        self.greedy = q_values.argmax(-1)
        n = q_values.shape[-1]
        probs = epsilon / n + (1 - epsilon) * nn.functional.one_hot(self.greedy, n).to(q_values.dtype)
        super().__init__(probs.clamp_min(torch.finfo(probs.dtype).tiny).log())  # finite at ε = 0

    def mode(self) -> torch.Tensor:
        return self.greedy


class DiagGaussian:
    """Independent normal per action dimension; mean ``[B, d]`` and log-std ``[d]``."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.log_std.exp()
        return (-0.5 * z**2 - self.log_std - 0.5 * np.log(2 * np.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * np.log(2 * np.pi * np.e)).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean

    def sample(self, streams: RandomStreams) -> torch.Tensor:
        noise = torch.as_tensor(streams.normal(self.mean.shape[-1]), dtype=self.mean.dtype)
        return self.mean + self.log_std.exp() * noise

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        var, other_var = (2 * self.log_std).exp(), (2 * other.log_std).exp()
        return (other.log_std - self.log_std
                + (var + (self.mean - other.mean) ** 2) / (2 * other_var) - 0.5).sum(-1)


Distribution = Categorical | DiagGaussian

# -- networks --------------------------------------------------------------------------------

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def _layer(n_in: int, n_out: int, gain: float) -> nn.Linear:
    """Orthogonal init, as in the PPO implementation details (Huang et al., 2022)."""
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hiddens: Sequence[int], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hiddens:
        layers += [_layer(n_in, width, np.sqrt(2)), ACTIVATIONS[activation]()]
        n_in = width
    return nn.Sequential(*layers)


class NatureCNN(nn.Module):
    """Mnih et al. (2015): three conv layers and a 512-unit layer; uint8 input scaled to [0, 1]."""

    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.channels_last = len(obs_shape) == 4 or (obs_shape[-1] <= 4 < obs_shape[0])
        channels, height, width = self._chw(obs_shape)
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.fc = nn.Sequential(_layer(n_flat, 512, np.sqrt(2)), nn.ReLU())
        self.out_features = 512

    def _chw(self, shape: tuple[int, ...]) -> tuple[int, int, int]:
        if len(shape) == 4:  # [stack, H, W, C]
            return shape[0] * shape[3], shape[1], shape[2]
        if self.channels_last:  # [H, W, C]
            return shape[2], shape[0], shape[1]
        return shape[0], shape[1], shape[2]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0
        if x.dim() == 5:  # [B, S, H, W, C] -> [B, S*C, H, W]
            x = x.permute(0, 1, 4, 2, 3).flatten(1, 2)
        elif self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.fc(self.convs(x))


def trunk(obs_shape: tuple[int, ...], is_image: bool, model: ModelConfig) -> tuple[nn.Module, int]:
    """The Nature CNN for images, else the MLP of ``model``; and the width of its features."""
    if is_image:
        cnn = NatureCNN(obs_shape)
        return cnn, cnn.out_features
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_shape[0]
    return mlp(obs_shape[0], model.fcnet_hiddens, model.fcnet_activation), width


class NumpyMLP:
    """A numpy copy of ``Linear`` and activation layers, for acting (see the module docstring).

    ``__call__`` gives what the torch layers give, to float32 rounding.
    """

    def __init__(self, *modules: nn.Module) -> None:
        self.layers: list[tuple[np.ndarray, np.ndarray] | Callable[[np.ndarray], np.ndarray]] = []
        for module in modules:
            for layer in module.modules():
                if isinstance(layer, nn.Linear):
                    self.layers.append((layer.weight.detach().cpu().numpy().T.copy(),
                                        layer.bias.detach().cpu().numpy().copy()))
                elif isinstance(layer, nn.Tanh):
                    self.layers.append(np.tanh)
                elif isinstance(layer, nn.ReLU):
                    self.layers.append(_relu)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for layer in self.layers:
            x = x @ layer[0] + layer[1] if isinstance(layer, tuple) else layer(x)
        return x

    @staticmethod
    def side_by_side(left: NumpyMLP, right: NumpyMLP) -> NumpyMLP:
        """One network computing ``left`` and ``right`` on the same input, their outputs
        concatenated: the first layers' weights side by side, every later layer's
        block-diagonal. On a few rows a product twice as wide costs about what one costs, so
        a policy and its value function act in half the numpy calls (≈ 7 µs a step saved on
        two 64x64 bodies). Both must be the same kinds of layer in the same order."""
        fused, first = NumpyMLP(), True
        for a, b in zip(left.layers, right.layers, strict=True):
            if not isinstance(a, tuple) or not isinstance(b, tuple):
                assert a is b, "side_by_side needs the same activations in the same places"
                fused.layers.append(a)
                continue
            (w_a, b_a), (w_b, b_b) = a, b
            if first:  # both read the same input
                weight = np.concatenate([w_a, w_b], axis=1)
            else:  # each reads its own part of the previous layer's output
                weight = np.zeros((len(w_a) + len(w_b), w_a.shape[1] + w_b.shape[1]), np.float32)
                weight[:len(w_a), :w_a.shape[1]], weight[len(w_a):, w_a.shape[1]:] = w_a, w_b
            fused.layers.append((weight, np.concatenate([b_a, b_b])))
            first = False
        return fused


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0, out=x)


Acting = tuple[np.ndarray, np.ndarray, np.ndarray]  # actions [B, ...], their log-probabilities [B], values [B]


class Policy(nn.Module):
    """A network workers act with: ``forward(obs)`` gives an action distribution and values
    ``[B]``; :meth:`act` does the same for acting, numpy in and out; its weights travel
    between processes as one flat float32 vector."""

    def get_flat_weights(self) -> np.ndarray:
        """All parameters as one float32 vector (what workers receive)."""
        return nn.utils.parameters_to_vector(self.parameters()).detach().cpu().numpy()

    def set_flat_weights(self, flat: np.ndarray) -> None:
        device = next(self.parameters()).device
        # a copy: arrays from Ray's object store are read-only
        nn.utils.vector_to_parameters(torch.tensor(flat, dtype=torch.float32, device=device),
                                      self.parameters())
        self._twin: tuple[list[int], Callable[..., Acting]] | None = None

    def act(self, obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        """Actions for a batch of (filtered) observations ``[B, *obs_shape]``: sampled with each
        environment's own stream when ``explore``, else the most likely; with their
        log-probabilities and the values. An MLP acts through its numpy twin, rebuilt
        whenever the weights changed (set here, or changed in place: loaded, or stepped by
        an optimizer)."""
        params = self.__dict__.get("_params") or self.__dict__.setdefault("_params", list(self.parameters()))
        versions = [p._version for p in params]  # in-place changes count them
        twin = getattr(self, "_twin", None)
        if twin is None or twin[0] != versions:
            twin = (versions, self.numpy_twin() or self._act_in_torch)
            self._twin = twin
        return twin[1](obs, streams, explore)

    def numpy_twin(self) -> Callable[[np.ndarray, RandomStreams, bool], Acting] | None:
        """A function acting like :meth:`act` with numpy copies of the weights (None: act in torch)."""
        return None

    @torch.inference_mode()
    def _act_in_torch(self, obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        device = next(self.parameters()).device
        dist, values = self(torch.as_tensor(obs, device=device))
        actions = dist.sample(streams).to(device) if explore else dist.mode()
        return actions.cpu().numpy(), dist.log_prob(actions).cpu().numpy(), values.cpu().numpy()

    def get_weights(self) -> dict[str, np.ndarray]:
        """Every tensor of the network by name, as numpy copies (RLlib's ``policy.get_weights()``)."""
        return {name: tensor.detach().cpu().numpy().copy() for name, tensor in self.state_dict().items()}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load :meth:`get_weights` output (arrays or tensors); a VolleyError names the first tensor
        that is missing, unknown or of another shape, and nothing is changed then."""
        current = self.state_dict()
        for name in [*current, *weights]:
            if name not in weights or name not in current:
                where = "missing from" if name not in weights else "unknown to this network, in"
                raise VolleyError(f"weight {name!r} is {where} the weights given to set_weights()")
            shape = tuple(np.shape(weights[name]))
            if shape != tuple(current[name].shape):
                raise VolleyError(f"weight {name!r} has shape {shape}, this network's has "
                                  f"{tuple(current[name].shape)}")
        self.load_state_dict({name: torch.tensor(np.asarray(value)) for name, value in weights.items()})


class ActorCritic(Policy):
    """Policy and value function over one observation encoding."""

    def __init__(self, obs_shape: tuple[int, ...], is_image: bool, action_space: gym.Space,
                 model: ModelConfig) -> None:
        super().__init__()
        if isinstance(action_space, gym.spaces.Discrete):
            n_out, self.continuous = int(action_space.n), False
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            n_out, self.continuous = int(action_space.shape[0]), True
        else:
            raise VolleyError(f"action space {action_space} is not supported: volley takes "
                              "Discrete or a one-dimensional Box")
        self.pi_body, n_feat = trunk(obs_shape, is_image, model)
        self.vf_body = None if is_image or model.vf_share_layers else trunk(obs_shape, False, model)[0]
        self.pi_head = _layer(n_feat, n_out, 0.01)
        self.vf_head = _layer(n_feat, 1, 1.0)
        self.log_std = nn.Parameter(torch.full((n_out,), model.log_std_init)) if self.continuous else None

    def forward(self, obs: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """Action distribution and value ``[B]`` for observations ``[B, *obs_shape]``."""
        features = self.pi_body(obs)
        value_features = features if self.vf_body is None else self.vf_body(obs)
        return self._distribution(self.pi_head(features)), self.vf_head(value_features).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """The action distribution alone: what a policy step reads (TRPO's, PG's), without the
        value network's forward pass over the whole batch."""
        return self._distribution(self.pi_head(self.pi_body(obs)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The values ``[B]`` alone: what a value-function fit reads, without the policy's."""
        return self.vf_head(self.pi_body(obs) if self.vf_body is None else self.vf_body(obs)).squeeze(-1)

    def _distribution(self, out: torch.Tensor) -> Distribution:
        return Categorical(out) if self.log_std is None else DiagGaussian(out, self.log_std)

    def numpy_twin(self) -> Callable[[np.ndarray, RandomStreams, bool], Acting] | None:
        if not isinstance(self.pi_body, nn.Sequential):  # the CNN acts in torch
            return None
        if self.vf_body is None:  # the shared body, then both heads as one layer
            shared = NumpyMLP(self.pi_body)
            both = NumpyMLP.side_by_side(NumpyMLP(self.pi_head), NumpyMLP(self.vf_head))
        else:  # policy and value networks side by side: [logits or mean, value]
            shared = NumpyMLP()
            both = NumpyMLP.side_by_side(NumpyMLP(self.pi_body, self.pi_head),
                                         NumpyMLP(self.vf_body, self.vf_head))
        continuous = self.log_std is not None
        if self.log_std is not None:
            log_std = self.log_std.detach().cpu().numpy().astype(np.float64)
            std = np.exp(log_std).astype(np.float32)
            # log N(out + std·z; out, std) = -½‖z‖² - Σ log std - ½·d·log 2π: the draw z is the
            # standardised action, so only ‖z‖² is computed per step
            log_norm = np.float32(-(log_std.sum() + 0.5 * len(log_std) * np.log(2 * np.pi)))

        def act(obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
            both_out = both(shared(obs))
            out, values = both_out[:, :-1], both_out[:, -1]
            if not continuous:
                logp_all = log_softmax(out)
                actions = inverse_cdf(np.exp(logp_all), streams) if explore else logp_all.argmax(-1)
                return actions, logp_all[np.arange(len(actions)), actions], values
            if not explore:
                return out, np.full(len(out), log_norm, np.float32), values
            z = streams.normal(len(std)).astype(np.float32)
            return out + std * z, log_norm - np.float32(0.5) * np.einsum("ij,ij->i", z, z), values
        return act

    def policy_parameters(self) -> list[nn.Parameter]:
        """Parameters the action distribution depends on (a shared body included)."""
        params = [*self.pi_body.parameters(), *self.pi_head.parameters()]
        return params + ([self.log_std] if self.log_std is not None else [])

    def value_parameters(self) -> list[nn.Parameter]:
        """Parameters only the value function uses (just the head when the body is shared)."""
        body = [] if self.vf_body is None else list(self.vf_body.parameters())
        return body + list(self.vf_head.parameters())


class QNetwork(Policy):
    """Q-values ``[B, n]`` for ``Discrete`` actions (DQN), acting ε-greedily.

    A linear head on the MLP or Nature-CNN body, or with ``dueling`` two streams,
    ``Q = V + A - mean(A)`` (Wang et al., 2016). ε is a parameter that no optimizer
    touches: it travels with the flat weights, so every worker explores with the
    learner's current ε on every engine.
    """

    def __init__(self, obs_shape: tuple[int, ...], is_image: bool, action_space: gym.Space,
                 model: ModelConfig, dueling: bool, hiddens: Sequence[int] = ()) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise VolleyError(f"action space {action_space} is not supported by Q-learning: "
                              "DQN takes Discrete actions")
        self.body, n_feat = trunk(obs_shape, is_image, model)
        # hidden layers on the body (RLlib's DQN hiddens); empty by default, so holding no weights
        self.hidden = mlp(n_feat, hiddens, model.fcnet_activation)
        n_feat = hiddens[-1] if hiddens else n_feat
        self.q_head = _layer(n_feat, int(action_space.n), 1.0)  # the advantage stream when dueling
        self.value_head = _layer(n_feat, 1, 1.0) if dueling else None
        self.epsilon = nn.Parameter(torch.zeros(()), requires_grad=False)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, n]`` for observations ``[B, *obs_shape]``."""
        features = self.hidden(self.body(obs))
        out = self.q_head(features)
        if self.value_head is None:
            return out
        return self.value_head(features) + out - out.mean(-1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """The ε-greedy distribution and the greedy values ``max_a Q`` ``[B]``."""
        q = self.q_values(obs)
        return EpsilonGreedy(q, self.epsilon.item()), q.max(-1).values

    def numpy_twin(self) -> Callable[[np.ndarray, RandomStreams, bool], Acting] | None:
        if not isinstance(self.body, nn.Sequential):  # the CNN acts in torch
            return None
        body, q_head = NumpyMLP(self.body), NumpyMLP(self.q_head)
        value_head = None if self.value_head is None else NumpyMLP(self.value_head)
        epsilon = float(self.epsilon)

        def act(obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
            features = body(obs)
            q = q_head(features)
            if value_head is not None:
                q = value_head(features) + q - q.mean(-1, keepdims=True)
            logp_all = epsilon_greedy_logp(q, epsilon)
            actions = inverse_cdf(np.exp(logp_all), streams) if explore else q.argmax(-1)
            return actions, logp_all[np.arange(len(actions)), actions], q.max(-1)
        return act

    def q_parameters(self) -> list[nn.Parameter]:
        """Everything the optimizer trains: all parameters but ε."""
        return [p for p in self.parameters() if p is not self.epsilon]

    def set_epsilon(self, epsilon: float) -> None:
        with torch.no_grad():
            self.epsilon.fill_(epsilon)


def build_policy(obs_space: gym.Space, action_space: gym.Space, model: ModelConfig,
                 network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = ()
                 ) -> tuple[ObsPreprocessor, Policy]:
    """The preprocessor and the network for a pair of spaces; a clear error for others.
    ``head_hiddens`` are a Q-network's layers between its body and its Q-values."""
    pre = ObsPreprocessor(obs_space)
    if network == "actor_critic":
        return pre, ActorCritic(pre.shape, pre.is_image, action_space, model)
    return pre, QNetwork(pre.shape, pre.is_image, action_space, model, dueling=network == "dueling_q",
                         hiddens=head_hiddens)
