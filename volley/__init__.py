"""volley: reinforcement learning with parallel and distributed experience collection.

The public names load on first use (PEP 562), so importing one layer (``volley.engines``,
``volley.config``) never imports the layers above it; the algorithms' names are read from the
registry (:mod:`volley.registry`), where each is written once.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from volley._version import __version__
from volley.registry import public_homes

if TYPE_CHECKING:
    from volley.algorithm import Algorithm
    from volley.algorithms import get_trainable_cls
    from volley.callbacks import DefaultCallbacks, Episode, RLlibCallback, make_multi_callbacks
    from volley.catalog import ModelCatalog
    from volley.config import AlgorithmConfig, ModelConfig
    from volley.distributions import (
        ActionDistribution,
        TorchCategorical,
        TorchDiagGaussian,
        TorchDistributionWrapper,
    )
    from volley.envs import TaskSettableEnv, TaskType, register_env
    from volley.errors import CallbackError, CheckpointError, ConfigError, EnvError, VolleyError
    from volley.learner.evaluation import collect_episodes, summarize_episodes
    from volley.modelv2 import (
        FullyConnectedNetwork,
        RecurrentNetwork,
        TorchModelV2,
        add_time_dimension,
    )
    from volley.multi_agent_env import (
        MultiAgentEnv,
        ParallelPettingZooEnv,
        PettingZooEnv,
        make_multi_agent,
    )
    from volley.rllib_policies import Policy, PolicySpec

_HOMES = {
    "Algorithm": "volley.algorithm", "AlgorithmConfig": "volley.config", "ModelConfig": "volley.config",
    "register_env": "volley.envs", "TaskSettableEnv": "volley.envs", "TaskType": "volley.envs", "ModelCatalog": "volley.catalog",
    "TorchModelV2": "volley.modelv2",
    "FullyConnectedNetwork": "volley.modelv2", "RecurrentNetwork": "volley.modelv2",
    "add_time_dimension": "volley.modelv2",
    **dict.fromkeys(["collect_episodes", "summarize_episodes"], "volley.learner.evaluation"),
    **dict.fromkeys(["ActionDistribution", "TorchCategorical", "TorchDiagGaussian", "TorchDistributionWrapper"],
                    "volley.distributions"),
    **dict.fromkeys(["CallbackError", "CheckpointError", "ConfigError", "EnvError", "VolleyError"], "volley.errors"),
    **dict.fromkeys(["DefaultCallbacks", "Episode", "RLlibCallback", "make_multi_callbacks"], "volley.callbacks"),
    "get_trainable_cls": "volley.algorithms",
    **dict.fromkeys(["MultiAgentEnv", "ParallelPettingZooEnv", "PettingZooEnv", "make_multi_agent"],
                    "volley.multi_agent_env"),
    **dict.fromkeys(["Policy", "PolicySpec"], "volley.rllib_policies"),
    **public_homes(),
}

# A Ray script that takes one of these from volley (a config, an algorithm, ``get_trainable_cls``, or
# the registries its config names: ``register_env``, ``ModelCatalog``) trains volley's algorithms,
# also where it names them to Tune only ("PPO", as RLlib's parametric_actions_cartpole does)
_TRAINING_HOMES = ("volley.algorithms", "volley.config", "volley.envs", "volley.catalog")


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'volley' has no attribute {name!r}")
    home = _HOMES[name]
    if "ray" in sys.modules and home.startswith(_TRAINING_HOMES):
        importlib.import_module("volley.tune")  # a Ray script: Tune's "PPO" runs volley's PPO from now on
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    """The public names, loaded or not (tab completion and ``dir(volley)`` show what to import)."""
    return sorted(__all__)


__all__ = ["ActionDistribution", "Algorithm", "AlgorithmConfig", "CallbackError", "CheckpointError", "ConfigError",
           "DefaultCallbacks", "EnvError", "Episode", "FullyConnectedNetwork", "ModelCatalog", "ModelConfig",
           "RLlibCallback", "RecurrentNetwork", "TaskSettableEnv", "TaskType", "TorchCategorical", "TorchDiagGaussian",
           "TorchDistributionWrapper", "TorchModelV2", "VolleyError", "__version__", "add_time_dimension",
           "collect_episodes", "get_trainable_cls", "make_multi_callbacks", "register_env", "summarize_episodes"]
__all__ += ["MultiAgentEnv", "ParallelPettingZooEnv", "PettingZooEnv", "Policy", "PolicySpec", "make_multi_agent"]
__all__ += public_homes()  # the algorithms' names, from the registry
