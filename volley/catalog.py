"""The catalog: (observation space, action space, model config) → a network behind one interface.

:func:`build_network` is the one place a network is made, for the learner and for every worker,
from a :class:`volley.network_spec.NetworkSpec`: volley's own MLP or Nature CNN (:mod:`volley.torch_networks`; an MLP acts through its numpy twin),
either with an LSTM on it (``use_lstm``, :mod:`volley.torch_networks.lstm`), or a user's custom model
(:mod:`volley.modelv2`, RLlib's ``ModelV2`` protocol; it acts in numpy where it traces,
:mod:`volley.traced`, else in torch).
Each is a :class:`volley.torch_networks.policy.Policy`: distribution inputs, values and a recurrent state
(``[]`` for a feed-forward network).

:class:`ModelCatalog` is RLlib's name for it, for the calls RLlib users' scripts make:
``ModelCatalog.register_custom_model(name, cls)`` and ``ModelCatalog.get_model_v2(...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

import gymnasium as gym
import torch
from torch import nn

from volley.acting import parameter_shapes
from volley.config import ModelConfig, NetworkKind
from volley.distributions import required_outputs
from volley.errors import ConfigError
from volley.modelv2 import (
    RLLIB_MODEL_DEFAULTS,
    FullyConnectedNetwork,
    TorchModelV2,
    model_observation_space,
)
from volley.named import CUSTOM_ACTION_DISTS, CUSTOM_MODELS, NamedObjects, has_methods
from volley.network_spec import NetworkSpec
from volley.observations import ObsMask, ObsPreprocessor
from volley.torch_networks.actor_critic import ActorCritic
from volley.torch_networks.custom_model import (
    ModelV2ActorCritic,
    ModelV2Features,
    actor_critic_outputs,
)
from volley.torch_networks.layers import trunk
from volley.torch_networks.lstm import LSTMActorCritic, LSTMQNetwork
from volley.torch_networks.policy import Policy
from volley.torch_networks.q_network import QNetwork
from volley.torch_networks.squashed_gaussian import SquashedGaussianActor


class ModelCatalog:
    """RLlib's ``ModelCatalog`` (old API stack), as far as custom models go."""

    @staticmethod
    def register_custom_model(model_name: str, model_class: type) -> None:
        """Make ``model={"custom_model": model_name}`` build ``model_class``. The class travels to
        Ray workers with their recipe (by value when its module is a script or a test file), so
        it is registered once, in the driver's process (and, under MPI, by the script every rank
        runs)."""
        check_model_class(model_name, model_class)
        CUSTOM_MODELS.register(model_name, model_class)

    @staticmethod
    def register_custom_action_dist(action_dist_name: str, action_dist_class: type) -> None:
        """Make ``model={"custom_action_dist": action_dist_name}`` build ``action_dist_class`` on the
        model's outputs (PPO, PG, TRPO). It travels to the workers as a custom model does."""
        check_action_dist_class(action_dist_name, action_dist_class)
        CUSTOM_ACTION_DISTS.register(action_dist_name, action_dist_class)

    @staticmethod
    def get_preprocessor_for_space(observation_space: gym.Space) -> ObsPreprocessor:
        """How volley lays out observations of ``observation_space`` in batches, as RLlib's
        preprocessors do (Discrete one-hot, Dict and Tuple concatenated in key order):
        ``transform(observation)`` gives one observation's array, ``shape`` and ``size`` its size."""
        return ObsPreprocessor(observation_space)

    @staticmethod
    def get_model_v2(obs_space: gym.Space, action_space: gym.Space, num_outputs: int | None,
                     model_config: dict, framework: str = "torch", name: str = "default_model",
                     model_interface: Any = None, default_model: type | None = None,
                     **model_kwargs: Any) -> TorchModelV2:
        """The model ``model_config`` names (its ``custom_model``, a registered name or a class),
        else ``default_model``, else :class:`FullyConnectedNetwork`; built as RLlib builds it, a
        custom model with ``custom_model_config`` over ``model_kwargs`` as keyword arguments."""
        if framework != "torch":
            raise ConfigError(f"get_model_v2(framework={framework!r}): volley's models are torch only")
        if model_interface is not None:
            raise ConfigError("get_model_v2(model_interface=...) is not supported by volley: its algorithms "
                              "put their own heads on a custom model")
        custom = model_config.get("custom_model")
        if custom is None:
            model_class = default_model or FullyConnectedNetwork
        else:
            model_class = custom if isinstance(custom, type) else custom_model_class(custom)
        kwargs = {**model_kwargs, **model_config.get("custom_model_config", {})} if custom is not None else {}
        return construct(model_class, obs_space, action_space, num_outputs, model_config, name, kwargs)


