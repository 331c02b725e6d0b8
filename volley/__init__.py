"""volley: reinforcement learning with parallel and distributed experience collection.

The public names load on first use (PEP 562), so importing one layer (``volley.engines``,
``volley.config``) never imports the layers above it; the first of them imports every
built-in algorithm, so each is registered by name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from volley._version import __version__

if TYPE_CHECKING:
    from volley.algorithm import Algorithm
    from volley.algorithms import (
        DQN,
        PG,
        PPO,
        SAC,
        TRPO,
        ApexDQN,
        ApexDQNConfig,
        ApexSAC,
        ApexSACConfig,
        DQNConfig,
        PGConfig,
        PPOConfig,
        SACConfig,
        TRPOConfig,
    )
    from volley.config import AlgorithmConfig, ModelConfig
    from volley.envs import register_env
    from volley.errors import CheckpointError, ConfigError, EnvError, VolleyError

_HOMES = {
    "Algorithm": "volley.algorithm", "AlgorithmConfig": "volley.config", "ModelConfig": "volley.config",
    "register_env": "volley.envs", **dict.fromkeys(["CheckpointError", "ConfigError", "EnvError",
                                                    "VolleyError"], "volley.errors"),
    **dict.fromkeys(["ApexDQN", "ApexDQNConfig", "ApexSAC", "ApexSACConfig", "DQN", "DQNConfig", "PG", "PGConfig", "PPO", "PPOConfig",
                     "SAC", "SACConfig", "TRPO", "TRPOConfig"], "volley.algorithms"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'volley' has no attribute {name!r}")
    importlib.import_module("volley.algorithms")  # registers the built-in algorithms by name
    return getattr(importlib.import_module(_HOMES[name]), name)


__all__ = ["ApexDQN", "ApexDQNConfig", "ApexSAC", "ApexSACConfig", "DQN", "DQNConfig", "PG", "PGConfig", "PPO", "Algorithm", "AlgorithmConfig", "CheckpointError", "ConfigError", "EnvError",
           "ModelConfig", "PPOConfig", "SAC", "SACConfig", "TRPO", "TRPOConfig", "VolleyError", "__version__", "register_env"]
