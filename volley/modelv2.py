"""RLlib's model protocol (``ModelV2``, old API stack), so RLlib users' custom models run unchanged.

A custom model subclasses :class:`TorchModelV2` and ``nn.Module``; it is built as
``cls(obs_space, action_space, num_outputs, model_config, name, **custom_model_config)``,
its ``forward(input_dict, state, seq_lens)`` returns ``(outputs, state)`` and its
``value_function()`` the values ``[B]`` of the last forward pass; a recurrent one also has
``get_initial_state()`` and reads its rows as padded sequences (:func:`add_time_dimension`,
:class:`RecurrentNetwork`). As in RLlib, ``input_dict["obs"]`` holds the observation in its original structure (a Dict or Tuple
observation restored from volley's flat preprocessed one: Discrete parts one-hot, Box parts
in their own shape) and ``input_dict["obs_flat"]`` the flat one.

volley puts such a model behind its one network interface (:class:`volley.torch_networks.policy.Policy`):
:class:`ModelV2ActorCritic` for PPO, PG and TRPO (the outputs are the action distribution's
inputs, RLlib's sizes: logits, a float ``Box``'s means then log-stds, leaf after leaf of a
composite space, see :mod:`volley.spaces`; or a custom action distribution's inputs), and
:class:`ModelV2Features` as the body of DQN's Q-network (the outputs are
features, under volley's Q head, as RLlib's DQN puts its own head on a custom model).
:class:`FullyConnectedNetwork` is RLlib's built-in MLP, which custom models often wrap.
:mod:`volley.catalog` builds them; they act in numpy where their forward pass traces
(:mod:`volley.traced`), else in torch, one forward pass per step for a worker's environments.
"""

from __future__ import annotations

import contextlib
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
from volley.networks.numpy_layers import State, Twin
from volley.observations import ObsMask, ObsPreprocessor, flat_size
from volley.spaces import action_layout
from volley.torch_networks.lstm import zero_previous
from volley.torch_networks.policy import ActorCriticPolicy, TorchPrevious
from volley.traced import TracedActing
from volley.traced_dists import TracedDistribution

# RLlib's defaults (2.9, MODEL_DEFAULTS) of the model keys a custom model may read; its
# model_config is these, then volley's model keys, then what the user set
RLLIB_MODEL_DEFAULTS: dict[str, Any] = {
    "fcnet_hiddens": [256, 256], "fcnet_activation": "tanh", "fcnet_weights_initializer": None,
    "fcnet_weights_initializer_config": None, "fcnet_bias_initializer": None,
    "fcnet_bias_initializer_config": None, "conv_filters": None, "conv_activation": "relu",
    "post_fcnet_hiddens": [], "post_fcnet_activation": "relu", "free_log_std": False,
    "no_final_linear": False, "vf_share_layers": True, "use_lstm": False, "max_seq_len": 20,
    "lstm_cell_size": 256, "lstm_use_prev_action": False, "lstm_use_prev_reward": False,
    "_time_major": False, "use_attention": False, "framestack": True, "dim": 84, "grayscale": False,
    "zero_mean": True, "custom_model": None, "custom_model_config": {}, "custom_action_dist": None,
    "custom_preprocessor": None, "encoder_latent_dim": None, "always_check_shapes": False,
    "_disable_preprocessor_api": False, "_disable_action_flattening": False,
}

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "swish": nn.SiLU,
                                           "silu": nn.SiLU, "elu": nn.ELU}


def activation_layer(name: str | None) -> list[nn.Module]:
    """RLlib's activation names as a layer; none for ``"linear"`` or None."""
    if name in (None, "linear"):
        return []
    if name not in ACTIVATIONS:
        raise ConfigError(f"activation {name!r} is not supported: choose from "
                          f"{', '.join(map(repr, [*ACTIVATIONS, 'linear']))}")
    return [ACTIVATIONS[name]()]


# -- observations in their original structure ------------------------------------------------


