"""A user's custom model (RLlib's ``ModelV2``, :mod:`volley.modelv2`) behind volley's one network
interface (:class:`volley.torch_networks.policy.Policy`).

:class:`ModelV2ActorCritic` serves PPO, PG and TRPO (the outputs are the action distribution's
inputs, RLlib's sizes: logits, a float ``Box``'s means then log-stds, leaf after leaf of a
composite space, see :mod:`volley.spaces`; or a custom action distribution's inputs), and
:class:`ModelV2Features` is the body of DQN's Q-network (the outputs are features, under volley's
Q head, as RLlib's DQN puts its own head on a custom model). They act in numpy where their forward
pass traces (:mod:`volley.traced`), else in torch, one forward pass per step for a worker's
environments. A model's own loss and metrics reach the algorithms through
:func:`with_custom_loss` and :func:`model_metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.action_dists import Distribution, action_distribution, masked
from volley.distributions import CustomDistribution
from volley.errors import ConfigError, shown
from volley.heads import Head, action_head
from volley.modelv2 import TorchModelV2
from volley.networks.numpy_layers import State, Twin
from volley.observations import ObsMask, ObsPreprocessor
from volley.spaces import action_layout
from volley.torch_networks.lstm import zero_previous
from volley.torch_networks.policy import ActorCriticPolicy, TorchPrevious
from volley.traced import TracedActing
from volley.traced_dists import TracedDistribution


def actor_critic_outputs(action_space: gym.Space) -> tuple[int, str]:
    """``num_outputs`` of a custom actor-critic model for ``action_space``, as RLlib's catalog
    sizes it (:mod:`volley.spaces`: logits, a float Box's means then log-stds), and what they are
    (for error messages); a ConfigError naming a space volley cannot take."""
    layout = action_layout(action_space)
    return layout.inputs(log_stds=True).width, layout.describe_inputs(log_stds=True)


class _ModelV2Input(nn.Module):
    """Holds the model and calls it on volley's preprocessed observations ``[B, *obs_shape]``: a
    Box observation of rank 2 or more (not an image) gets its own shape back first (volley's
    preprocessing flattened it, RLlib's did not)."""

    def __init__(self, model: TorchModelV2, preprocess: ObsPreprocessor) -> None:
        super().__init__()
        assert isinstance(model, nn.Module)
        self.model = model
        space = model.obs_space
        self.box_shape = space.shape if (isinstance(space, gym.spaces.Box) and not preprocess.is_image
                                         and len(space.shape) != 1) else None
        self.name = type(model).__name__
        self.probe_obs = torch.zeros((2, *preprocess.shape), dtype=torch.uint8 if preprocess.is_image else
                                     torch.float32)

    def probe(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The outputs (and values, where there are some) of a batch of two zero observations, in
        eval mode (no dropout draws, no batch-norm statistics moved): the catalog checks a model's
        shapes with it before any data, and the parameters' uses are read from it."""
        training = self.training
        self.eval()
        try:
            return self._outputs_and_values(self.probe_obs.to(next(self.parameters()).device))
        finally:
            self.train(training)

    def _outputs_and_values(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def call_model(self, obs: torch.Tensor, state: Sequence[torch.Tensor], seq_lens: torch.Tensor | None,
                   prev: TorchPrevious = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if self.box_shape is not None:
            obs = obs.reshape(len(obs), *self.box_shape)
        input_dict = {"obs": obs, "is_training": self.training}
        if prev is not None:  # lstm_use_prev_action / _reward set: RLlib's view requirements' names
            input_dict["prev_actions"], input_dict["prev_rewards"] = prev
        outputs, state_out = self.model(input_dict, list(state), seq_lens)
        if not isinstance(outputs, torch.Tensor) or outputs.shape != (len(obs), self.model.num_outputs):
            shape = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
            raise ConfigError(f"custom model {self.name} returned outputs of shape {shape}: expected "
                              f"({len(obs)}, {self.model.num_outputs}), {self.expected}")
        return outputs, list(state_out)

    expected = ""  # what the outputs are, for the error above


class ModelV2ActorCritic(_ModelV2Input, ActorCriticPolicy):
    """A custom model as PPO's, PG's and TRPO's network: its outputs are the inputs of the action
    distribution (RLlib's: logits, or a Gaussian's means then log-stds), ``value_function()``
    the values. Parameters are split for PG and TRPO by what depends on them (found once, by
    autograd on a probe batch): the policy's are those the outputs depend on, the value
    function's those only the values depend on (its own branch or head), as for volley's own
    network with a shared body."""

    def __init__(self, model: TorchModelV2, preprocess: ObsPreprocessor, action_space: gym.Space,
                 custom_dist: type | None = None) -> None:
        """``custom_dist``: a custom action distribution class built on the outputs (RLlib's
        ``custom_action_dist``); None: volley's for the action space. An action mask among the
        observation's columns (``preprocess.mask``) reaches the model with the rest of the
        observation, as in RLlib, and masks its outputs (logits) here."""
        super().__init__(model, preprocess)
        self.layout = action_layout(action_space)
        self.custom_dist = custom_dist
        self.mask = None if preprocess.mask is None else ObsMask(preprocess.mask.mask, slice(None))
        self.expected = (self.layout.describe_inputs(log_stds=True) if custom_dist is None else
                         f"what custom action dist {custom_dist.__name__} requires (required_model_output_shape)")
        self._split: tuple[list[nn.Parameter], list[nn.Parameter]] | None = None
        self.recurrent = bool(model.get_initial_state())
        self.action_space = action_space
        # RLlib's view requirements of an LSTM: the previous action and reward in input_dict
        self.reads_prev = bool(model.model_config.get("lstm_use_prev_action")
                               or model.model_config.get("lstm_use_prev_reward"))
        self.traced = TracedActing(self, self.name)
        self.traced_dist = None if custom_dist is None else TracedDistribution(custom_dist, model, self, self.layout)

    def numpy_twin(self) -> Twin | None:
        """Acting through the model traced into numpy (:mod:`volley.traced`), in torch where it does not trace."""
        return self.traced.twin(self.numpy_head(), self._torch_twin)

    def initial_state(self) -> State:
        return [np.asarray(s.detach().cpu() if isinstance(s, torch.Tensor) else s)
                for s in self.model.get_initial_state()]

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        if not state and self.recurrent:  # rows without a state: each a sequence of one from the start
            state = [torch.as_tensor(s, device=obs.device).expand(len(obs), *s.shape) for s in self.initial_state()]
            seq_lens = torch.ones(len(obs), dtype=torch.int32, device=obs.device)
        if prev is None and self.reads_prev:
            prev = zero_previous(self.action_space, len(obs), obs.device)
        outputs, state_out = self.call_model(obs, state, seq_lens, prev)
        values = self.model.value_function()
        if not isinstance(values, torch.Tensor) or values.shape != (len(obs),):
            shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
            raise ConfigError(f"custom model {self.name}'s value_function() returned shape {shape}: "
                              f"expected ({len(obs)},), one value per row (reshape it to [-1])")
        if self.mask is not None:
            outputs = masked(outputs, obs[:, self.mask.mask])
        return outputs, values, state_out

    def numpy_head(self) -> Head:
        if self.traced_dist is not None:
            return self.traced_dist.head(next(self.parameters()).device)
        return action_head(self.layout, None)

    def distribution_of(self, dist_inputs: torch.Tensor) -> Distribution:
        if self.custom_dist is not None:
            return CustomDistribution(self.custom_dist, dist_inputs, self.model, self.layout)
        return action_distribution(self.layout, dist_inputs, None)

    def distribution(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                     seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> Distribution:
        return self.distribution_of(self.outputs(obs, state, seq_lens, prev)[0])

    def value(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
              seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> torch.Tensor:
        return self.outputs(obs, state, seq_lens, prev)[1]

    def _outputs_and_values(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        outputs, values, _ = self.outputs(obs)
        return outputs, values

    def _parameters_by_use(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        if self._split is None:
            params = [p for p in self.parameters() if p.requires_grad]
            outputs, values = self.probe()
            assert values is not None
            of_outputs = torch.autograd.grad(outputs.sum(), params, allow_unused=True, retain_graph=True)
            # a value that no parameter computes (a policy-only model for REINFORCE, whose
            # value_function() is a constant) has no value parameters
            of_values = (torch.autograd.grad(values.sum(), params, allow_unused=True) if values.requires_grad
                         else (None,) * len(params))
            self._split = ([p for p, g in zip(params, of_outputs, strict=True) if g is not None],
                           [p for p, g, h in zip(params, of_outputs, of_values, strict=True)
                            if h is not None and g is None])
        return self._split

    def policy_parameters(self) -> list[nn.Parameter]:
        return self._parameters_by_use()[0]

    def value_parameters(self) -> list[nn.Parameter]:
        return self._parameters_by_use()[1]


class ModelV2Features(_ModelV2Input):
    """A custom model as the body of DQN's Q-network: its outputs are features, under volley's
    Q head (``hiddens``, ``dueling``), as RLlib's DQN puts its head on a custom model."""

    expected = "the features under the Q head (num_outputs: the last of fcnet_hiddens)"

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.call_model(obs, [], None)[0]

    def _outputs_and_values(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self(obs), None


def with_custom_loss(policy: Any, loss: torch.Tensor, loss_inputs: dict[str, Any]) -> torch.Tensor:
    """``loss`` after a custom model's ``custom_loss([loss], loss_inputs)``, as RLlib's torch policy
    calls it after the algorithm's loss (``loss`` itself for volley's own networks). volley's
    algorithms have one optimizer, so the model returns one loss."""
    model = getattr(policy, "model", None) if isinstance(policy, ModelV2ActorCritic) else None
    if model is None or not hasattr(model, "custom_loss"):  # volley's network, or a model without one
        return loss
    out = model.custom_loss([loss], loss_inputs)
    losses = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(losses) != 1 or not isinstance(losses[0], torch.Tensor) or losses[0].dim() != 0:
        raise ConfigError(f"custom model {type(model).__name__}.custom_loss() returned {shown(out)}: volley's "
                          "algorithms have one optimizer, so it must return a list of one scalar loss tensor "
                          "(add the model's loss to policy_loss[0])")
    return losses[0]


def model_metrics(policy: Any) -> dict[str, Any]:
    """``{"model": metrics}`` of a custom model that reports ``metrics()`` (RLlib reports them after
    each update, under ``info/learner/default_policy/model``); ``{}`` otherwise."""
    if not isinstance(policy, ModelV2ActorCritic) or not hasattr(policy.model, "metrics"):
        return {}
    found = {key: value.item() if isinstance(value, torch.Tensor) else value
             for key, value in policy.model.metrics().items()}
    return {"model": found} if found else {}


def adds_custom_loss(policy: Any) -> bool:
    """Whether ``policy`` holds a custom model overriding ``custom_loss`` (volley's base class's and
    RLlib's add nothing)."""
    wrappers = [module for module in policy.modules() if isinstance(module, _ModelV2Input)]  # DQN's: its body
    if not wrappers:
        return False
    owner = next((cls for cls in type(wrappers[0].model).__mro__ if "custom_loss" in vars(cls)), TorchModelV2)
    return owner is not TorchModelV2 and not owner.__module__.startswith("ray.rllib.models")
