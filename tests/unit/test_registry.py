"""The one registry (volley.registry): every name it holds builds its own algorithm, and the
public names, the CLI's and Tune's are read from it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import volley
from volley.algorithm import Algorithm
from volley.algorithms import get_config_class, get_trainable_cls
from volley.errors import ConfigError
from volley.registry import REGISTRY, public_homes


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_name_names_its_config_and_algorithm(name):
    config_cls, algo_cls = get_config_class(name), get_trainable_cls(name)
    assert config_cls.algo_name == name
    assert algo_cls.config_class is config_cls
    assert Algorithm.named(algo_cls.__name__) is algo_cls  # as a checkpoint's manifest names it
    assert getattr(volley, algo_cls.__name__) is algo_cls and getattr(volley, config_cls.__name__) is config_cls


def test_build_builds_the_algorithm_the_config_names():
    """The class is the registry's whatever the engine; the local one builds without starting Ray
    (building on each engine is tests/engines/'s)."""
    algo = (get_config_class("pg")().environment("CartPole-v1").training(batch_episodes=1)
            .update(engine="local").build())
    try:
        assert type(algo) is get_trainable_cls("pg")
    finally:
        algo.stop()


def test_an_unknown_name_is_one_line_naming_it():
    with pytest.raises(ConfigError, match=r"unknown algorithm 'ppoo'; did you mean .*'ppo'"):
        get_trainable_cls("ppoo")


def test_every_config_imports_without_torch():
    """A worker unpickling its run's config imports the config's package: no torch there."""
    code = ("import sys\nfrom volley.algorithms import get_config_class\n"
            f"for name in {list(REGISTRY)!r}: get_config_class(name)().validate()\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_public_names_are_the_registry_s():
    assert set(public_homes()) <= set(volley.__all__)