# RLlib's ModelV2 protocol: what volley calls on a custom model, whichever base class it has
MODEL_METHODS = ("forward", "value_function", "get_initial_state")
# RLlib's action distribution protocol (old API stack)
DIST_METHODS = ("required_model_output_shape", "logp", "sample", "deterministic_sample", "entropy")


def check_model_class(name: str, model_class: Any) -> None:
    """A ConfigError naming ``name`` unless ``model_class`` is a torch module with ModelV2's methods,
    whose base class is not checked: volley's ``TorchModelV2`` or RLlib's
    (``ray.rllib.models.torch.torch_modelv2``), RLlib's ``RecurrentNetwork`` or its model classes
    (``DQNTorchModel``) subclassed."""
    if not (isinstance(model_class, type) and issubclass(model_class, nn.Module)
            and has_methods(model_class, MODEL_METHODS)):
        raise ConfigError(f"custom model {name!r} is {model_class!r}: it must be a torch.nn.Module with "
                          f"ModelV2's methods {', '.join(MODEL_METHODS)} (class MyModel(TorchModelV2, "
                          "nn.Module), TorchModelV2 from volley or from ray.rllib)")


def check_action_dist_class(name: str, dist_class: Any) -> None:
    """A ConfigError naming ``name`` unless ``dist_class`` is a class of RLlib's action distribution
    protocol (volley's ``ActionDistribution`` or ``TorchDistributionWrapper``, or RLlib's)."""
    if not (isinstance(dist_class, type) and has_methods(dist_class, DIST_METHODS)):
        raise ConfigError(f"custom action dist {name!r} is {dist_class!r}: it must be a class with RLlib's "
                          f"action distribution methods {', '.join(DIST_METHODS)} (class "
                          "MyDist(TorchDistributionWrapper), from volley or from ray.rllib)")


def checked_class(registry: NamedObjects, name: str, found: type | None, check: Callable[[str, Any], None]) -> type:
    """The class ``name`` found (``model["custom_model"]``, ``model["custom_action_dist"]``), passed by
    ``check``; a ConfigError if none was found."""
    if found is None:
        raise ConfigError(registry.missing(name))
    check(name, found)
    return found


def custom_model_class(name: str) -> type:
    """The class ``model["custom_model"]`` names in this process; a ConfigError if there is none."""
    return checked_class(CUSTOM_MODELS, name, CUSTOM_MODELS.find(name), check_model_class)


def model_config_dict(model: ModelConfig) -> dict[str, Any]:
    """The ``model_config`` a custom model is given: RLlib's defaults, then volley's model keys,
    then RLlib's other keys the user set beside ``custom_model``."""
    own = {key: value for key, value in vars(model).items() if key != "rllib_model_keys"}
    return {**RLLIB_MODEL_DEFAULTS, **own, **model.rllib_model_keys}


