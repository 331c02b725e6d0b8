"""SAC's networks in torch: the squashed Gaussian actor, which acts through its numpy twin
(:mod:`volley.networks.squashed_gaussian`), and the critics, ``k`` Q-functions as one stacked
network that stays on the learner."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from volley.action_dists import SquashedGaussian
from volley.config import ModelConfig
from volley.heads import LOG_STD_MAX, LOG_STD_MIN, Head, squashed_gaussian_head, squashed_outputs
from volley.networks.numpy_layers import Twin
from volley.networks.squashed_gaussian import squashed_gaussian_twin
from volley.torch_networks.layers import mlp, named_arrays
from volley.torch_networks.policy import Policy, TorchPrevious


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
