"""RLlib's model protocol (``ModelV2``, old API stack), so RLlib users' custom models run unchanged.

A custom model subclasses :class:`TorchModelV2` and ``nn.Module``; it is built as
``cls(obs_space, action_space, num_outputs, model_config, name, **custom_model_config)``,
its ``forward(input_dict, state, seq_lens)`` returns ``(outputs, state)`` and its
``value_function()`` the values ``[B]`` of the last forward pass; a recurrent one also has
``get_initial_state()`` and reads its rows as padded sequences (:func:`add_time_dimension`,
:class:`RecurrentNetwork`). As in RLlib, ``input_dict["obs"]`` holds the observation in its original structure (a Dict or Tuple
observation restored from volley's flat preprocessed one: Discrete parts one-hot, Box parts
in their own shape) and ``input_dict["obs_flat"]`` the flat one.

:class:`FullyConnectedNetwork` is RLlib's built-in MLP, which custom models often wrap. volley
puts such a model behind its one network interface in :mod:`volley.torch_networks.custom_model`
(an actor-critic for PPO, PG and TRPO, or the body of DQN's Q-network), which
:mod:`volley.catalog` builds.
"""

from __future__ import annotations

import contextlib
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.errors import ConfigError
from volley.observations import ObsPreprocessor, flat_size

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
        call it, as RLlib's torch policy does
        (:func:`volley.torch_networks.custom_model.with_custom_loss`)."""
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
