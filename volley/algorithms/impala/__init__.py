"""IMPALA (V-trace) and APPO (IMPALA's actors, PPO's clipped surrogate): configs, losses, learners.

The algorithm classes load on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.impala.config import APPOConfig, IMPALAConfig
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.impala.appo import APPO
    from volley.algorithms.impala.learner import IMPALA

__getattr__ = lazy_exports(__name__)

__all__ = ["APPO", "APPOConfig", "IMPALA", "IMPALAConfig"]
