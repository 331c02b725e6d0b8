"""TRPO: its config (torch-free), its surrogate (a pure function) and its learner step.

The algorithm classes load on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.trpo.config import TRPOConfig
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.trpo.learner import TRPO

__getattr__ = lazy_exports(__name__)

__all__ = ["TRPO", "TRPOConfig"]
