"""The keys of every built-in algorithm: PPO, TRPO, PG (``on_policy``), DQN and Ape-X DQN (``dqn``),
IMPALA and APPO (``impala``), SAC and its asynchronous mode (``sac``); the keys replay-based
algorithms share (``replay``).

Each algorithm's file holds its training step; its config lives here, apart from it, because
a config travels to every rollout worker, and unpickling it there imports the module that
defines its class. This module imports no torch, so a worker whose network acts in numpy
(:mod:`volley.acting`) starts without importing torch: about a second of each Ray worker's
start-up (benchmarks/RESULTS.md, start-up). ``build()`` imports its algorithm when called.
"""

from volley.algorithm_configs.dqn import ApexDQNConfig, DQNConfig
from volley.algorithm_configs.impala import APPOConfig, IMPALAConfig
from volley.algorithm_configs.on_policy import PGConfig, PPOConfig, TRPOConfig
from volley.algorithm_configs.sac import ApexSACConfig, SACConfig

__all__ = ["APPOConfig", "ApexDQNConfig", "ApexSACConfig", "DQNConfig", "IMPALAConfig", "PGConfig", "PPOConfig",
           "SACConfig", "TRPOConfig"]
