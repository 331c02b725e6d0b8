"""Config values as their declared types: the checks behind every key a config sets.

A value is accepted as the type of its dataclass field (an int is a valid float; numpy
numbers count as numbers) or refused with a ConfigError that names the key, the value
and the type it must have.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import numbers
import pickle
import types
import typing
from typing import Any, Literal, Union

from volley.errors import ConfigError, did_you_mean, shown


def type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if origin is not None:
        return str(hint).replace("typing.", "")
    return getattr(hint, "__name__", str(hint))


def is_json_data(value: Any) -> bool:
    """True when ``value`` survives a JSON round trip unchanged (checkpoints store the config as JSON)."""
    try:
        return bool(json.loads(json.dumps(value, allow_nan=False)) == value)
    except (TypeError, ValueError, RecursionError):
        return False


def is_search_space(value: Any) -> bool:
    """True for a Ray Tune search space (``tune.grid_search`` or a sampled domain such as
    ``tune.uniform``), told apart without importing Ray: Tune resolves it per trial."""
    return (isinstance(value, dict) and list(value) == ["grid_search"]) or \
        type(value).__module__.startswith("ray.tune.search")


def picklable_dict(key: str, value: Any) -> dict:
    """A copy of ``value``, a dict of any picklable objects (RLlib's ``env_config``: the Ray
    engine ships it to each worker), or a ConfigError naming the key and what failed."""
    if not isinstance(value, dict):
        raise ConfigError(f"config key '{key}' must be a dict, got {shown(value)} ({type(value).__name__})")
    try:
        pickle.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise ConfigError(f"config key '{key}' must hold picklable values (Ray ships it to every worker), "
                          f"got {shown(value)}: {exc}") from None
    return copy.deepcopy(value)


def coerce(key: str, value: Any, hint: Any) -> Any:
    """Return ``value`` as type ``hint`` (an int is a valid float), or raise a ConfigError naming it.

    numpy numbers count as numbers (values often come from numpy sweeps); floats must
    be finite, since NaN slips through every range check (``nan <= 0`` is False).
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    bad = ConfigError(f"config key '{key}' must be {type_name(hint)}, got {shown(value)} "
                      f"({type(value).__name__})")
    if origin in (Union, types.UnionType):
        for arg in args:
            try:
                return coerce(key, value, arg)
            except ConfigError:
                continue
        raise bad
    if origin is Literal:
        for arg in args:  # compare like with like: 1 == True, and numpy arrays compare elementwise
            if type(value) is type(arg) and value == arg:
                return value
        hint_text = did_you_mean(str(value), [str(a) for a in args])
        raise ConfigError(f"config key '{key}' must be {type_name(hint)}, got {shown(value)}{hint_text}")
    if hint in (type(None), bool, str):  # exactly that type: an int is no bool, a number no str
        if isinstance(value, hint):
            return value
        raise bad
    if hint is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
            return int(float(value))
        raise bad
    if hint is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an int beyond the float range
                raise bad from None
            if math.isfinite(number):
                return number
        raise bad
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise bad
        (item,) = args
        return [coerce(f"{key}[{i}]", v, item) for i, v in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise bad
        if not is_json_data(value):
            raise ConfigError(f"config key '{key}' must hold JSON data (str keys; numbers, strings, "
                              f"lists, dicts; checkpoints save it), got {shown(value)}")
        return copy.deepcopy(value)
    if dataclasses.is_dataclass(hint):
        return value
    raise TypeError(f"unsupported config type {hint!r} for '{key}'")  # a bug in volley, not user input
