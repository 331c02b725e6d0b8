"""RLlib's classes a multi-agent config is written with: ``PolicySpec`` (one entry of
``multi_agent(policies=...)``) and ``Policy`` (the base of a policy a script writes by hand), and
the config's form of ``policies`` (:func:`policies_value`): data, with classes kept by name as
the config's other objects are (:mod:`volley.named`). :mod:`volley.policies` resolves it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from volley.errors import ConfigError, shown
from volley.named import NamedObjects


class PolicySpec:
    """RLlib's description of one policy in ``multi_agent(policies={id: PolicySpec(...)})``: a
    ``policy_class`` (None: the algorithm's own network; else a :class:`Policy` subclass that acts
    by hand), its spaces (None: the space of the first agent mapped to it) and ``config``, the keys
    that differ from the run's for this policy (``gamma``, ``lr``, ``model``, ...)."""

    def __init__(self, policy_class: type | None = None, observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, config: dict[str, Any] | None = None) -> None:
        self.policy_class = policy_class
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PolicySpec) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"PolicySpec({', '.join(f'{k}={v!r}' for k, v in vars(self).items() if v is not None)})"


class Policy:
    """RLlib's ``Policy`` as a script subclasses it to act by hand (RLlib's ``RandomPolicy``, its
    rock-paper-scissors heuristics): ``compute_actions(obs_batch, state_batches, ...)`` returns
    ``(actions, state_outs, extra)``. Such a policy is never trained; volley calls it on the workers
    with every observation of the agents mapped to it, one call per step."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: dict[str, Any] | None = None
                 ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = dict(config or {})
        self.view_requirements: dict[str, Any] = {}
        self.exploration = None
        self.global_timestep = 0

    def _create_exploration(self) -> None:
        """RLlib's heuristics call it; a hand-written policy explores as its ``compute_actions`` says."""
        return None

    def init_view_requirements(self) -> None:
        """RLlib's hook for the columns a policy reads; volley's workers give every policy the same ones."""

    def get_initial_state(self) -> list[Any]:
        return []

    def is_recurrent(self) -> bool:
        return bool(self.get_initial_state())

    def compute_actions(self, obs_batch: Any, state_batches: list[Any] | None = None, prev_action_batch: Any = None,
                        prev_reward_batch: Any = None, info_batch: Any = None, episodes: Any = None,
                        **kwargs: Any) -> tuple[Any, list[Any], dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__} must define compute_actions()")

    def compute_single_action(self, obs: Any = None, state: list[Any] | None = None, **kwargs: Any) -> Any:
        """RLlib's one-observation call: ``(action, state_out, extra)``."""
        actions, states, extra = self.compute_actions([obs], [[s] for s in state or []], **kwargs)
        return actions[0], [s[0] for s in states], extra

    def learn_on_batch(self, samples: Any) -> dict[str, Any]:
        return {}

    def get_weights(self) -> dict[str, Any]:
        return {}

    def set_weights(self, weights: Any) -> None:
        """A hand-written policy has no weights."""


# the hand-written policy classes a config names ("module:QualName"), found again as its other objects are
POLICY_CLASSES = NamedObjects("policy class", "policies", "PolicySpec(policy_class={obj})",
                              "pass the class itself", lambda obj, _: isinstance(obj, type))


def policies_value(value: Any) -> dict[str, dict[str, Any]] | None:
    """The config's form of RLlib's ``policies``: a set (list, tuple) of ids, or a dict of ids to a
    :class:`PolicySpec`, RLlib's tuple ``(policy_class, obs_space, act_space, config)`` or None;
    each becomes ``{"policy_class": name or None, "observation_space", "action_space", "config"}``."""
    if value is None:
        return None
    if isinstance(value, (set, frozenset)):  # in id order: a set's own order changes with each process's hash seed
        value = sorted(value, key=str)
    if isinstance(value, (list, tuple)):
        value = {policy_id: None for policy_id in value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"multi_agent(policies=...) takes a set of policy ids or a dict of ids to PolicySpec, got "
                          f"{shown(value)}")
    entries = {}
    for policy_id, spec in value.items():
        if not isinstance(policy_id, str):
            raise ConfigError(f"multi_agent(policies=...): policy ids are strings, got {policy_id!r}")
        if spec is None:
            spec = PolicySpec()
        elif isinstance(spec, (tuple, list)) and len(spec) == 4:
            spec = PolicySpec(*spec)
        elif isinstance(spec, Mapping) and set(spec) == set(vars(PolicySpec())):  # this form (a saved config's)
            spec = PolicySpec(**spec)
        elif not hasattr(spec, "policy_class"):  # RLlib's own PolicySpec has the same four fields
            raise ConfigError(f"multi_agent(policies=...): policy {policy_id!r} is {shown(spec)}; give a "
                              "PolicySpec(policy_class, observation_space, action_space, config) or None")
        cls = spec.policy_class
        overrides = spec.config
        if overrides is not None and not isinstance(overrides, Mapping):  # an AlgorithmConfig's overrides
            overrides = overrides.to_dict() if hasattr(overrides, "to_dict") else overrides
        entries[policy_id] = {"policy_class": None if cls is None else cls if isinstance(cls, str)
                              else POLICY_CLASSES.name_of(cls),
                              "observation_space": spec.observation_space, "action_space": spec.action_space,
                              "config": dict(overrides or {})}
    return entries
