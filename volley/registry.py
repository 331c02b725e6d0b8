"""The one registry of algorithms: each name with its config class and its algorithm class.

volley's public names (``from volley import PPO, PPOConfig``), ``get_trainable_cls``, Tune's
trainable names, the CLI's ``--algo`` choices and the docs' tables are read from it, so a name
is written once. A config names its algorithm by its ``algo_name`` (the key here), so one
``AlgorithmConfig.build()`` serves every algorithm. The classes are written as import paths and
imported on first use: reading the registry imports no torch, and this module, in the config
layer, imports none of the algorithms' modules (docs/design.md). A new algorithm is a folder
under ``volley/algorithms/`` and one line of :data:`REGISTRY` (docs/adding_an_algorithm.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from volley.errors import ConfigError, did_you_mean

PACKAGE = "volley.algorithms"


@dataclass(frozen=True)
class Registered:
    """Where an algorithm's two classes live: ``"module:Class"``, the module under ``volley.algorithms``."""

    config: str
    algorithm: str

    def homes(self) -> dict[str, str]:
        """Each class's name and the module that defines it (``{"PPO": "volley.algorithms.ppo.learner"}``)."""
        return {name: f"{PACKAGE}.{module}" for module, _, name in
                (path.partition(":") for path in (self.config, self.algorithm))}


# The built-in algorithms, in the order the docs and the CLI list them
REGISTRY: dict[str, Registered] = {
    "ppo": Registered("ppo.config:PPOConfig", "ppo.learner:PPO"),
    "trpo": Registered("trpo.config:TRPOConfig", "trpo.learner:TRPO"),
    "pg": Registered("pg.config:PGConfig", "pg.learner:PG"),
    "dqn": Registered("dqn.config:DQNConfig", "dqn.learner:DQN"),
    "apex_dqn": Registered("dqn.config:ApexDQNConfig", "dqn.apex:ApexDQN"),
    "impala": Registered("impala.config:IMPALAConfig", "impala.learner:IMPALA"),
    "appo": Registered("impala.config:APPOConfig", "impala.appo:APPO"),
    "sac": Registered("sac.config:SACConfig", "sac.learner:SAC"),
    "apex_sac": Registered("sac.config:ApexSACConfig", "sac.learner:ApexSAC"),
    "a2c": Registered("a2c.config:A2CConfig", "a2c.learner:A2C"),
    "r2d2": Registered("r2d2.config:R2D2Config", "r2d2.learner:R2D2"),
}

# RLlib's registry names that are not volley's own
RLLIB_NAMES = {"apex": "apex_dqn"}


def registered_name(name: str) -> str | None:
    """The registry's key for ``name`` in any case: an ``algo_name`` ('ppo'), RLlib's name ('APEX')
    or a class name as checkpoints record it ('PPO', 'ApexDQN'); None if none."""
    key = RLLIB_NAMES.get(name.lower(), name.lower())
    if key in REGISTRY:
        return key
    return next((algo for algo, entry in REGISTRY.items()
                 if entry.algorithm.rpartition(":")[2].lower() == key), None)


def unknown_algorithm(name: str, known: list[str]) -> ConfigError:
    """The one-line error for an algorithm name that nothing registers."""
    return ConfigError(f"unknown algorithm '{name}'{did_you_mean(name.lower(), known)}; "
                       f"choose from {', '.join(sorted(known))}")


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(f"{PACKAGE}.{module}"), name)


def _entry(name: str) -> Registered:
    key = registered_name(name)
    if key is None:
        raise unknown_algorithm(name, list(REGISTRY))
    return REGISTRY[key]


def algorithm_class(name: str) -> Any:
    """The algorithm class registered as ``name`` (see :func:`registered_name`), imported now."""
    return _load(_entry(name).algorithm)


def config_class(name: str) -> Any:
    """The config class registered as ``name``; imports no torch."""
    return _load(_entry(name).config)


def public_homes() -> dict[str, str]:
    """Every registered class's name and its module: the public names of ``volley``."""
    return {name: home for entry in REGISTRY.values() for name, home in entry.homes().items()}


def package_exports(package: str) -> dict[str, str]:
    """The registered classes that ``volley.algorithms.<package>`` exports, with their modules."""
    return {name: home for name, home in public_homes().items() if home.startswith(f"{package}.")}


def lazy_exports(package: str) -> Any:
    """A PEP 562 ``__getattr__`` for an algorithm's package: its algorithm class is imported on
    first use (``volley.algorithms.ppo.PPO``), so importing its config imports no torch."""
    exports = package_exports(package)

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__