def construct(model_class: type, obs_space: gym.Space, action_space: gym.Space, num_outputs: int | None,
              model_config: dict, name: str, kwargs: dict[str, Any]) -> TorchModelV2:
    """``model_class(obs_space, action_space, num_outputs, model_config, name, **kwargs)``, or, as
    RLlib falls back for older models, without ``kwargs`` if it takes none; an exception of the
    user's constructor becomes a ConfigError naming the class."""
    label = getattr(model_class, "__name__", repr(model_class))
    try:
        try:
            model = model_class(obs_space, action_space, num_outputs, model_config, name, **kwargs)
        except TypeError as exc:
            if not kwargs or "unexpected keyword" not in str(exc):
                raise
            model = model_class(obs_space, action_space, num_outputs, model_config, name)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"custom model {label} failed to build: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module) or not has_methods(type(model), MODEL_METHODS):
        raise ConfigError(f"custom model {label} built a {type(model).__name__}, not a torch.nn.Module "
                          f"with ModelV2's methods {', '.join(MODEL_METHODS)}")
    return cast(TorchModelV2, model)  # of the protocol: volley's class, RLlib's, or neither


def build_policy(obs_space: gym.Space, action_space: gym.Space, model: ModelConfig,
                 network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = (),
                 model_class: type | None = None, *, action_mask_key: str = "action_mask",
                 action_dist_class: type | None = None) -> tuple[ObsPreprocessor, Policy]:
    """The observation layout and the network for a pair of spaces and a model config, as
    :func:`build_network` builds them (``model_class``, ``action_dist_class``: the classes of
    ``model.custom_model`` and ``model.custom_action_dist``; None: found by name in this process)."""
    spec = NetworkSpec.for_model(model, network, head_hiddens, action_mask_key)
    spec = replace(spec, model_class=model_class or spec.model_class,
                   action_dist_class=action_dist_class or spec.action_dist_class).with_spaces(obs_space, action_space)
    return spec.observation, build_network(spec)


def build_network(spec: NetworkSpec) -> Policy:
    """The network ``spec`` (bound to its spaces) describes; a clear error for spaces or classes it
    cannot take. Its observation layout (``spec.observation``) says which columns it reads; a Dict
    observation holding ``spec.action_mask_key`` masks the actions
    (:func:`volley.observations.find_action_mask`)."""
    pre, model, network = spec.observation, spec.model, spec.network
    obs_space, action_space = spec.spaces
    dist_class = None
    if model.custom_action_dist is not None:
        dist_class = checked_class(CUSTOM_ACTION_DISTS, model.custom_action_dist, spec.action_dist_class,
                                   check_action_dist_class)
        if network != "actor_critic":
            raise ConfigError(f"custom_action_dist {model.custom_action_dist!r} is for PPO, PG and TRPO: DQN "
                              "and Ape-X act ε-greedily on their Q-values")
        if pre.mask is not None:
            raise ConfigError(f"observation key {spec.action_mask_key!r} is an action mask, and volley masks the "
                              f"logits of its own distributions only: with custom_action_dist "
                              f"{model.custom_action_dist!r}, mask inside the distribution and rename the key "
                              "(or set action_mask_key)")
    if model.custom_model is not None:
        model_class = checked_class(CUSTOM_MODELS, model.custom_model, spec.model_class, check_model_class)
        policy = _custom_policy(pre, action_space, model, network, spec.head_hiddens, model_class, dist_class)
    elif network == "actor_critic":
        custom_dist = None if dist_class is None else (
            dist_class, required_outputs(dist_class, action_space, model_config_dict(model)))
        kind = LSTMActorCritic if model.use_lstm else ActorCritic
        policy = kind(pre.net_shape, pre.is_image, action_space, model, pre.mask, custom_dist)
    elif network == "squashed_gaussian":
        if pre.is_image:
            raise ConfigError(f"observation space {obs_space} is images: SAC's networks are MLPs over "
                              "vector observations")
        policy = SquashedGaussianActor(pre.net_shape[0], action_space, model)
    else:
        body, n_feat = trunk(pre.net_shape, pre.is_image, model)
        q_kind: type[QNetwork] = LSTMQNetwork if network == "recurrent_q" else QNetwork
        policy = q_kind(body, n_feat, action_space, model, dueling=network == "dueling_q",
                        hiddens=spec.head_hiddens, mask=pre.mask)
    if spec.acts_in_numpy:
        # workers slice its flat weights by this layout, without torch
        layout = parameter_shapes(pre.net_shape[0], action_space, model, network, spec.head_hiddens)
        assert [(name, tuple(p.shape)) for name, p in policy.named_parameters()] == layout, \
            "volley.acting.parameter_shapes no longer describes this network"
    if dist_class is not None:
        _check_custom_dist(policy, pre, dist_class)
    return policy


