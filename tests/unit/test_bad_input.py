"""Bad input, tried systematically: random keys, values and types thrown at the config builder.

Every outcome must be a configuration that is valid by checks made here, independently
of volley's own (each value of its declared type, floats finite, the whole config
surviving the JSON round trip a checkpoint puts it through), or a ConfigError whose
one-line message names the key and the value at fault. Anything else (a TypeError, an
OverflowError, an IndexError from deep inside) fails the test.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from volley.algorithms import ALGORITHMS
from volley.config import AlgorithmConfig, ModelConfig
from volley.envs import register_env
from volley.errors import ConfigError, EnvError, VolleyError

CONFIGS = [cls.config_class for cls in ALGORITHMS.values()]
BUILDERS = ["environment", "rollouts", "env_runners", "training", "resources", "framework",
            "debugging", "evaluation", "reporting", "update"]
KEYS = sorted({name for cls in CONFIGS for name in [*cls.field_specs(), *cls.ALIASES]})

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
# What users really pass beside JSON: numpy numbers, tuples, bytes, sets, objects, model dicts
other_values = st.sampled_from([(1, 2), b"bytes", {1, 2}, object(), 1j, ModelConfig(),
                                ModelConfig(fcnet_hiddens="64"),  # type: ignore[arg-type]
                                {"fcnet_hiddens": [-1]}, {"fcnet_hiddens": (8, 8)}, {"fcnet_hidden": [8]},
                                {3: "int key"}, [[0, 1e-3], [10]], [[10, 1e-3], [0, 1e-4]], [[]]])
numpy_numbers = st.builds(lambda dtype, n: np.dtype(dtype).type(n),
                          st.sampled_from(["float32", "float64", "int64", "int32"]), st.integers(-10**6, 10**6))
values = json_data | other_values | numpy_numbers
keys = st.sampled_from(KEYS) | st.text(max_size=12)


def short(value: object) -> str:
    """How an error message shows a value: its repr, perhaps cut short (volley.config.shown)."""
    return repr(value)[:40]


def assert_valid(config: AlgorithmConfig) -> None:
    """The config is usable: every value of its declared type and the JSON round trip exact."""
    for name, (_, hint) in config.field_specs().items():
        value = getattr(config, name)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        allowed = typing.get_args(hint) if union else (hint,)
        if typing.get_origin(hint) is list and typing.get_args(hint) == (int,):
            assert all(type(item) is int for item in value), (name, value)
        if hint in (int, float) or int in allowed or float in allowed:
            assert not isinstance(value, bool), (name, value)
        if isinstance(value, float):
            assert math.isfinite(value), (name, value)
        if int in allowed and float not in allowed and not isinstance(value, str | None):
            assert type(value) is int, (name, value)
    for width in config.model.fcnet_hiddens:
        assert type(width) is int and width > 0
    data = json.loads(json.dumps(config.to_dict(), allow_nan=False))
    assert type(config).from_dict(data).to_dict() == config.to_dict()
    assert config.plan().fragment_length >= 1


def assert_names_the_fault(message: str, kwargs: dict[str, object], config: AlgorithmConfig) -> None:
    """One line that names a key given and that key's value (or a nested key within it)."""
    assert "\n" not in message and message, message
    for key, value in kwargs.items():
        name = config.ALIASES.get(key, key)
        if key not in message and name not in message and repr(key) not in message:
            continue
        current = getattr(config, name, value)
        if any(text in message for text in (short(value), str(value)[:40], short(current), str(current),
                                            f"{key}[", f"{name}[", "model.", "unknown", "is set with .")):
            return
    raise AssertionError(f"message names none of {kwargs!r}: {message}")


def apply(config: AlgorithmConfig, builder: str, kwargs: dict[str, object]) -> None:
    if builder == "framework":  # its one argument is positional: .framework("torch")
        config.framework(*kwargs.values())
    else:
        getattr(config, builder)(**kwargs)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cls=st.sampled_from(CONFIGS), builder=st.sampled_from(BUILDERS),
       kwargs=st.dictionaries(keys, values, min_size=1, max_size=3))
def test_random_builder_calls_give_a_valid_config_or_a_named_error(cls, builder, kwargs):
    if builder == "framework":  # one positional argument, reported as 'framework'
        kwargs = {"framework": next(iter(kwargs.values()))}
    config = cls()
    try:
        apply(config, builder, kwargs)
        config.validate()
    except ConfigError as exc:
        assert_names_the_fault(str(exc), kwargs, config)
        return
    assert_valid(config)


@settings(max_examples=200, deadline=None)
@given(cls=st.sampled_from(CONFIGS), key=st.sampled_from(KEYS),
       value=st.integers() | st.floats() | numpy_numbers | st.text(max_size=6) | st.none())
