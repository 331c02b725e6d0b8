"""volley: reinforcement learning with parallel and distributed experience collection.

The public names load on first use (PEP 562), so importing one layer (``volley.engines``,
``volley.config``) never imports the layers above it; the first of them imports every
built-in algorithm, so each is registered by name.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from volley._version import __version__

if TYPE_CHECKING:
    from volley.algorithm import Algorithm
    from volley.algorithms import (
        APPO,
        DQN,
        IMPALA,
        PG,
        PPO,
        SAC,
        TRPO,
        ApexDQN,
        ApexDQNConfig,
        ApexSAC,
        ApexSACConfig,
        APPOConfig,
        DQNConfig,
        IMPALAConfig,
        PGConfig,
        PPOConfig,
        SACConfig,
        TRPOConfig,
        get_trainable_cls,
    )
    from volley.callbacks import DefaultCallbacks, Episode, RLlibCallback, make_multi_callbacks
    from volley.catalog import ModelCatalog
    from volley.config import AlgorithmConfig, ModelConfig
    from volley.distributions import (
        ActionDistribution,
        TorchCategorical,
        TorchDiagGaussian,
        TorchDistributionWrapper,
    )
    from volley.envs import TaskSettableEnv, register_env
    from volley.errors import CallbackError, CheckpointError, ConfigError, EnvError, VolleyError
    from volley.learner.evaluation import collect_episodes, summarize_episodes
    from volley.modelv2 import (
        FullyConnectedNetwork,
        RecurrentNetwork,
        TorchModelV2,
        add_time_dimension,
    )

_HOMES = {
    "Algorithm": "volley.algorithm", "AlgorithmConfig": "volley.config", "ModelConfig": "volley.config",
    "register_env": "volley.envs", "TaskSettableEnv": "volley.envs", "ModelCatalog": "volley.catalog",
    "TorchModelV2": "volley.modelv2",
    "FullyConnectedNetwork": "volley.modelv2", "RecurrentNetwork": "volley.modelv2",
    "add_time_dimension": "volley.modelv2",
    **dict.fromkeys(["collect_episodes", "summarize_episodes"], "volley.learner.evaluation"),
    **dict.fromkeys(["ActionDistribution", "TorchCategorical", "TorchDiagGaussian", "TorchDistributionWrapper"],
                    "volley.distributions"),
    **dict.fromkeys(["CallbackError", "CheckpointError", "ConfigError", "EnvError", "VolleyError"], "volley.errors"),
    **dict.fromkeys(["DefaultCallbacks", "Episode", "RLlibCallback", "make_multi_callbacks"], "volley.callbacks"),
    **dict.fromkeys(["APPO", "APPOConfig", "IMPALA", "IMPALAConfig", "ApexDQN", "ApexDQNConfig", "ApexSAC",
                     "ApexSACConfig", "DQN", "DQNConfig", "PG", "PGConfig", "PPO", "PPOConfig", "SAC", "SACConfig",
                     "TRPO", "TRPOConfig", "get_trainable_cls"], "volley.algorithms"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'volley' has no attribute {name!r}")
    importlib.import_module("volley.algorithms")  # registers the built-in algorithms by name
    if "ray" in sys.modules and _HOMES[name] in ("volley.algorithms", "volley.config"):
        importlib.import_module("volley.tune")  # a Ray script: Tune's "PPO" runs volley's PPO from now on
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    """The public names, loaded or not (tab completion and ``dir(volley)`` show what to import)."""
    return sorted(__all__)


__all__ = ["APPO", "APPOConfig", "IMPALA", "IMPALAConfig", "ActionDistribution", "ApexDQN", "ApexDQNConfig", "ApexSAC",
           "ApexSACConfig", "DQN", "DQNConfig", "PG", "PGConfig", "PPO", "Algorithm", "AlgorithmConfig",
           "CallbackError", "CheckpointError", "ConfigError", "DefaultCallbacks", "EnvError", "Episode",
           "FullyConnectedNetwork", "ModelCatalog", "ModelConfig", "PPOConfig", "RLlibCallback", "RecurrentNetwork",
           "SAC", "SACConfig", "TRPO", "TRPOConfig", "TaskSettableEnv", "TorchCategorical", "TorchDiagGaussian",
           "TorchDistributionWrapper",
           "TorchModelV2", "VolleyError", "__version__", "add_time_dimension", "collect_episodes",
           "get_trainable_cls", "make_multi_callbacks", "register_env", "summarize_episodes"]
