"""DQN's Q-network in torch: Q-values on volley's MLP, the Nature CNN or a custom model's features,
plain or dueling, acting ε-greedily. The MLP's acts through its numpy twin,
:mod:`volley.networks.q_network`."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from volley.action_dists import Distribution, EpsilonGreedy, masked
from volley.config import ModelConfig
from volley.heads import Head, epsilon_greedy_head, q_outputs
from volley.networks.numpy_layers import Twin
from volley.networks.q_network import q_network_twin
from volley.observations import ObsMask
from volley.torch_networks.layers import linear_layer, mlp, named_arrays, split_mask
from volley.torch_networks.policy import Policy, TorchPrevious


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
        self.q_head = linear_layer(n_feat, n_actions, 1.0, model.fcnet_init)  # the advantage stream when dueling
        self.value_head = linear_layer(n_feat, 1, 1.0, model.fcnet_init) if dueling else None
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
