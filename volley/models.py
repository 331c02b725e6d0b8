"""Policy/value networks and their action distributions, in torch.

One :class:`ActorCritic` serves every on-policy algorithm: an MLP for vector
observations (separate or shared policy and value bodies) or the Nature CNN for
images, with a categorical head for ``Discrete`` actions and a diagonal Gaussian
with a state-independent log-std for ``Box`` actions. A :class:`QNetwork` (DQN)
puts Q-values on the same bodies and acts ε-greedily. Both are a :class:`Policy`:
workers call them alike (:meth:`Policy.act`), and their weights travel between
processes as one flat float32 vector.

Workers act on a few rows at a time, where torch's per-operation overhead (several
microseconds an op) is most of the cost of a small MLP. So an MLP network acts in numpy
(:mod:`volley.acting`, which a rollout worker uses without importing torch at all), several
times cheaper per step; the CNN acts in torch, and all learning is torch's. Sampling is one
function for both paths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.acting import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    Acting,
    ObsPreprocessor,
    RandomStreams,
    Twin,
    actor_critic_twin,
    gumbel_max,
    parameter_shapes,
    policy_outputs,
    q_network_twin,
    q_outputs,
    squashed_gaussian_twin,
    squashed_outputs,
    uniform_actions,
)
from volley.config import ModelConfig, NetworkKind
from volley.errors import VolleyError


class Categorical:
    """Distribution over ``Discrete`` actions from logits ``[B, n]``."""

    def __init__(self, logits: torch.Tensor) -> None:
        # what it was built from (the log-probabilities are not): Categorical(*inputs) is this one
        self.inputs = (logits,)
        self.logits = logits.log_softmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def sample(self, streams: RandomStreams) -> torch.Tensor:
        """Gumbel-max sampling with each environment's own noise, as the numpy actors draw."""
        return torch.as_tensor(gumbel_max(self.logits.detach().cpu().numpy(), streams))

    def kl(self, other: Categorical) -> torch.Tensor:
        return (self.logits.exp() * (self.logits - other.logits)).sum(-1)


