""":class:`AlgorithmConfig`: the schema with its setter, builder methods, dict access and checks,
and ``build()``, which constructs the algorithm its ``algo_name`` names in the registry.
"""

from __future__ import annotations

import typing
from dataclasses import InitVar, dataclass
from typing import Any

from volley.config.checks import ConfigChecks
from volley.errors import ConfigError, shown
from volley.registry import algorithm_class


@dataclass(kw_only=True)
class AlgorithmConfig(ConfigChecks):
    """Settings shared by every algorithm. Subclasses add their training keys.

    Build one with the fluent methods and call :meth:`build`::

        algo = PPOConfig().environment("CartPole-v1").rollouts(num_rollout_workers=2).build()

    ``algo_class`` (RLlib's argument): a subclass of the algorithm for :meth:`build` to construct.
    """

    algo_class: InitVar[type | None] = None

    def __post_init__(self, algo_class: type | None) -> None:
        vars(self)["_algo_class"] = algo_class  # not a key: a class, kept by copies as RLlib's config keeps it

    def build(self, env: Any = None) -> Any:
        """Validate and construct the algorithm that ``algo_name`` names in the registry
        (:mod:`volley.registry`), or the subclass of it given as ``algo_class``; ``env`` (RLlib's
        ``build(env=...)``) sets the environment of this config first."""
        if not self.algo_name:
            raise NotImplementedError(f"{type(self).__name__} names no algorithm to build")
        registered, given = algorithm_class(self.algo_name), vars(self).get("_algo_class")
        if given is not None and not (isinstance(given, type) and issubclass(given, registered)):
            raise ConfigError(f"{type(self).__name__}(algo_class={shown(given)}): give a subclass of "
                              f"{registered.__name__}")
        return (given or registered)(self._prepare_build(env))

    def build_algo(self, env: Any = None) -> Any:
        """RLlib's newer name of :meth:`build`."""
        return self.build(env)

    def _prepare_build(self, env: Any) -> typing.Self:
        """What every ``build(env=...)`` does first: set ``env`` on this config, as RLlib does."""
        return self if env is None else self.environment(env)
