"""Policy/value networks and their action distributions, in torch.

One :class:`ActorCritic` serves every on-policy algorithm: an MLP for vector
observations (separate or shared policy and value bodies) or the Nature CNN for
images, with the inputs of the action space's distribution as its outputs
(:mod:`volley.distributions`: a categorical for ``Discrete`` actions, a diagonal Gaussian
with a state-independent log-std for ``Box`` actions, a product of parts for the others),
masked where the observation carries an action mask. A :class:`QNetwork` (DQN)
puts Q-values on the same bodies (or on a custom model's features) and acts ε-greedily.
SAC's :class:`SquashedGaussianActor` is an MLP policy of its own (its critics, a
:class:`StackedQ`, stay on the learner). Each is a :class:`Policy`, the one interface workers
act with (:meth:`Policy.act`) and learners train, as is a user's custom model
(:mod:`volley.modelv2`); :mod:`volley.catalog` builds each from the spaces and the model
config. Their weights travel between processes as one flat float32 vector.

Workers act on a few rows at a time, where torch's per-operation overhead (several
microseconds an op) is most of the cost of a small MLP. So an MLP network acts in numpy
(:mod:`volley.acting`, which a rollout worker uses without importing torch at all), several
times cheaper per step, as does a custom model whose forward pass traces into numpy
(:mod:`volley.traced`); the CNN and the other custom models act in torch, and all learning
is torch's. Sampling is one function for both paths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.action_dists import (
    Categorical as Categorical,  # learning's distributions, kept here by name
)
from volley.action_dists import DiagGaussian as DiagGaussian
from volley.action_dists import (
    Distribution,
    EpsilonGreedy,
    SquashedGaussian,
    action_distribution,
    masked,
)
from volley.config import ModelConfig
from volley.distributions import CustomDistribution
from volley.errors import VolleyError
from volley.heads import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    Head,
    RandomStreams,
    action_head,
    epsilon_greedy_head,
    policy_outputs,
    q_outputs,
    squashed_gaussian_head,
    squashed_outputs,
)
from volley.networks.actor_critic import actor_critic_twin
from volley.networks.numpy_layers import Acting, Previous, State, Twin
from volley.networks.q_network import q_network_twin
from volley.networks.squashed_gaussian import squashed_gaussian_twin
from volley.observations import ObsMask
from volley.spaces import action_layout
from volley.traced_dists import TracedDistribution

# a batch's previous actions and rewards, for a recurrent network that reads them (acting.Previous)
TorchPrevious = tuple[torch.Tensor, torch.Tensor] | None

# -- networks --------------------------------------------------------------------------------

# acting's, in torch ("linear" keeps an Identity, so a body's Linears stay its even entries)
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "linear": nn.Identity}


def _layer(n_in: int, n_out: int, gain: float, init: str = "orthogonal") -> nn.Linear:
    """Orthogonal weights scaled by ``gain``, as in the PPO implementation details (Huang et al.,
    2022); or with ``init="normal"`` N(0, 1/n_in) whatever the gain, the "Xavier" init of
    Karpathy's Pong network, whose output layer starts a hundred times larger than a 0.01
    policy head (under RMSProp at lr 1e-4 it would take ~700 updates to grow that large).
    Zero biases. With ``init="torch"``, torch's default (uniform in ±1/√n_in, biases too: SB3's SAC)."""
    layer = nn.Linear(n_in, n_out)
    if init == "torch":
        return layer
    if init == "orthogonal":
        nn.init.orthogonal_(layer.weight, gain)
    else:
        nn.init.normal_(layer.weight, 0.0, 1.0 / np.sqrt(n_in))
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hiddens: Sequence[int], activation: str, init: str = "orthogonal") -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hiddens:
        layers += [_layer(n_in, width, np.sqrt(2), init), ACTIVATIONS[activation]()]
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
    return mlp(obs_shape[0], model.fcnet_hiddens, model.fcnet_activation, model.fcnet_init), width


def named_arrays(module: nn.Module) -> dict[str, np.ndarray]:
    """``module``'s parameters by name, as numpy arrays (what :mod:`volley.acting` acts with)."""
    return {name: p.detach().cpu().numpy() for name, p in module.named_parameters()}


