"""R2D2: DQN with an LSTM Q-network trained on replayed sequences with burn-in (config, loss, learner).

The algorithm class loads on first use, so that importing the config imports no torch.
"""

from typing import TYPE_CHECKING

from volley.algorithms.r2d2.config import R2D2Config
from volley.registry import lazy_exports

if TYPE_CHECKING:
    from volley.algorithms.r2d2.learner import R2D2

__getattr__ = lazy_exports(__name__)

__all__ = ["R2D2", "R2D2Config"]