class EpsilonGreedy(Categorical):
    """A Q-network's behaviour policy: a uniformly random action with probability ε, else
    the greedy one.

    It is the categorical distribution with probabilities ``ε/n + (1 - ε)·[a = argmax Q]``,
    so workers sample it like any policy (Gumbel-max, each environment's own noise);
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

    @property
    def inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """What it was built from: ``DiagGaussian(*inputs)`` is the same distribution."""
        return self.mean, self.log_std

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


class SquashedGaussian:
    """``a = tanh(u)``, ``u ~ N(mean, std)`` per action dimension: SAC's policy (Haarnoja et al.,
    2018), its actions in (-1, 1), which ``normalize_actions`` rescales to the space's bounds.
    With ``uniform`` (SAC's warm-up before learning starts) it samples uniformly instead."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, uniform: bool = False) -> None:
        self.mean, self.log_std, self.uniform = mean, log_std, uniform

    def rsample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised draw ``a = tanh(mean + std·ε)`` ``[B, d]`` and its log-probability ``[B]``,
        differentiable in the mean and log-std: the Gaussian's log-density of ``u`` less tanh's
        log-determinant ``Σ log(1 − tanh²(u))``, written ``2·(log 2 − u − softplus(−2u))``, which
        stays finite where ``tanh(u)`` rounds to ±1 (the paper's appendix C)."""
        noise = torch.randn_like(self.mean)
        u = self.mean + self.log_std.exp() * noise
        gaussian = -0.5 * noise.square() - self.log_std - 0.5 * math.log(2 * math.pi)
        log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
        return torch.tanh(u), (gaussian - log_det).sum(-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``[B]`` of squashed actions (taken 1e-6 inside ±1, where atanh is infinite)."""
        if self.uniform:
            return torch.full(actions.shape[:-1], -actions.shape[-1] * math.log(2.0))
        a = actions.clamp(-1 + 1e-6, 1 - 1e-6)
        z = (torch.atanh(a) - self.mean) / self.log_std.exp()
        gaussian = -0.5 * z.square() - self.log_std - 0.5 * math.log(2 * math.pi)
        return (gaussian - torch.log1p(-a.square())).sum(-1)

    def mode(self) -> torch.Tensor:
        return torch.tanh(self.mean)

    def sample(self, streams: RandomStreams) -> torch.Tensor:
        """With each environment's own noise, as the numpy actors draw."""
        dim = self.mean.shape[-1]
        if self.uniform:
            return torch.as_tensor(uniform_actions(streams, dim))
        noise = torch.as_tensor(streams.normal(dim), dtype=self.mean.dtype)
        return torch.tanh(self.mean + self.log_std.exp() * noise)


Distribution = Categorical | DiagGaussian  # an ActorCritic's (what the on-policy algorithms read)
PolicyDistribution = Distribution | SquashedGaussian  # any Policy's

# -- networks --------------------------------------------------------------------------------

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}  # acting's, in torch


def _layer(n_in: int, n_out: int, gain: float) -> nn.Linear:
    """Orthogonal init, as in the PPO implementation details (Huang et al., 2022)."""
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hiddens: Sequence[int], activation: str, orthogonal: bool = True) -> nn.Sequential:
    """Linear layers with ``activation`` after each; orthogonally initialised (gain √2), or with
    ``orthogonal=False`` by torch's default (uniform in ±1/√n_in, as SB3's SAC has them)."""
    layers: list[nn.Module] = []
    for width in hiddens:
        linear = _layer(n_in, width, np.sqrt(2)) if orthogonal else nn.Linear(n_in, width)
        layers += [linear, ACTIVATIONS[activation]()]
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


def named_arrays(module: nn.Module) -> dict[str, np.ndarray]:
    """``module``'s parameters by name, as numpy arrays (what :mod:`volley.acting` acts with)."""
    return {name: p.detach().cpu().numpy() for name, p in module.named_parameters()}


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
        self._twin: tuple[list[int], Twin] | None = None

    def act(self, obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        """Actions for a batch of (filtered) observations ``[B, *obs_shape]``: sampled with each
        environment's own stream when ``explore``, else the most likely; with the inputs of
        their distribution (see :meth:`log_prob`) and the values. An MLP acts through its
        numpy twin, rebuilt whenever the weights changed (set here, or changed in place:
        loaded, or stepped by an optimizer)."""
        return self._current_twin().act(obs, streams, explore)

    def log_prob(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` ``[...]`` under the distributions whose inputs
        :meth:`act` returned (``[..., n]``): a worker's whole fragment at once."""
        return self._current_twin().log_prob(dist_inputs, actions)

    def _current_twin(self) -> Twin:
        params = self.__dict__.get("_params") or self.__dict__.setdefault("_params", list(self.parameters()))
        versions = [p._version for p in params]  # in-place changes count them
        twin = getattr(self, "_twin", None)
        if twin is None or twin[0] != versions:
            twin = (versions, self.numpy_twin() or Twin(self._act_in_torch, self._log_prob_in_torch))
            self._twin = twin
        return twin[1]

    def numpy_twin(self) -> Twin | None:
        """Acting like :meth:`act` with numpy copies of the weights (None: act in torch)."""
        return None

    def outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The distribution's inputs and the values ``[B]`` for observations ``[B, *obs_shape]``."""
        raise NotImplementedError

    def distribution_of(self, dist_inputs: torch.Tensor) -> PolicyDistribution:
        """The action distribution with these inputs (what :meth:`outputs` gives)."""
        raise NotImplementedError

    def forward(self, obs: torch.Tensor) -> tuple[PolicyDistribution, torch.Tensor]:
        """Action distribution and values ``[B]`` for observations ``[B, *obs_shape]``."""
        dist_inputs, values = self.outputs(obs)
        return self.distribution_of(dist_inputs), values

    @torch.inference_mode()
    def _act_in_torch(self, obs: np.ndarray, streams: RandomStreams, explore: bool) -> Acting:
        device = next(self.parameters()).device
        dist_inputs, values = self.outputs(torch.as_tensor(obs, device=device))
        dist = self.distribution_of(dist_inputs)
        actions = dist.sample(streams) if explore else dist.mode()
        return actions.cpu().numpy(), dist_inputs.cpu().numpy(), values.cpu().numpy()

    @torch.inference_mode()
    def _log_prob_in_torch(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        device = next(self.parameters()).device
        dist = self.distribution_of(torch.as_tensor(dist_inputs, device=device))
        return dist.log_prob(torch.as_tensor(actions, device=device)).cpu().numpy()

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
        n_out, self.continuous = policy_outputs(action_space)
        self.activation = model.fcnet_activation
        self.pi_body, n_feat = trunk(obs_shape, is_image, model)
        self.vf_body = None if is_image or model.vf_share_layers else trunk(obs_shape, False, model)[0]
        self.pi_head = _layer(n_feat, n_out, 0.01)
        self.vf_head = _layer(n_feat, 1, 1.0)
        self.log_std = nn.Parameter(torch.full((n_out,), model.log_std_init)) if self.continuous else None

    def outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (or the Gaussian's mean) and values."""
        features = self.pi_body(obs)
        value_features = features if self.vf_body is None else self.vf_body(obs)
        return self.pi_head(features), self.vf_head(value_features).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """The action distribution alone: what a policy step reads (TRPO's, PG's), without the
        value network's forward pass over the whole batch."""
        return self.distribution_of(self.pi_head(self.pi_body(obs)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The values ``[B]`` alone: what a value-function fit reads, without the policy's."""
        return self.vf_head(self.pi_body(obs) if self.vf_body is None else self.vf_body(obs)).squeeze(-1)

    def distribution_of(self, dist_inputs: torch.Tensor) -> Distribution:
        return Categorical(dist_inputs) if self.log_std is None else DiagGaussian(dist_inputs, self.log_std)

    def numpy_twin(self) -> Twin | None:
        if not isinstance(self.pi_body, nn.Sequential):  # the CNN acts in torch
            return None
        return actor_critic_twin(named_arrays(self), self.activation)

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
        n_actions = q_outputs(action_space)
        self.activation = model.fcnet_activation
        self.body, n_feat = trunk(obs_shape, is_image, model)
        # hidden layers on the body (RLlib's DQN hiddens); empty by default, so holding no weights
        self.hidden = mlp(n_feat, hiddens, model.fcnet_activation)
        n_feat = hiddens[-1] if hiddens else n_feat
        self.q_head = _layer(n_feat, n_actions, 1.0)  # the advantage stream when dueling
        self.value_head = _layer(n_feat, 1, 1.0) if dueling else None
        self.epsilon = nn.Parameter(torch.zeros(()), requires_grad=False)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, n]`` for observations ``[B, *obs_shape]``."""
        features = self.hidden(self.body(obs))
        out = self.q_head(features)
        if self.value_head is None:
            return out
        return self.value_head(features) + out - out.mean(-1, keepdim=True)

    def outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Q-values and the greedy values ``max_a Q``."""
        q = self.q_values(obs)
        return q, q.max(-1).values

    def distribution_of(self, dist_inputs: torch.Tensor) -> Distribution:
        """The ε-greedy distribution over Q-values ``dist_inputs``."""
        return EpsilonGreedy(dist_inputs, self.epsilon.item())

    def numpy_twin(self) -> Twin | None:
        if not isinstance(self.body, nn.Sequential):  # the CNN acts in torch
            return None
        return q_network_twin(named_arrays(self), self.activation)

    def q_parameters(self) -> list[nn.Parameter]:
        """Everything the optimizer trains: all parameters but ε."""
        return [p for p in self.parameters() if p is not self.epsilon]

    def set_epsilon(self, epsilon: float) -> None:
        with torch.no_grad():
            self.epsilon.fill_(epsilon)


class SquashedGaussianActor(Policy):
    """SAC's policy: an MLP whose head gives a Gaussian's mean and log-std per action dimension
    (log-std clipped to [-20, 2]), its draws squashed by tanh. Layers keep torch's default
    initialisation, as SB3's SAC has them. ``random_actions`` is a parameter no optimizer
    touches (as a Q-network's ε): set to 1 before learning starts, it travels with the flat
    weights and makes every worker act uniformly at random."""

    def __init__(self, obs_size: int, action_space: gym.Space, model: ModelConfig) -> None:
        super().__init__()
        dim = squashed_outputs(action_space)
        self.activation = model.fcnet_activation
        self.random_actions = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.body = mlp(obs_size, model.fcnet_hiddens, model.fcnet_activation, orthogonal=False)
        self.head = nn.Linear(model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size, 2 * dim)

    def outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's output ``[B, 2d]`` (means, then log-stds) and zeros for values (SAC has none)."""
        out = self.head(self.body(obs))
        return out, out.new_zeros(len(out))

    def distribution_of(self, dist_inputs: torch.Tensor) -> SquashedGaussian:
        mean, log_std = dist_inputs.chunk(2, -1)
        return SquashedGaussian(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX), bool(self.random_actions > 0.5))

    def distribution(self, obs: torch.Tensor) -> SquashedGaussian:
        """The policy at observations ``[B, obs_size]`` (never uniform: what the losses read)."""
        mean, log_std = self.head(self.body(obs)).chunk(2, -1)
        return SquashedGaussian(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX))

    def numpy_twin(self) -> Twin | None:
        return squashed_gaussian_twin(named_arrays(self), self.activation)

    def actor_parameters(self) -> list[nn.Parameter]:
        """Everything the actor's optimizer trains: all parameters but ``random_actions``."""
        return [p for p in self.parameters() if p is not self.random_actions]

    def set_random_actions(self, on: bool) -> None:
        with torch.no_grad():
            self.random_actions.fill_(float(on))


class StackedQ(nn.Module):
    """``k`` MLP Q-functions ``Q_i(s, a)`` of one shape, evaluated as one network: each layer's
    weights stacked ``[k, n_in, n_out]``, so a batched matrix product runs every critic at once
    (SAC's twin critics in one pass, and one optimizer tensor per layer instead of ``k``).
    Initialised as ``k`` independent ``nn.Linear`` stacks are (uniform in ±1/√n_in)."""

    def __init__(self, n_in: int, hiddens: Sequence[int], activation: str, k: int) -> None:
        super().__init__()
        # in place, on each fresh product (the product's backward never reads its output)
        self.k, self.activation = k, {"relu": torch.relu_, "tanh": torch.tanh_}[activation]
        widths = [n_in, *hiddens, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
            bound = 1 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(k, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(k, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """``Q_i(s, a)`` ``[k, B]``. ``frozen`` reads the weights detached: gradients reach the actions
        (the actor's loss) but not the critics, and their weight gradients are never computed."""
        x = torch.cat([obs, actions], -1).expand(self.k, -1, -1)  # [k, B, n_in], a view
        *hidden, (last_weight, last_bias) = zip(self.weights, self.biases, strict=True)
        for weight, bias in hidden:
            x = self.activation(torch.baddbmm(bias.detach() if frozen else bias, x,
                                              weight.detach() if frozen else weight))
        if frozen:
            last_weight, last_bias = last_weight.detach(), last_bias.detach()
        # one output: a weighted sum of the last features, cheaper than a matrix product [k, B, 1]
        return (x * last_weight.transpose(1, 2)).sum(-1) + last_bias[:, :, 0]


def build_policy(obs_space: gym.Space, action_space: gym.Space, model: ModelConfig,
                 network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = ()
                 ) -> tuple[ObsPreprocessor, Policy]:
    """The preprocessor and the network for a pair of spaces; a clear error for others.
    ``head_hiddens`` are a Q-network's layers between its body and its Q-values."""
    pre = ObsPreprocessor(obs_space)
    policy: Policy
    if network == "actor_critic":
        policy = ActorCritic(pre.shape, pre.is_image, action_space, model)
    elif network == "squashed_gaussian":
        if pre.is_image:
            raise VolleyError(f"observation space {obs_space} is images: SAC's networks are MLPs over "
                              "vector observations")
        policy = SquashedGaussianActor(pre.shape[0], action_space, model)
    else:
        policy = QNetwork(pre.shape, pre.is_image, action_space, model, dueling=network == "dueling_q",
                          hiddens=head_hiddens)
    if not pre.is_image:  # workers slice its flat weights by this layout, without torch
        layout = parameter_shapes(pre.shape[0], action_space, model, network, head_hiddens)
        assert [(name, tuple(p.shape)) for name, p in policy.named_parameters()] == layout, \
            "volley.acting.parameter_shapes no longer describes this network"
    return pre, policy
