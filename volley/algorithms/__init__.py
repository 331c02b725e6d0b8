"""One module per algorithm; importing this package registers the built-in ones by name."""

from __future__ import annotations

from volley.algorithm import Algorithm
from volley.algorithm_configs import (
    ApexDQNConfig,
    ApexSACConfig,
    APPOConfig,
    DQNConfig,
    IMPALAConfig,
    PGConfig,
    PPOConfig,
    SACConfig,
    TRPOConfig,
)
from volley.algorithms.apex_dqn import ApexDQN
from volley.algorithms.appo import APPO
from volley.algorithms.dqn import DQN
from volley.algorithms.impala import IMPALA
from volley.algorithms.pg import PG
from volley.algorithms.ppo import PPO
from volley.algorithms.sac import SAC, ApexSAC
from volley.algorithms.trpo import TRPO
from volley.config import AlgorithmConfig

# The built-in algorithms, in the order the docs and the CLI list them
ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "trpo": TRPO, "pg": PG, "dqn": DQN,
                                          "apex_dqn": ApexDQN, "impala": IMPALA, "appo": APPO, "sac": SAC,
                                          "apex_sac": ApexSAC}


# RLlib's registry names that are not volley's own
RLLIB_NAMES = {"apex": "apex_dqn"}


def get_algorithm_class(name: str) -> type[Algorithm]:
    """The algorithm called ``name`` (case-insensitive: 'ppo', 'PPO', 'ApexDQN', RLlib's 'APEX')."""
    return Algorithm.named(RLLIB_NAMES.get(name.lower(), name))


def get_trainable_cls(name: str) -> type[Algorithm]:
    """RLlib's ``ray.tune.registry.get_trainable_cls``: the algorithm class by its RLlib name, as in
    ``get_trainable_cls("PPO").get_default_config()``."""
    return get_algorithm_class(name)


def get_config_class(name: str) -> type[AlgorithmConfig]:
    return get_algorithm_class(name).config_class


__all__ = ["ALGORITHMS", "APPO", "APPOConfig", "IMPALA", "IMPALAConfig", "ApexDQN", "ApexDQNConfig", "ApexSAC",
           "ApexSACConfig", "DQN", "DQNConfig", "PG", "PPO", "PGConfig", "PPOConfig", "SAC", "SACConfig", "TRPO",
           "TRPOConfig", "get_algorithm_class", "get_config_class", "get_trainable_cls"]
