"""volley's own actor-critic in torch (PPO, PG, TRPO, IMPALA, APPO): an MLP for vector observations
(separate or shared policy and value bodies) or the Nature CNN for images, with the inputs of the
action space's distribution as its outputs (:mod:`volley.action_dists`: a categorical for
``Discrete`` actions, a diagonal Gaussian with a state-independent log-std for ``Box`` actions, a
product of parts for the others), masked where the observation carries an action mask. The MLP
acts through its numpy twin, :mod:`volley.networks.actor_critic`; the CNN in torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from volley.action_dists import Distribution, action_distribution, masked
from volley.config import ModelConfig
from volley.distributions import CustomDistribution
from volley.heads import Head, action_head, policy_outputs
from volley.networks.actor_critic import actor_critic_twin
from volley.networks.numpy_layers import Twin
from volley.observations import ObsMask
from volley.spaces import action_layout
from volley.torch_networks.layers import linear_layer, named_arrays, split_mask, trunk
from volley.torch_networks.policy import ActorCriticPolicy, TorchPrevious
from volley.traced_dists import TracedDistribution


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
        self.pi_head = linear_layer(n_feat, n_out, 0.01, model.fcnet_init)
        self.vf_head = linear_layer(n_feat, 1, 1.0, model.fcnet_init)
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
