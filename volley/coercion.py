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


class FieldsAsDict:
    """A dataclass that also reads and writes like a dict of its fields, each value set checked
    as its field's type (RLlib's ``config.model`` is a dict: ``config.model["use_lstm"] = True``)."""

    DICT_NAME: typing.ClassVar[str] = "config"  # the key it is under, in messages

    def extra_items(self) -> dict[str, Any]:
        """Keys beside the fields that read like them (none here)."""
        return {}

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(typing.cast(Any, self))] + list(self.extra_items())

    def __getitem__(self, key: str) -> Any:
        if key in self.extra_items():
            return self.extra_items()[key]
        if key not in self.keys():
            raise KeyError(f"{self.DICT_NAME} has no key {key!r}{did_you_mean(str(key), self.keys())}")
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        """Set one field, checked as the config's builder checks it (a Tune search space is kept)."""
        hints = {f.name: typing.get_type_hints(type(self))[f.name] for f in dataclasses.fields(typing.cast(Any, self))}
        if key not in hints:
            raise ConfigError(f"unknown {self.DICT_NAME} key {key!r}{did_you_mean(str(key), hints)} (RLlib's "
                              f"other {self.DICT_NAME} keys: config.training({self.DICT_NAME}={{{key!r}: ...}}))")
        setattr(self, key, value if is_search_space(value) else coerce(f"{self.DICT_NAME}.{key}", value, hints[key]))

    def __iter__(self) -> typing.Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self.keys() else default

    def items(self) -> list[tuple[str, Any]]:
        return [(key, self[key]) for key in self.keys()]

    def update(self, other: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """``config.model.update({...})``: each key set as by ``config.model[key] = value``."""
        for key, value in {**(other or {}), **kwargs}.items():
            self[key] = value
