"""DQN and Ape-X DQN (DQN's update on the loop of :mod:`volley.algorithms.apex`): configs, loss, learners.

The algorithm classes load on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.dqn.config import ApexDQNConfig, DQNConfig
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.dqn.apex import ApexDQN
    from volley.algorithms.dqn.learner import DQN

__getattr__ = lazy_exports(__name__)

__all__ = ["ApexDQN", "ApexDQNConfig", "DQN", "DQNConfig"]
