"""One module per algorithm; this index maps names to their classes."""

from __future__ import annotations

from volley.algorithm import Algorithm
from volley.algorithms.apex_dqn import ApexDQN, ApexDQNConfig
from volley.algorithms.dqn import DQN, DQNConfig
from volley.algorithms.pg import PG, PGConfig
from volley.algorithms.ppo import PPO, PPOConfig
from volley.algorithms.trpo import TRPO, TRPOConfig
from volley.config import AlgorithmConfig
from volley.errors import ConfigError, did_you_mean

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "trpo": TRPO, "pg": PG, "dqn": DQN,
                                          "apex_dqn": ApexDQN}


def get_algorithm_class(name: str) -> type[Algorithm]:
    """The algorithm called ``name`` (case-insensitive: 'ppo', 'PPO')."""
    by_class_name = {cls.__name__.lower(): cls for cls in ALGORITHMS.values()}  # 'ApexDQN' in checkpoints
    try:
        return ALGORITHMS.get(name.lower()) or by_class_name[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown algorithm '{name}'{did_you_mean(name.lower(), ALGORITHMS)}; "
                          f"choose from {', '.join(ALGORITHMS)}") from None


def get_config_class(name: str) -> type[AlgorithmConfig]:
    return get_algorithm_class(name).config_class


__all__ = ["ALGORITHMS", "ApexDQN", "ApexDQNConfig", "DQN", "DQNConfig", "PG", "PPO", "PGConfig", "PPOConfig", "TRPO", "TRPOConfig", "get_algorithm_class", "get_config_class"]
