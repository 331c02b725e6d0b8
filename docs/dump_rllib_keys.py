"""Dump RLlib's own config keys and defaults into volley/rllib_keys.json (run it with RLlib installed).

volley promises that a real RLlib key is never "unknown". This script asks RLlib itself
which keys its configs have: for every RLlib algorithm that volley also has, the
``to_dict()`` of its config class with the new API stack and with the old one
(``api_stack(enable_rl_module_and_learner=..., enable_env_runner_and_connector_v2=...)``
both ways), ``model={...}``'s keys included. RLlib is never a dependency of volley or its
tests: the dump is committed, ``volley.rllib_compat`` reads RLlib's defaults from it, and
``tests/unit/test_rllib_keys.py`` checks that volley's table names every key in it and
takes every default in it.

Run it once per RLlib version, in a virtual environment with that RLlib (and torch), from
the repository root; a second version merges into the same file:

    /work/venvs/rllib/bin/python docs/dump_rllib_keys.py      # ray[rllib]==2.60.0
    /work/venvs/rllib29/bin/python docs/dump_rllib_keys.py    # ray[rllib]==2.9.3 (old stack only)

then ``python docs/generate.py`` and the tests. A key that a newer RLlib adds fails
``test_every_dumped_key_is_in_volleys_table`` until it gets a line in volley's table.

Values that JSON cannot hold are written as ``{"__object__": "module:QualName"}`` (RLlib's
default callbacks class, its default policy-mapping function); tuples become lists.
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import ray
from packaging.version import Version

OUT = Path(__file__).resolve().parent.parent / "volley" / "rllib_keys.json"

# RLlib's name -> where its config class lives; the algorithms volley has, or is adding (TRPO is not
# an RLlib algorithm). Ones that a given RLlib lacks (PG and Ape-X went after 2.9) are skipped.
ALGORITHMS = {
    "PPO": ["ray.rllib.algorithms.ppo:PPOConfig"],
    "PG": ["ray.rllib.algorithms.pg:PGConfig"],
    "DQN": ["ray.rllib.algorithms.dqn:DQNConfig"],
    "APEX_DQN": ["ray.rllib.algorithms.apex_dqn:ApexDQNConfig"],
    "SAC": ["ray.rllib.algorithms.sac:SACConfig"],
    "APPO": ["ray.rllib.algorithms.appo:APPOConfig"],
    "IMPALA": ["ray.rllib.algorithms.impala:IMPALAConfig", "ray.rllib.algorithms.impala:ImpalaConfig"],
}
# RLlib 2.9's new stack was an alpha (RLModule and Learner without EnvRunners); its users ran
# the old one, so only that is dumped for versions before 2.10
FIRST_STABLE_NEW_STACK = Version("2.10")


def encoded(value: Any) -> Any:
    """``value`` as JSON data: classes and functions by their import path, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): encoded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encoded(v) for v in value]
    if isinstance(value, enum.Enum):
        return encoded(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (type, types.FunctionType)):
        return {"__object__": f"{value.__module__}:{value.__qualname__}"}
    raise TypeError(f"no JSON form for {value!r} ({type(value).__name__}): teach encoded() this type, and "
                    "volley's table how to recognise RLlib's default")


def config_class(paths: list[str]) -> type | None:
    """The first of ``paths`` this RLlib has (IMPALA's config was ImpalaConfig in 2.9)."""
    for path in paths:
        module, _, name = path.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    return None


def dump_version() -> dict[str, dict[str, dict[str, Any]]]:
    """``{algorithm: {"new_stack": to_dict(), "old_stack": to_dict()}}`` for the RLlib installed."""
    stacks = {"old_stack": False}
    if Version(ray.__version__) >= FIRST_STABLE_NEW_STACK:
        stacks = {"new_stack": True, **stacks}
    dumped: dict[str, dict[str, dict[str, Any]]] = {}
    for name, paths in ALGORITHMS.items():
        cls = config_class(paths)
        if cls is None:
            print(f"  {name}: not in RLlib {ray.__version__}")
            continue
        dumped[name] = {}
        for stack, new in stacks.items():
            config = cls()
            if hasattr(config, "api_stack"):
                config = config.api_stack(enable_rl_module_and_learner=new,
                                          enable_env_runner_and_connector_v2=new)
            dumped[name][stack] = encoded(dict(sorted(config.to_dict().items())))
            print(f"  {name} {stack}: {len(dumped[name][stack])} keys, "
                  f"{len(dumped[name][stack].get('model', {}))} model keys")
    return dumped


def main() -> None:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    versions = data.get("rllib", {})
    print(f"RLlib {ray.__version__} (python {sys.version.split()[0]}):")
    versions[ray.__version__] = dump_version()
    data = {
        "about": "RLlib's config keys and their defaults: AlgorithmConfig.to_dict() of each algorithm "
                 "volley has, per RLlib version and API stack. Written by docs/dump_rllib_keys.py "
                 "(run it with RLlib installed); do not edit by hand.",
        "rllib": dict(sorted(versions.items(), key=lambda item: Version(item[0]))),
    }
    OUT.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