def restore_original_dimensions(obs: Any, obs_space: gym.Space, tensorlib: Any = "torch") -> Any:
    """A batch of flat observations ``[..., flat_size]`` as the structure of ``obs_space``'s
    ``original_space`` (or of ``obs_space``): a Dict or Tuple of tensors, each in its own
    shape (Discrete parts one-hot). Anything else, or observations already restored, come back
    as they are. RLlib's function of the same name; torch tensors or numpy arrays."""
    return _unpack(obs, getattr(obs_space, "original_space", obs_space))


def _unpack(obs: Any, space: gym.Space) -> Any:
    if not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return obs
    if isinstance(obs, (dict, tuple, list)):  # restored already
        return obs
    size = flat_size(space)
    if len(obs.shape) < 2 or obs.shape[-1] != size:
        raise ConfigError(f"observations of shape {tuple(obs.shape)} do not fit {space}: expected "
                          f"[..., {size}], its flattened size")
    batch, offset = tuple(obs.shape[:-1]), 0
    parts = []
    subspaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
    for subspace in subspaces:
        width = flat_size(subspace)
        shape = subspace.shape if isinstance(subspace, gym.spaces.Box) else (width,)
        parts.append(_unpack(obs[..., offset:offset + width].reshape(*batch, *shape), subspace))
        offset += width
    if isinstance(space, gym.spaces.Dict):
        return dict(zip(space.spaces, parts, strict=True))
    return tuple(parts)


def model_observation_space(space: gym.Space, preprocess: ObsPreprocessor) -> gym.Space:
    """The observation space a model is built with, as RLlib gives it: a Box stays itself; a
    Dict, Tuple or Discrete space becomes the flat ``Box`` of the preprocessed observations, with
    the original space as its ``original_space`` (what :func:`restore_original_dimensions` reads)."""
    if isinstance(space, gym.spaces.Box):
        return space
    flat = gym.spaces.Box(-1.0, 1.0, preprocess.shape, np.float32)
    flat.original_space = space  # type: ignore[attr-defined]
    return flat


# -- the protocol ----------------------------------------------------------------------------