class Policy(nn.Module):
    """The one interface of every network workers act with and learners train: built-in or custom,
    feed-forward or recurrent (:mod:`volley.catalog` builds them).

    - :meth:`outputs` ``(obs, state, seq_lens) -> (dist_inputs, values, state_out)``: the
      inputs of the action distribution (logits, a Gaussian's parameters, Q-values), the
      values ``[B]`` and the recurrent state after these observations;
    - :meth:`initial_state`: one environment's state at an episode start, a list of arrays
      without the batch dimension; ``[]`` for a feed-forward network, which ignores ``state``;
    - :meth:`act` does the same for acting, numpy in and out: an MLP through its numpy twin
      (:mod:`volley.acting`), anything else in torch, one forward pass for a worker's batch of
      environments. A worker holds each environment's state and passes it in (see
      ``RolloutWorker``);
    - its weights travel between processes as one flat float32 vector.
    """

    reads_prev = False  # whether its outputs read each row's previous action and reward (``prev``)

    def get_flat_weights(self) -> np.ndarray:
        """All parameters as one float32 vector (what workers receive)."""
        return nn.utils.parameters_to_vector(self.parameters()).detach().cpu().numpy()

    def set_flat_weights(self, flat: np.ndarray) -> None:
        device = next(self.parameters()).device
        # a copy: arrays from Ray's object store are read-only
        nn.utils.vector_to_parameters(torch.tensor(flat, dtype=torch.float32, device=device),
                                      self.parameters())
        self._twin: tuple[list[int], Twin] | None = None

    def initial_state(self) -> State:
        """One environment's recurrent state at the start of an episode: arrays without the batch
        dimension (RLlib's ``get_initial_state()``); ``[]`` for a feed-forward network."""
        return []

    def act(self, obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
            prev: Previous = None) -> Acting:
        """Actions for a batch of (filtered) observations ``[B, *obs_shape]`` and the environments'
        ``state`` (each array ``[B, ...]``; ``prev``: their previous actions and rewards, for a
        network that reads them): sampled with each environment's own stream when ``explore``,
        else the most likely; with the inputs of their distribution (see :meth:`log_prob`), the
        values and the state after this step. An MLP acts through its numpy twin, rebuilt
        whenever the weights changed (set here, or changed in place: loaded, or stepped by an
        optimizer)."""
        return self._current_twin().act(obs, state, streams, explore, prev)

    def log_prob(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` ``[...]`` under the distributions whose inputs
        :meth:`act` returned (``[..., n]``): a worker's whole fragment at once."""
        return self._current_twin().log_prob(dist_inputs, actions)

    def _current_twin(self) -> Twin:
        params = self.__dict__.get("_params") or self.__dict__.setdefault("_params", list(self.parameters()))
        versions = [p._version for p in params]  # in-place changes count them
        twin = getattr(self, "_twin", None)
        if twin is None or twin[0] != versions:
            twin = (versions, self.numpy_twin() or self._torch_twin())
            self._twin = twin
        return twin[1]

    def numpy_twin(self) -> Twin | None:
        """Acting like :meth:`act` with numpy copies of the weights (None: act in torch)."""
        return None

    def numpy_head(self) -> Head:
        """The action distribution, in numpy, that acting draws from (its parameters, a fixed
        log-std or ε, as they are now)."""
        raise NotImplementedError

    def _torch_twin(self) -> Twin:
        """Acting with a forward pass in torch (a CNN, a custom model that does not trace), then the
        draw in numpy: the forward pass is the only torch work of a step. Around it, only what
        cannot be made once: ``inference_mode`` (no autograd bookkeeping, cheaper than ``no_grad``),
        the arrays shared with torch (no copy on the CPU), a recurrent network's sequence lengths
        made once per batch size."""
        head = self.numpy_head()
        device = next(self.parameters()).device
        ones: dict[int, torch.Tensor] = {}  # RLlib's acting: sequences of one step each when recurrent

        def act(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
                prev: Previous = None) -> Acting:
            with torch.inference_mode():
                seq_lens = ones.get(len(obs)) if state else None
                if state and seq_lens is None:
                    seq_lens = ones[len(obs)] = torch.ones(len(obs), dtype=torch.int32, device=device)
                dist_inputs, values, state_out = self.outputs(
                    torch.as_tensor(obs, device=device), [torch.as_tensor(s, device=device) for s in state],
                    seq_lens, None if prev is None else (torch.as_tensor(prev[0], device=device),
                                                         torch.as_tensor(prev[1], device=device)))
                inputs = dist_inputs.cpu().numpy()
                return (head.draw(inputs, streams, explore), inputs, values.cpu().numpy(),
                        [s.cpu().numpy() for s in state_out])
        return Twin(act, head.log_prob)

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The distribution's inputs, the values ``[B]`` and the state after these observations
        ``[B, *obs_shape]``. A recurrent network reads them as ``len(seq_lens)`` sequences of ``T``
        rows each, padded (``B = len(seq_lens) · T``, RLlib's layout; acting: ``T = 1``), each
        starting from its row of ``state`` (each tensor ``[len(seq_lens), ...]``), and with
        ``prev`` each row's previous action and reward where it reads them; a feed-forward
        network ignores all three."""
        raise NotImplementedError

    def distribution_of(self, dist_inputs: torch.Tensor) -> Distribution:
        """The action distribution with these inputs (what :meth:`outputs` gives)."""
        raise NotImplementedError

    def forward(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> tuple[Distribution, torch.Tensor]:
        """Action distribution and values ``[B]`` for observations ``[B, *obs_shape]`` (the other
        arguments as :meth:`outputs`)."""
        dist_inputs, values, _ = self.outputs(obs, state, seq_lens, prev)
        return self.distribution_of(dist_inputs), values

    def get_initial_state(self) -> State:
        """RLlib's name of :meth:`initial_state` (``algo.get_policy().get_initial_state()``)."""
        return self.initial_state()

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


class ActorCriticPolicy(Policy):
    """A policy with a value function beside it: what PPO, PG and TRPO train. PG and TRPO step the
    policy and fit the value function apart, so it also gives each alone and their parameters."""

    def distribution(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                     seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> Distribution:
        """The action distribution alone: what a policy step reads (TRPO's, PG's)."""
        raise NotImplementedError

    def value(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
              seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> torch.Tensor:
        """The values ``[B]`` alone: what a value-function fit reads."""
        raise NotImplementedError

    def policy_parameters(self) -> list[nn.Parameter]:
        """Parameters the action distribution depends on (a shared body included)."""
        raise NotImplementedError

    def value_parameters(self) -> list[nn.Parameter]:
        """Parameters only the value function uses (just the head when the body is shared)."""
        raise NotImplementedError


def split_mask(obs: torch.Tensor, mask: ObsMask | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The columns of flat observations ``[B, n]`` a network reads, and their action mask (None without one)."""
    if mask is None:
        return obs, None
    net = mask.net if isinstance(mask.net, slice) else torch.as_tensor(mask.net, device=obs.device)
    return obs[:, net], obs[:, mask.mask]


class ActorCritic(ActorCriticPolicy):
    """volley's own policy and value function over one observation encoding (MLP or Nature CNN).

    Its policy head outputs the inputs of the action space's distribution (:mod:`volley.spaces`:
    logits, and for float Boxes the means beside a learned state-independent log-std), or with
    ``custom_dist`` (a custom action distribution class and its ``required_model_output_shape``)
    that many inputs of the user's distribution. With ``mask`` (an action mask among the
    observation's columns) the network reads the other columns and its logits are masked."""

    def __init__(self, obs_shape: tuple[int, ...], is_image: bool, action_space: gym.Space,
                 model: ModelConfig, mask: ObsMask | None = None,
                 custom_dist: tuple[type, int] | None = None) -> None:
        super().__init__()
        self.layout = action_layout(action_space)
        self.mask = mask
        self.custom_dist = custom_dist
        self.traced_dist = None if custom_dist is None else TracedDistribution(custom_dist[0], self, self, self.layout)
        n_out, n_log_std = policy_outputs(action_space) if custom_dist is None else (custom_dist[1], 0)
        self.activation = model.fcnet_activation
        self.pi_body, n_feat = trunk(obs_shape, is_image, model)
        self.vf_body = None if is_image or model.vf_share_layers else trunk(obs_shape, False, model)[0]
        n_feat = self.add_memory(n_feat, action_space, model)
        self.pi_head = _layer(n_feat, n_out, 0.01, model.fcnet_init)
        self.vf_head = _layer(n_feat, 1, 1.0, model.fcnet_init)
        self.log_std = nn.Parameter(torch.full((n_log_std,), model.log_std_init)) if n_log_std else None

    def add_memory(self, n_feat: int, action_space: gym.Space, model: ModelConfig) -> int:
        """Layers between the bodies and the heads (a recurrent network's LSTM); the width the heads
        read. None here: the heads read the bodies' ``n_feat`` features."""
        return n_feat

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Logits (or the Gaussian's mean) and values; feed-forward, so no state."""
        net, mask = split_mask(obs, self.mask)
        features = self.pi_body(net)
        value_features = features if self.vf_body is None else self.vf_body(net)
        return self.policy_head(features, mask), self.vf_head(value_features).squeeze(-1), []

    def distribution(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                     seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> Distribution:
        """The action distribution alone: what a policy step reads (TRPO's, PG's), without the
        value network's forward pass over the whole batch."""
        net, mask = split_mask(obs, self.mask)
        return self.distribution_of(self.policy_head(self.pi_body(net), mask))

    def policy_head(self, features: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The distribution's inputs from the policy's features, the logits ``mask`` forbids masked."""
        logits = self.pi_head(features)
        return logits if mask is None else masked(logits, mask)

    def value(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
              seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> torch.Tensor:
        """The values ``[B]`` alone: what a value-function fit reads, without the policy's."""
        net = split_mask(obs, self.mask)[0]
        return self.vf_head(self.pi_body(net) if self.vf_body is None else self.vf_body(net)).squeeze(-1)

    def distribution_of(self, dist_inputs: torch.Tensor) -> Distribution:
        if self.custom_dist is not None:
            return CustomDistribution(self.custom_dist[0], dist_inputs, self, self.layout)
        return action_distribution(self.layout, dist_inputs, self.log_std)

    def numpy_twin(self) -> Twin | None:
        if not isinstance(self.pi_body, nn.Sequential) or self.custom_dist is not None:
            return None  # the CNN, and a custom distribution's draws, act in torch
        return actor_critic_twin(named_arrays(self), self.activation, self.layout.space, self.mask)

    def numpy_head(self) -> Head:
        if self.traced_dist is not None:
            return self.traced_dist.head(self.pi_head.weight.device)
        return action_head(self.layout, None if self.log_std is None else self.log_std.detach().cpu().numpy())

    def policy_parameters(self) -> list[nn.Parameter]:
        params = [*self.pi_body.parameters(), *self.pi_head.parameters()]
        return params + ([self.log_std] if self.log_std is not None else [])

    def value_parameters(self) -> list[nn.Parameter]:
        body = [] if self.vf_body is None else list(self.vf_body.parameters())
        return body + list(self.vf_head.parameters())


class QNetwork(Policy):
    """Q-values ``[B, n]`` for ``Discrete`` actions (DQN), acting ε-greedily.

    A linear head on the MLP, Nature-CNN or custom body, or with ``dueling`` two streams,
    ``Q = V + A - mean(A)`` (Wang et al., 2016). ε is a parameter that no optimizer
    touches: it travels with the flat weights, so every worker explores with the
    learner's current ε on every engine.
    """

    def __init__(self, body: nn.Module, n_feat: int, action_space: gym.Space, model: ModelConfig,
                 dueling: bool, hiddens: Sequence[int] = (), mask: ObsMask | None = None) -> None:
        """``body`` turns observations into ``n_feat`` features: :func:`trunk`'s MLP or CNN, or a
        custom model (:mod:`volley.modelv2`). With ``mask``, the body reads the observation's
        columns ``mask.net`` and the Q-values of the actions the mask forbids are the dtype's minimum:
        never the greedy choice, never ε's draw, never the target's max."""
        super().__init__()
        n_actions = q_outputs(action_space)
        self.mask = mask
        self.activation = model.fcnet_activation
        self.body = body
        # hidden layers on the body (RLlib's DQN hiddens); empty by default, so holding no weights
        self.hidden = mlp(n_feat, hiddens, model.fcnet_activation, model.fcnet_init)
        n_feat = hiddens[-1] if hiddens else n_feat
        self.q_head = _layer(n_feat, n_actions, 1.0, model.fcnet_init)  # the advantage stream when dueling
        self.value_head = _layer(n_feat, 1, 1.0, model.fcnet_init) if dueling else None
        self.epsilon = nn.Parameter(torch.zeros(()), requires_grad=False)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, n]`` for observations ``[B, *obs_shape]``."""
        net, mask = split_mask(obs, self.mask)
        features = self.hidden(self.body(net))
        q = self.q_head(features)
        if self.value_head is not None:
            q = self.value_head(features) + q - q.mean(-1, keepdim=True)
        return q if mask is None else masked(q, mask)

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Q-values and the greedy values ``max_a Q``; feed-forward, so no state."""
        q = self.q_values(obs)
        return q, q.max(-1).values, []

    def distribution_of(self, dist_inputs: torch.Tensor) -> Distribution:
        """The ε-greedy distribution over Q-values ``dist_inputs``."""
        return EpsilonGreedy(dist_inputs, self.epsilon.item())

    def numpy_twin(self) -> Twin | None:
        if not isinstance(self.body, nn.Sequential):  # the CNN and custom bodies act in torch
            return None
        return q_network_twin(named_arrays(self), self.activation, self.mask)

    def numpy_head(self) -> Head:
        return epsilon_greedy_head(self.epsilon.item(), masked=self.mask is not None)

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
        self.body = mlp(obs_size, model.fcnet_hiddens, model.fcnet_activation, init="torch")
        self.head = nn.Linear(model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_size, 2 * dim)

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The head's output ``[B, 2d]`` (means, then log-stds) and zeros for values (SAC has none);
        feed-forward, so no state."""
        out = self.head(self.body(obs))
        return out, out.new_zeros(len(out)), []

    def distribution_of(self, dist_inputs: torch.Tensor) -> SquashedGaussian:
        mean, log_std = dist_inputs.chunk(2, -1)
        return SquashedGaussian(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX), bool(self.random_actions > 0.5))

    def distribution(self, obs: torch.Tensor) -> SquashedGaussian:
        """The policy at observations ``[B, obs_size]`` (never uniform: what the losses read)."""
        mean, log_std = self.head(self.body(obs)).chunk(2, -1)
        return SquashedGaussian(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX))

    def numpy_twin(self) -> Twin | None:
        return squashed_gaussian_twin(named_arrays(self), self.activation)

    def numpy_head(self) -> Head:
        return squashed_gaussian_head(bool(self.random_actions > 0.5))

    def actor_parameters(self) -> list[nn.Parameter]:
        """Everything the actor's optimizer trains: all parameters but ``random_actions``."""
        return [p for p in self.parameters() if p is not self.random_actions]

    def set_random_actions(self, on: bool) -> None:
        with torch.no_grad():
            self.random_actions.fill_(float(on))


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class StackedQ(nn.Module):
    """``k`` MLP Q-functions ``Q_i(s, a)`` of one shape, evaluated as one network: each layer's
    weights stacked ``[k, n_in, n_out]``, so a batched matrix product runs every critic at once
    (SAC's twin critics in one pass, and one optimizer tensor per layer instead of ``k``).
    Initialised as ``k`` independent ``nn.Linear`` stacks are (uniform in ±1/√n_in)."""

    def __init__(self, n_in: int, hiddens: Sequence[int], activation: str, k: int) -> None:
        super().__init__()
        # in place, on each fresh product (the product's backward never reads its output)
        self.k, self.activation = k, {"relu": torch.relu_, "tanh": torch.tanh_, "linear": _identity}[activation]
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