def _custom_policy(pre: ObsPreprocessor, action_space: gym.Space, model: ModelConfig, network: NetworkKind,
                   head_hiddens: Sequence[int], model_class: type, dist_class: type | None) -> Policy:
    """A custom model as an actor-critic (its outputs: the distribution's inputs) or as the body of
    a Q-network (its outputs: features, as many as the last of ``fcnet_hiddens``, RLlib's DQN rule)."""
    obs_space = model_observation_space(pre.space, pre)
    config = model_config_dict(model)
    kwargs = dict(model.custom_model_config)
    if network == "actor_critic":
        num_outputs = (actor_critic_outputs(action_space)[0] if dist_class is None
                       else required_outputs(dist_class, action_space, config))
        built = construct(model_class, obs_space, action_space, num_outputs, config, "default_model", kwargs)
        actor_critic = ModelV2ActorCritic(built, pre, action_space, dist_class)
        with torch.no_grad():
            actor_critic.probe()  # a model whose outputs do not fit fails here, naming the shape expected
        return actor_critic
    num_outputs = ([256] + list(model.fcnet_hiddens))[-1]
    built = construct(model_class, obs_space, action_space, num_outputs, config, "q_func", kwargs)
    if built.get_initial_state():
        raise ConfigError(f"custom model {model_class.__name__} is recurrent (get_initial_state() is not "
                          "empty): DQN and Ape-X take feed-forward models")
    features = ModelV2Features(built, pre)
    with torch.no_grad():
        features.probe()
    mask = None if pre.mask is None else ObsMask(pre.mask.mask, slice(None))  # the model reads the mask too
    return QNetwork(features, num_outputs, action_space, model, dueling=network == "dueling_q",
                    hiddens=head_hiddens, mask=mask)


def _check_custom_dist(policy: Policy, pre: ObsPreprocessor, dist_class: type) -> None:
    """Build the custom action distribution on the outputs of two zero observations and take its
    ``deterministic_sample()`` and their ``logp``: a ConfigError naming it if it fails on the
    outputs it asked for, or if its actions do not have the flat layout of the action space."""
    assert isinstance(policy, ActorCritic | ModelV2ActorCritic)
    name, layout = dist_class.__name__, policy.layout
    obs = torch.zeros((2, *pre.shape), dtype=torch.uint8 if pre.is_image else torch.float32)
    training = policy.training
    policy.eval()
    try:
        with torch.no_grad():
            inputs = policy.outputs(obs)[0]
            dist = policy.distribution_of(inputs)
            actions = dist.mode()
            logp = dist.log_prob(actions)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"custom action dist {name} failed on the model's outputs of shape (2, {inputs.shape[1]}) "
                          f"(its required_model_output_shape): {type(exc).__name__}: {exc}") from exc
    finally:
        policy.train(training)
    want = (2,) if layout.kind == "discrete" else (2, layout.width)
    if tuple(actions.shape) != want:
        raise ConfigError(f"custom action dist {name}'s deterministic_sample() gave actions of shape "
                          f"{tuple(actions.shape)}: {layout.space} takes {want} (the flat layout: docs/extending.md)")
    if tuple(logp.shape) != (2,):
        raise ConfigError(f"custom action dist {name}'s logp() returned shape {tuple(logp.shape)}: expected (2,), "
                          "one log-probability per row")
