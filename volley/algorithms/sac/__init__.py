"""SAC and Ape-X SAC (its asynchronous mode): configs (torch-free), losses, learners.

The algorithm classes load on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.sac.config import ApexSACConfig, SACConfig
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.sac.learner import SAC, ApexSAC

__getattr__ = lazy_exports(__name__)

__all__ = ["ApexSAC", "ApexSACConfig", "SAC", "SACConfig"]