class TorchModelV2:
    """Base of a custom model, as in RLlib: ``class MyModel(TorchModelV2, nn.Module)``, calling
    ``TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)`` and
    ``nn.Module.__init__(self)`` in its constructor; override :meth:`forward` and
    :meth:`value_function` (and :meth:`get_initial_state` for a recurrent one)."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int,
                 model_config: dict, name: str) -> None:
        if not isinstance(self, nn.Module):
            raise ConfigError(f"custom model {type(self).__name__} must subclass torch.nn.Module too: "
                              f"class {type(self).__name__}(TorchModelV2, nn.Module)")
        # not super().__init__(): nn.Module's may run before this one and must not run again
        self.obs_space = obs_space
        self.action_space = action_space
        self.num_outputs = num_outputs
        self.model_config = model_config
        self.name = name or "default_model"
        self.framework = "torch"
        self.time_major = model_config.get("_time_major")
        self.tower_stats: dict[str, Any] = {}
        self._last_output: torch.Tensor | None = None

    def get_initial_state(self) -> list[Any]:
        """One environment's recurrent state at an episode start (arrays or tensors without the
        batch dimension); ``[]``: a feed-forward model."""
        return []

    def forward(self, input_dict: dict[str, Any], state: list[torch.Tensor],
                seq_lens: torch.Tensor | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The outputs ``[B, num_outputs]`` and the state after this pass (``state`` as given
        for a feed-forward model)."""
        raise NotImplementedError

    def value_function(self) -> torch.Tensor:
        """The values ``[B]`` of the last :meth:`forward` pass."""
        raise NotImplementedError

    def custom_loss(self, policy_loss: Any, loss_inputs: dict[str, Any]) -> Any:
        """The losses ``policy_loss`` (a list of one) with the model's own loss added (a
        regularisation, an auxiliary loss); ``loss_inputs``: the minibatch's columns. PPO and PG
        call it, as RLlib's torch policy does (:func:`with_custom_loss`)."""
        return policy_loss

    def metrics(self) -> dict[str, Any]:
        """Numbers reported after each update under ``info/learner/default_policy/model``."""
        return {}

    def __call__(self, input_dict: dict[str, Any], state: list[torch.Tensor] | None = None,
                 seq_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` on ``input_dict`` with ``"obs"`` restored to the original structure
        and ``"obs_flat"`` the flat observations, as RLlib's ``ModelV2.__call__``."""
        restored = dict(input_dict)
        obs = input_dict["obs"]
        restored["obs"] = restore_original_dimensions(obs, self.obs_space)
        restored["obs_flat"] = obs.flatten(1) if isinstance(obs, torch.Tensor) and obs.dim() > 2 else obs
        result = self.forward(restored, state or [], seq_lens)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ConfigError(f"custom model {type(self).__name__}'s forward() must return (outputs, "
                              f"state), got {type(result).__name__}")
        outputs, state_out = result
        if not isinstance(state_out, list):
            raise ConfigError(f"custom model {type(self).__name__}'s forward() returned a state of "
                              f"type {type(state_out).__name__}: it must be a list ([] for no state)")
        self._last_output = outputs
        return outputs, state_out if state_out else (state or [])

    def last_output(self) -> torch.Tensor | None:
        return self._last_output

    def context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def variables(self, as_dict: bool = False) -> list[torch.Tensor] | dict[str, torch.Tensor]:
        assert isinstance(self, nn.Module)
        named: dict[str, torch.Tensor] = dict(self.named_parameters())
        return named if as_dict else list(named.values())

    def trainable_variables(self, as_dict: bool = False) -> list[torch.Tensor] | dict[str, torch.Tensor]:
        assert isinstance(self, nn.Module)
        named: dict[str, torch.Tensor] = {name: p for name, p in self.named_parameters() if p.requires_grad}
        return named if as_dict else list(named.values())

    def is_time_major(self) -> bool:
        return self.time_major is True


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


def add_time_dimension(padded_inputs: torch.Tensor, *, seq_lens: torch.Tensor, framework: str = "torch",
                       time_major: bool = False) -> torch.Tensor:
    """Rows ``[S·T, ...]`` of ``len(seq_lens)`` padded sequences as ``[S, T, ...]`` (``[T, S, ...]``
    with ``time_major``): RLlib's function, what a recurrent model's ``forward`` calls."""
    if framework != "torch":
        raise ConfigError(f"add_time_dimension(framework={framework!r}): volley's models are torch only")
    count = len(seq_lens)
    batched = padded_inputs.reshape(count, len(padded_inputs) // count, *padded_inputs.shape[1:])
    return batched.transpose(0, 1) if time_major else batched


class RecurrentNetwork(TorchModelV2):
    """RLlib's helper for a recurrent custom model: override :meth:`forward_rnn`, which gets the
    flat observations with a time dimension ``[S, T, obs_size]``, the state (each ``[S, ...]``) and
    ``seq_lens``, and returns outputs ``[S, T, num_outputs]`` and the state after them; and
    :meth:`get_initial_state` and :meth:`value_function` (``[S·T]``)."""

    def forward(self, input_dict: dict[str, Any], state: list[torch.Tensor],
                seq_lens: torch.Tensor | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if seq_lens is None:  # rows without sequences: one step each
            seq_lens = torch.ones(len(input_dict["obs_flat"]), dtype=torch.int32)
        inputs = add_time_dimension(input_dict["obs_flat"].float(), seq_lens=seq_lens)
        output, new_state = self.forward_rnn(inputs, state, seq_lens)
        return output.reshape(-1, self.num_outputs), new_state

    def forward_rnn(self, inputs: torch.Tensor, state: list[torch.Tensor],
                    seq_lens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The outputs ``[S, T, num_outputs]`` and the state after each sequence."""
        raise NotImplementedError


def _linear(n_in: int, n_out: int, gain: float) -> nn.Linear:
    """volley's own initialisation (orthogonal; Huang et al., 2022), where RLlib uses normc."""
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class FullyConnectedNetwork(TorchModelV2, nn.Module):
    """RLlib's built-in MLP: ``fcnet_hiddens`` then ``post_fcnet_hiddens`` with
    ``fcnet_activation`` (``post_fcnet_activation`` when ``fcnet_hiddens`` is empty), a linear
    layer to ``num_outputs`` (none with ``no_final_linear``: the last hidden layer has
    ``num_outputs`` units; none for ``num_outputs`` 0 or None: the outputs are the features),
    a value branch of its own unless ``vf_share_layers``, and with ``free_log_std`` the second
    half of the outputs a learned constant (a Gaussian's state-independent log-std)."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int | None,
                 model_config: dict, name: str) -> None:
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs or 0, model_config, name)
        nn.Module.__init__(self)
        hiddens = list(model_config.get("fcnet_hiddens", [])) + list(model_config.get("post_fcnet_hiddens", []))
        activation = model_config.get("fcnet_activation" if model_config.get("fcnet_hiddens") else
                                      "post_fcnet_activation")
        self.vf_share_layers = bool(model_config.get("vf_share_layers"))
        self.free_log_std = bool(model_config.get("free_log_std"))
        n_out = num_outputs or 0
        if self.free_log_std:
            if n_out % 2:
                raise ConfigError(f"free_log_std needs an even num_outputs (means and log-stds), got {n_out}")
            n_out //= 2
        n_in = int(np.prod(obs_space.shape or ()))
        layers: list[nn.Module] = []
        width = n_in
        sizes = hiddens[:-1] + ([n_out] if model_config.get("no_final_linear") and n_out else hiddens[-1:])
        for size in sizes:
            layers += [_linear(width, size, np.sqrt(2)), *activation_layer(activation)]
            width = size
        self._hidden_layers = nn.Sequential(*layers)
        self._logits = None
        if n_out and not model_config.get("no_final_linear"):
            self._logits = _linear(width, n_out, 0.01)
        elif not n_out:
            self.num_outputs = width  # the outputs are the last hidden layer's features
        self._log_std = nn.Parameter(torch.full((n_out,), float(model_config.get("log_std_init", 0.0)))) \
            if self.free_log_std and self._logits is not None else None
        self._value_branch_separate: nn.Sequential | None = None
        value_width = width
        if not self.vf_share_layers:
            vf_layers: list[nn.Module] = []
            value_width = n_in
            for size in hiddens:
                vf_layers += [_linear(value_width, size, np.sqrt(2)), *activation_layer(activation)]
                value_width = size
            self._value_branch_separate = nn.Sequential(*vf_layers)
        self._value_branch = _linear(value_width, 1, 1.0)
        self._features: torch.Tensor | None = None
        self._last_flat_in: torch.Tensor | None = None

    def forward(self, input_dict: dict[str, Any], state: list[torch.Tensor],
                seq_lens: torch.Tensor | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs_flat"].float()
        self._last_flat_in = obs.reshape(obs.shape[0], -1)
        self._features = self._hidden_layers(self._last_flat_in)
        logits = self._logits(self._features) if self._logits is not None else self._features
        if self._log_std is not None:
            logits = torch.cat([logits, self._log_std.expand_as(logits)], dim=1)
        return logits, state

    def value_function(self) -> torch.Tensor:
        assert self._features is not None and self._last_flat_in is not None, "call forward() first"
        if self._value_branch_separate is not None:
            return self._value_branch(self._value_branch_separate(self._last_flat_in)).squeeze(1)
        return self._value_branch(self._features).squeeze(1)


# -- a custom model behind volley's network interface -----------------------------------------


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