def test_every_key_takes_a_number_of_its_type_or_names_it(cls, key, value):
    """Numbers at the edges: huge ints, NaN, infinities, numpy scalars, negative counts."""
    config = cls()
    try:
        config.update(**{key: value})
        config.validate()
    except ConfigError as exc:
        assert_names_the_fault(str(exc), {key: value}, config)
        return
    assert_valid(config)


@pytest.mark.parametrize(("value", "shown"), [(float("nan"), "nan"), (float("-inf"), "-inf"),
                                              (10**400, "1000000000")])
def test_non_finite_and_huge_floats_are_named(value, shown):
    with pytest.raises(ConfigError, match=f"'lr' must be float or list\\[list\\[float\\]\\], got {shown}"):
        CONFIGS[0]().training(lr=value)


def test_model_config_instances_are_checked_like_dicts():
    bad = dataclasses.replace(ModelConfig(), fcnet_activation="gelu")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'model.fcnet_activation' must be 'tanh' or 'relu' or 'linear', got 'gelu'"):
        CONFIGS[0]().training(model=bad)


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"lr_schedule": [[]]}, r"'lr_schedule' must be a number or \[\[timestep, value\], ...\].*got \[\[\]\]"),
    ({"seed": -1}, r"'seed' must be in \[0, 2\*\*31\), got -1"),
    ({"env_config": {"make": lambda: 0}}, r"'env_config' must hold picklable values.*lambda"),  # RLlib: any picklable
    ({"num_workers": np.int64(3), "lr": np.float32(0.5)}, None),
])
def test_edge_values_found_by_the_property_tests(kwargs, pattern):
    config = CONFIGS[0]()
    if pattern is None:
        config.update(**kwargs).validate()
        assert (type(config.num_workers), type(config.lr)) == (int, float)
    else:
        with pytest.raises(ConfigError, match=pattern):
            config.update(**kwargs).validate()


# -- environments and clusters the run cannot use ------------------------------------------


class SpaceEnv(gym.Env):
    """Observes samples of any space (the ones the model cannot read are the point)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, space: gym.Space) -> None:
        self.observation_space = space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def local(env: str) -> AlgorithmConfig:
    return (CONFIGS[0]().environment(env).resources(engine="local")
            .rollouts(num_workers=0, num_envs_per_worker=2).training(train_batch_size=32, minibatch_size=32))


@pytest.mark.parametrize(("space", "named"), [
    (gym.spaces.Text(5), "Text(1, 5"),
    (gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None), "Graph(Box(0.0, 1.0, (2,), float32), None)"),
    (gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (2,)), "name": gym.spaces.Text(3)}), "Text(1, 3"),
    (gym.spaces.Sequence(gym.spaces.Discrete(2)), "Sequence(Discrete(2)"),
])
def test_observation_space_the_model_cannot_read_is_named(space, named):
    register_env("space-env", lambda cfg, space=space: SpaceEnv(space))
    with pytest.raises(VolleyError, match=r"observation space .* is not supported") as caught:
        local("space-env").build()
    assert named in str(caught.value)


@pytest.mark.parametrize(("creator", "pattern"), [
    (lambda cfg: 42, r"creator registered as 'bad-creator' returned int 42, not a gymnasium.Env"),
    (lambda cfg: gym.make_vec("CartPole-v1", 2), r"returned CartPoleVectorEnv CartPoleVectorEnv\(CartPole-v1, num_envs=2\), not a gymnasium"),
    (lambda: SpaceEnv(gym.spaces.Discrete(2)),
     r"creator registered as 'bad-creator' failed with env_config \{'size': 3\}: TypeError: .*argument"),
])
def test_env_creator_of_the_wrong_kind_is_named(creator, pattern):
    register_env("bad-creator", creator)
    with pytest.raises(EnvError, match=pattern):
        local("bad-creator").environment(env_config={"size": 3}).build()


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_a_ray_address_nobody_listens_on_fails_in_one_try(address, no_ray):
    """ray.init would retry for a minute or more; the TCP probe answers in one refused connect."""
    config = CONFIGS[0]().resources(engine="ray", ray_address=address).rollouts(num_workers=1)
    with pytest.raises(ConfigError, match=f"nothing answers at ray_address='{address}'"):
        config.build()


@pytest.mark.parametrize("address", ["headnode", "headnode:port", "10.0.0.1:70000"])
def test_a_malformed_ray_address_is_named(address, no_ray):
    config = CONFIGS[0]().resources(engine="ray", ray_address=address).rollouts(num_workers=1)
    with pytest.raises(ConfigError, match=f"ray_address='{address}' is not 'auto', 'host:port'"):
        config.build()
