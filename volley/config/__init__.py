"""Algorithm configuration: typed dataclass fields plus RLlib-style builder sugar.

A config is data. Every key is a dataclass field with a type, a default and a
one-line help text; the builder methods (``.environment()``, ``.rollouts()``,
``.training()``, ...) all funnel into one validated :meth:`AlgorithmConfig.update`.
Values that follow from others (the fragment length, the worker count on
``"auto"``) are resolved once by the driver into a :class:`RolloutPlan`, never stored twice.

One role a module, each class layered on the one before: ``model`` (ModelConfig, RolloutPlan),
``schema`` (the fields and :func:`option`), ``setter`` (the one validated setter), ``builder``
(RLlib's builder methods), ``access`` (serialisation, dict-like access), ``checks`` (derived
values, validation) and ``algorithm_config`` (AlgorithmConfig and ``build()``).
"""

from volley.config.algorithm_config import AlgorithmConfig
from volley.config.model import ModelConfig, NetworkKind, RolloutPlan
from volley.config.schema import option

__all__ = ["AlgorithmConfig", "ModelConfig", "NetworkKind", "RolloutPlan", "option"]
