"""volley: reinforcement learning with parallel and distributed experience collection."""

from __future__ import annotations

__version__ = "0.1.0"

from volley.algorithm import Algorithm  # noqa: E402
from volley.algorithms.apex_dqn import ApexDQN, ApexDQNConfig  # noqa: E402
from volley.algorithms.dqn import DQN, DQNConfig  # noqa: E402
from volley.algorithms.pg import PG, PGConfig  # noqa: E402
from volley.algorithms.ppo import PPO, PPOConfig  # noqa: E402
from volley.algorithms.trpo import TRPO, TRPOConfig  # noqa: E402
from volley.config import AlgorithmConfig, ModelConfig  # noqa: E402
from volley.envs import register_env  # noqa: E402
from volley.errors import CheckpointError, ConfigError, EnvError, VolleyError  # noqa: E402

__all__ = ["ApexDQN", "ApexDQNConfig", "DQN", "DQNConfig", "PG", "PGConfig", "PPO", "Algorithm", "AlgorithmConfig", "CheckpointError", "ConfigError", "EnvError",
           "ModelConfig", "PPOConfig", "TRPO", "TRPOConfig", "VolleyError", "__version__", "register_env"]
