"""The one validated setter every key goes through: builder methods, ``update``, dicts and RLlib's
or SB3's spellings all end in :meth:`ConfigSetter._update_group`.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import types
import typing
import warnings
from typing import Any

from volley.callbacks import callbacks_name
from volley.coercion import coerce, is_search_space, picklable_dict
from volley.config.model import ModelConfig
from volley.config.schema import ConfigFields
from volley.errors import ConfigError, did_you_mean, shown
from volley.named import CUSTOM_ACTION_DISTS, CUSTOM_MODELS, env_name, function_name
from volley.rllib_compat import NOT_PASSED_TO_CUSTOM_MODELS, rllib_key
from volley.rllib_compat import RLLIB_KEYS as SHARED_RLLIB_KEYS
from volley.rllib_keys import RLlibKey, unset_deprecated
from volley.rllib_policies import policies_value

# keys holding a function, kept by name (volley.named)
FUNCTION_KEYS = ("env_task_fn", "custom_evaluation_function", "policy_mapping_fn", "observation_fn")

# The unknown keys warned about in this process (once each)
_WARNED: set[str] = set()


def _outside_volley() -> int:
    """The ``stacklevel`` of a warning that points at the first caller outside volley."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("volley"):
        frame, level = frame.f_back, level + 1
    return level


