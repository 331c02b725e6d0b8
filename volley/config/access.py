"""A config as data: serialisation (``to_dict``/``from_dict``), RLlib's dict-like access
(``config["lr"]``, ``get``), freezing and copying.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from typing import Any

from volley.config.builder import BuilderMethods
from volley.errors import ConfigError, did_you_mean
from volley.rllib_compat import rllib_key


class DictAccess(BuilderMethods):
    """A config read and written like RLlib's: as a dict, frozen once built, copied."""

    def to_dict(self) -> dict[str, Any]:
        """All keys as plain data (JSON-ready but for ``env_config``'s objects and unknown keys),
        the unknown keys a dict gave it included."""
        return {**dataclasses.asdict(self), **copy.deepcopy(self.unknown_keys())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> typing.Self:
        """Rebuild a config from :meth:`to_dict` output (or any partial dict of keys); keys volley
        does not know are kept, as RLlib keeps them, with a warning."""
        return cls().update_from_dict(data)

    def update_from_dict(self, config_dict: dict[str, Any]) -> typing.Self:
        """RLlib's name for :meth:`update` with a dict of keys; keys volley does not know are kept
        (``config[key]`` reads them back, ``to_dict()`` passes them on) and warned about once."""
        vars(self)["_lenient"] = True  # for update(), which a config class may extend (SAC's does)
        try:
            return self.update(**config_dict)
        finally:
            del vars(self)["_lenient"]

    def __getitem__(self, key: str) -> Any:
        """``config["lr"]``, as in RLlib: a key's value; an alias or RLlib's name reads its key."""
        if key in self.unknown_keys():
            return self.unknown_keys()[key]
        sb3 = self.SB3_KEYS.get(key)
        name = self.ALIASES.get(key) or (sb3 if isinstance(sb3, str) else key)
        rllib = rllib_key(key, type(self), self.field_specs())
        if rllib is not None and rllib.kind == "renamed":
            name = rllib.sets[0]
        if name not in self.field_specs():
            raise KeyError(f"{type(self).__name__} has no key {key!r}{did_you_mean(str(key), self.field_specs())}")
        return getattr(self, name)

    def __setitem__(self, key: str, value: Any) -> None:
        """``config["lr"] = 1e-3``, as in RLlib: :meth:`update_from_dict` of one key."""
        self.update_from_dict({key: value})

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, self) is not self

    def get(self, key: str, default: Any = None) -> Any:
        """``config.get("lr")``, as in RLlib: the key's value, or ``default`` for a key it lacks."""
        try:
            return self[key]
        except KeyError:
            return default

    def freeze(self) -> None:
        """Refuse every later change, as RLlib does (a built algorithm's config is frozen)."""
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise ConfigError(f"cannot set {name!r}: this {type(self).__name__} is frozen (config.freeze(), "
                              "or the config of a built algorithm); change a copy: "
                              "config.copy(copy_frozen=False)")
        super().__setattr__(name, value)

    def copy(self, copy_frozen: bool | None = None) -> typing.Self:
        """A deep copy, so a built algorithm never sees later changes to this config. It is frozen
        if this one is, unless ``copy_frozen`` (RLlib's argument) says otherwise."""
        twin = copy.deepcopy(self)
        if copy_frozen is not None:
            object.__setattr__(twin, "_frozen", copy_frozen)
        return twin
