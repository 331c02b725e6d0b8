"""A package per algorithm: its config (torch-free), its loss (pure functions), its learner step.

The registry (:mod:`volley.registry`) names them; this package's names are read from it and load
on first use (PEP 562), so that unpickling a config on a rollout worker, which imports its
package, imports no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from volley.registry import REGISTRY, RLLIB_NAMES, algorithm_class, config_class, public_homes

if TYPE_CHECKING:
    from volley.algorithm import Algorithm
    from volley.config import AlgorithmConfig
    from volley.rllib_keys import RLlibKey


def get_algorithm_class(name: str) -> type[Algorithm]:
    """The algorithm called ``name`` (case-insensitive: 'ppo', 'PPO', 'ApexDQN', RLlib's 'APEX')."""
    return algorithm_class(name)


def get_trainable_cls(name: str) -> type[Algorithm]:
    """RLlib's ``ray.tune.registry.get_trainable_cls``: the algorithm class by its RLlib name, as in
    ``get_trainable_cls("PPO").get_default_config()``."""
    return get_algorithm_class(name)


def get_config_class(name: str) -> type[AlgorithmConfig]:
    """The config class of the algorithm called ``name``; imports no torch."""
    return config_class(name)


def rllib_table() -> list[RLlibKey]:
    """Every entry of RLlib's keys, once: the shared ones and each registered config's slice (the
    table docs/rllib.md is generated from and tests/unit/test_rllib.py sets)."""
    entries: dict[int, RLlibKey] = {}
    for name in REGISTRY:
        for entry in config_class(name).rllib_keys():
            entries.setdefault(id(entry), entry)
    return list(entries.values())


def __getattr__(name: str) -> Any:
    if name == "ALGORITHMS":  # every built-in algorithm class by name, in the registry's order
        return {algo: algorithm_class(algo) for algo in REGISTRY}
    homes = public_homes()
    if name not in homes:
        raise AttributeError(f"module 'volley.algorithms' has no attribute {name!r}")
    return getattr(importlib.import_module(homes[name]), name)


__all__ = ["RLLIB_NAMES", "get_algorithm_class", "get_config_class", "get_trainable_cls", "rllib_table", *public_homes()]
