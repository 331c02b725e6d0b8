"""PG (REINFORCE): its config (torch-free), its loss (a pure function) and its learner step.

The algorithm classes load on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.pg.config import PGConfig
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.pg.learner import PG

__getattr__ = lazy_exports(__name__)

__all__ = ["PG", "PGConfig"]