class ConfigSetter(ConfigFields):
    """Setting keys by any of their names, each checked against its field's type."""

    @classmethod
    def field_specs(cls) -> dict[str, tuple[dataclasses.Field, Any]]:
        """Every key with its dataclass field and resolved type."""
        hints = typing.get_type_hints(cls)
        return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}

    @classmethod
    def rllib_keys(cls) -> list[RLlibKey]:
        """RLlib's keys this config takes: the slices of its class and the classes it extends, in
        that order (Ape-X's entry for a key settles it before DQN's), then the shared table."""
        return [key for c in cls.__mro__ for key in vars(c).get("RLLIB_KEYS", ())] + SHARED_RLLIB_KEYS

    @classmethod
    def algo_names(cls) -> set[str]:
        """``algo_name`` of this class and the classes it extends (Ape-X's keys include DQN's)."""
        return {vars(c)["algo_name"] for c in cls.__mro__ if vars(c).get("algo_name")}

    def update(self, **kwargs: Any) -> typing.Self:
        """Set any keys (aliases and RLlib's spellings accepted), checking each name and type."""
        return self._update_group(None, kwargs, lenient=vars(self).get("_lenient", False))

    def _update_group(self, group: str | None, kwargs: dict[str, Any], lenient: bool = False) -> typing.Self:
        """Set ``kwargs``; with ``lenient`` (a dict of keys, as RLlib takes one), a key volley does not
        know is kept beside the config (:meth:`unknown_keys`) and warned about once, not refused."""
        specs = self.field_specs()
        for key, value in kwargs.items():
            if unset_deprecated(key, value):  # RLlib's -1 for a deprecated key nobody set
                continue
            if is_search_space(value):  # Tune resolves it per trial: kept as given until then
                self._set_search_space(key, value, specs)
                continue
            sb3 = self.SB3_KEYS.get(key)
            if callable(sb3):
                self._update_group(group, sb3(value))
                continue
            name = self.ALIASES.get(key) or sb3 or key
            # RLlib's spellings (docs/rllib.md); an SB3 name is never RLlib's
            rllib = None if sb3 is not None else rllib_key(key, type(self), specs)
            if name not in specs and rllib is None:
                known = list(specs) + list(self.ALIASES) + list(self.SB3_KEYS)
                if not lenient:
                    raise ConfigError(f"unknown config key {key!r} for {type(self).__name__}"
                                      f"{did_you_mean(key, known)}")
                self._keep_unknown(key, value, known)
                continue
            groups = {*(rllib.groups if rllib is not None else ()),
                      *([specs[name][0].metadata["group"]] if name in specs else [])}
            if group is not None and group not in groups and sb3 is None:  # SB3 has no builder methods
                raise ConfigError(f"config key {key!r} is set with "
                                  f"{' or '.join(f'.{g}()' for g in sorted(groups))}, not .{group}()")
            if rllib is None:
                self._set(key, name, value, specs[name][1])
            else:  # RLlib's key, as the table says (RLlib's unset values change nothing)
                for target, item in rllib.translate(value).items():
                    label = key if target == name else f"{target} (from RLlib's {key})"
                    self._set(label, target, item, specs[target][1])
        return self

    def _keep_unknown(self, key: str, value: Any, known: list[str]) -> None:
        """Keep a key volley does not know, as RLlib keeps it (a script's own, popped later by it);
        a warning, once per key and process, names the closest known key in case of a typo."""
        self._keep(key, value)
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(f"config key {key!r} is not one of {type(self).__name__}'s: kept (config[{key!r}] "
                          f"and to_dict() hold it), unused by volley{did_you_mean(key, known)}",
                          stacklevel=_outside_volley())

    def _set_search_space(self, key: str, value: Any, specs: dict[str, tuple[dataclasses.Field, Any]]) -> None:
        """Keep a Tune search space under the key as given: ``to_dict()`` hands it to Tune, which
        resolves it per trial; :meth:`validate` refuses to build with one."""
        name = self.ALIASES.get(key, key)
        if name in specs:
            setattr(self, name, value)
        else:  # RLlib's spelling of a key: translated once Tune has picked the value
            self._keep(key, value)

    def _keep(self, key: str, value: Any) -> None:
        """Keep ``key`` beside the fields (refused, as every change, once the config is frozen)."""
        self.__setattr__("_unknown", {**self.unknown_keys(), key: value})

    def unknown_keys(self) -> dict[str, Any]:
        """The keys a dict gave this config that volley does not know (kept, as RLlib keeps them),
        and Tune search spaces under RLlib's spellings of a key."""
        return dict(self.__dict__.get("_unknown", {}))

    def _set(self, label: str, name: str, value: Any, hint: Any) -> None:
        if hint is ModelConfig:  # `model`, and SAC's q_model_config
            value = self._merge_model(name, value)
        elif name == "env_config" or (name == "logger_config" and value is not None):
            # any picklable objects (gymnasium spaces, a logger class...), as RLlib takes
            setattr(self, name, picklable_dict(label, value))
            return
        elif name == "policies":  # ids to specs holding classes and spaces (picklable, as env_config)
            setattr(self, name, policies_value(value))
            return
        elif name == "policies_to_train" and callable(value):
            value = function_name(name, value)
        elif name == "env" and not isinstance(value, str):
            value = env_name(value)
        elif name in FUNCTION_KEYS and value is not None and not isinstance(value, str):
            value = function_name(name, value)
        elif name == "callbacks_class" and value is not None and not isinstance(value, str) and not (
                isinstance(value, list) and all(isinstance(item, str) for item in value)):
            value = callbacks_name(value)
        setattr(self, name, coerce(label, value, hint))

    def _merge_model(self, name: str, value: Any) -> ModelConfig:
        """The network settings of key ``name`` with the keys of ``value`` changed, each checked."""
        if isinstance(value, ModelConfig):  # checked key by key like a dict
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(ModelConfig)}
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{name}' must be a dict, got {shown(value)}")
        model = copy.deepcopy(getattr(self, name))
        hints = typing.get_type_hints(ModelConfig)
        custom = value.get("custom_model", model.custom_model) is not None
        for key, item in value.items():
            rllib = rllib_key(f"model.{key}", type(self))
            if unset_deprecated(f"model.{key}", item):
                continue
            if key == "custom_model" and item is not None and not isinstance(item, str):
                item = CUSTOM_MODELS.name_of(item)  # a class given directly (RLlib takes either)
            if key == "custom_action_dist" and item is not None and not isinstance(item, str):
                item = CUSTOM_ACTION_DISTS.name_of(item)
            if key in hints and is_search_space(item):  # resolved per trial by Tune
                setattr(model, key, item)
            elif key in hints:
                setattr(model, key, coerce(f"{name}.{key}", item, hints[key]))
            elif rllib is not None and custom and key not in NOT_PASSED_TO_CUSTOM_MODELS:
                model.rllib_model_keys = {**model.rllib_model_keys, **coerce(f"{name}.{key}", {key: item}, dict)}
            elif rllib is not None:  # RLlib's model keys volley has none of: accepted, refused or translated
                for field_name, translated in rllib.translate(item).get("model", {}).items():
                    setattr(model, field_name, coerce(f"{name}.{key}", translated, hints[field_name]))
            else:
                hint = "; a custom model's own options go in custom_model_config" if custom else ""
                raise ConfigError(f"unknown {name} key {key!r}{did_you_mean(str(key), hints)}{hint}")
        return model
