"""Objects a config names by a string: environment classes and creators, custom model and action
distribution classes.

A config is data (JSON in every checkpoint), yet RLlib's configs also take objects: an
environment class or creator function as ``env``, a model class as
``model={"custom_model": MyModel}``. volley keeps a name for each: the one it was registered
under (``register_env``, ``ModelCatalog.register_custom_model``) or, for an object given
directly, ``"module:QualName"``. In the process that made the config the name finds the very
object; a config restored in another process finds a class again only where that process has it
already (a class of an imported module, or of the running script): nothing is imported and
nothing is called, so a checkpoint never chooses the code that runs. Workers receive the
objects themselves with their recipe (pickled by value where their module cannot be imported).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from volley.errors import ConfigError, did_you_mean, shown


def unique_name(obj: Any, registry: dict[str, Any]) -> str:
    """``"module:QualName"`` of a class or function, filed under that name in ``registry``; a
    second, different object of the same name (two lambdas of one module) gets ``"#2"`` added
    (``"#3"``, ...)."""
    base = f"{getattr(obj, '__module__', None) or '__main__'}:{getattr(obj, '__qualname__', type(obj).__name__)}"
    name, copies = base, 1
    while registry.setdefault(name, obj) is not obj:
        copies += 1
        name = f"{base}#{copies}"
    return name


class NamedObjects:
    """One kind of named object (``kind``: "environment", "custom model"), named by config key ``key``.

    ``found_again(obj, module)`` says whether an object met under a ``"module:QualName"`` name
    in another process may be taken (a ``gymnasium.Env`` subclass, a script's function, a class).
    """

    def __init__(self, kind: str, key: str, again: str, register: str,
                 found_again: Callable[[Any, str], bool]) -> None:
        self.kind = kind
        self.key = key  # the config key that names one
        self.again = again  # how a user gives one directly ({obj}: its name)
        self.register_call = register  # how a user registers one ({name}, {obj})
        self.found_again = found_again
        self.registered: dict[str, Any] = {}  # names given by the user's register call
        self._given: dict[str, Any] = {}  # "module:QualName" names of objects given directly

    def register(self, name: str, obj: Any) -> None:
        self.registered[name] = obj

    def name_of(self, obj: Any) -> str:
        """The name a config keeps for ``obj`` given directly (:func:`unique_name`)."""
        return unique_name(obj, self._given)

    def find(self, name: str) -> Any | None:
        """The object behind ``name``: registered, given directly in this process, or found again
        where this process has it (see the module docstring). None if there is none."""
        if name in self.registered:
            return self.registered[name]
        if name in self._given:
            return self._given[name]
        module, sep, qualname = name.partition(":")
        found: Any = sys.modules.get(module) if sep else None
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is None or not self.found_again(found, module):
            return None
        self._given[name] = found
        return found

    @staticmethod
    def is_given_name(name: str) -> bool:
        """Whether ``name`` has the form :meth:`name_of` gives (``"module:QualName"``)."""
        module, sep, _ = name.partition(":")
        return bool(sep) and module.replace(".", "_").isidentifier()

    def missing(self, name: str) -> str:
        """Why ``name`` finds nothing here, and what to do: one line."""
        module, _, qualname = name.partition(":")
        short = qualname.split(".")[-1].split("#")[0]
        how = self.register_call.format(name=name, obj=short or "...")
        if self.is_given_name(name):
            return (f"{self.kind} '{name}' was a class or function given as {self.key} in the process "
                    f"that made this config, and this process has no {short} in module '{module}': "
                    f"import or define it first and pass it again ({self.again.format(obj=short)}), or "
                    f"{how} (volley never imports what a config names)")
        known = sorted(self.registered)
        listed = f"registered: {', '.join(map(repr, known))}" if known else "none is registered in this process"
        return f"unknown {self.kind} '{name}'{did_you_mean(name, known)} ({listed}); {how}"


def has_methods(cls: type, names: tuple[str, ...]) -> bool:
    """Whether ``cls`` has a method of each name: how volley accepts a class of one of RLlib's
    protocols whichever base class it has (volley's, or RLlib's own)."""
    return all(callable(getattr(cls, name, None)) for name in names)


def _env_found_again(obj: Any, module: str) -> bool:
    """A ``gymnasium.Env`` subclass of an imported module, or a function of the running script."""
    return ((isinstance(obj, type) and issubclass(obj, gym.Env))
            or (isinstance(obj, types.FunctionType) and module == "__main__"))


ENVIRONMENTS = NamedObjects("environment", "env", "config.environment(env={obj})",
                            "register_env('{name}', creator)", _env_found_again)
# a class with RLlib's model methods; the catalog checks that it is a TorchModelV2 before building it
CUSTOM_MODELS = NamedObjects("custom model", "custom_model", "config.training(model={{'custom_model': {obj}}})",
                             "ModelCatalog.register_custom_model('{name}', {obj})",
                             lambda obj, _: isinstance(obj, type) and hasattr(obj, "value_function"))
# a class with RLlib's action distribution methods; the catalog checks that it is an ActionDistribution
CUSTOM_ACTION_DISTS = NamedObjects("custom action dist", "custom_action_dist",
                                   "config.training(model={{'custom_action_dist': {obj}}})",
                                   "ModelCatalog.register_custom_action_dist('{name}', {obj})",
                                   lambda obj, _: isinstance(obj, type) and hasattr(obj, "required_model_output_shape"))


FUNCTIONS = NamedObjects("function", "env_task_fn or custom_evaluation_function", "{obj}",
                         "pass the function itself", lambda obj, _: isinstance(obj, types.FunctionType))


def function_name(key: str, value: Any) -> str:
    """The name a config keeps for a function given as ``key`` (``env_task_fn``,
    ``custom_evaluation_function``); the function is found again by it in the driver."""
    if not callable(value):
        raise ConfigError(f"config key {key!r} takes a function, got {shown(value)}")
    return FUNCTIONS.name_of(value)


def find_function(key: str, name: str) -> Any:
    """The function config key ``key`` names; a ConfigError if this process has none of that name."""
    found = FUNCTIONS.find(name)
    if found is None:
        raise ConfigError(f"config key {key!r}: {FUNCTIONS.missing(name)}")
    return found


def env_name(env: Any) -> str:
    """The name a config keeps for an environment class or creator function given as ``env``
    (RLlib takes either where volley's configs hold a string). It is called like a
    ``register_env`` creator, ``env(env_config)``, and travels to Ray workers the same way."""
    if not callable(env):
        raise ConfigError(f"config key 'env' must be a Gymnasium id, a name given to register_env, a "
                          f"gymnasium.Env subclass or a creator function, got {shown(env)}")
    return ENVIRONMENTS.name_of(env)
