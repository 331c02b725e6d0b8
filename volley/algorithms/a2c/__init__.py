"""A2C: its config (torch-free), its loss (a pure function on tensors) and its learner step.

The algorithm class loads on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.a2c.config import A2CConfig
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.a2c.learner import A2C

__getattr__ = lazy_exports(__name__)

__all__ = ["A2C", "A2CConfig"]
