"""PPO: its config (torch-free), its loss (pure functions on tensors) and its learner step.

The algorithm classes load on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.ppo.config import PPOConfig
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.ppo.learner import PPO

__getattr__ = lazy_exports(__name__)

__all__ = ["PPO", "PPOConfig"]
