"""Several policies in one run: :class:`PolicyMap`, what ``config.multi_agent(...)`` resolves to
(RLlib's ``PolicySpec`` and ``Policy`` are in :mod:`volley.rllib_policies`).

A multi-agent run maps each agent to a policy id with ``policy_mapping_fn(agent_id, episode,
worker)``, once per agent per episode, as RLlib does. A policy id names either a network volley
learns (its own config: the run's, with the overrides of its ``PolicySpec.config``), or a class
with RLlib's ``compute_actions`` that acts and never learns (a heuristic). Parameter sharing
(many agents, one policy) and independent policies are the same mechanism: a mapping.

Single-agent training is the map with one entry, ``"default_policy"``, which every agent of a
multi-agent environment is mapped to when ``multi_agent()`` names no policies (as in RLlib).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from volley.config import AlgorithmConfig
from volley.errors import ConfigError
from volley.named import find_function
from volley.network_spec import NetworkSpec
from volley.rllib_policies import POLICY_CLASSES, Policy, policies_value
from volley.rllib_results import DEFAULT_POLICY

MappingFn = Callable[..., str]


@dataclass(frozen=True)
class PolicyEntry:
    """One policy of a run, resolved on the driver: a learned one (``policy_class`` None) or a
    hand-written one, with its spaces (None until an agent mapped to it shows them) and the
    config keys it overrides."""

    policy_id: str
    policy_class: type[Policy] | None
    observation_space: gym.Space | None
    action_space: gym.Space | None
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def learned(self) -> bool:
        return self.policy_class is None

    def config(self, run: AlgorithmConfig) -> AlgorithmConfig:
        """This policy's config: the run's, with its overrides, as one policy of its own."""
        config = run.copy(copy_frozen=False).update_from_dict(self.overrides)
        return config.update(policies=None, policy_mapping_fn=None, policies_to_train=None)


@dataclass(frozen=True)
class PolicyMap:
    """The policies of a run, the agent → policy mapping and the policies to train: resolved once on
    the driver and shipped to every worker (a picklable value: the mapping function travels as the
    environment creator does)."""

    entries: dict[str, PolicyEntry]
    mapping_fn: MappingFn | None  # None: every agent to the one policy
    to_train: frozenset[str] | Callable[..., bool]

    @classmethod
    def of(cls, config: AlgorithmConfig) -> PolicyMap:
        """The map ``config.multi_agent(...)`` describes (``"default_policy"`` alone when it names none)."""
        policies = config.policies or {DEFAULT_POLICY: policies_value({DEFAULT_POLICY: None})[DEFAULT_POLICY]}  # type: ignore[index]
        entries = {}
        for policy_id, spec in policies.items():
            name = spec["policy_class"]
            policy_class = None
            if name is not None:
                policy_class = POLICY_CLASSES.find(name)
                if policy_class is None:
                    raise ConfigError(f"policy {policy_id!r}: {POLICY_CLASSES.missing(name)}")
            entries[policy_id] = PolicyEntry(policy_id, policy_class, spec["observation_space"],
                                             spec["action_space"], dict(spec["config"]))
        mapping = find_function("policy_mapping_fn", config.policy_mapping_fn) if config.policy_mapping_fn else None
        if mapping is None and len(entries) > 1:
            raise ConfigError(f"multi_agent(policies={sorted(entries)}) needs a policy_mapping_fn(agent_id, episode, "
                              "worker, **kwargs) that says which policy each agent acts with")
        to_train: frozenset[str] | Callable[..., bool]
        if isinstance(config.policies_to_train, str):  # a function's name
            to_train = find_function("policies_to_train", config.policies_to_train)
        else:
            names = config.policies_to_train
            to_train = frozenset(p for p, e in entries.items() if e.learned) if names is None else frozenset(names)
            unknown = sorted(to_train - set(entries))
            if unknown:
                raise ConfigError(f"policies_to_train names {unknown[0]!r}, which is not one of the policies "
                                  f"{sorted(entries)}")
            by_hand = sorted(p for p in to_train if not entries[p].learned)
            if by_hand:
                raise ConfigError(f"policies_to_train names {by_hand[0]!r}, a hand-written policy "
                                  f"({entries[by_hand[0]].policy_class.__name__}) that volley cannot train")  # type: ignore[union-attr]
        return cls(entries, mapping, to_train)

    def policy_of(self, agent_id: Any, episode: Any = None, worker: Any = None) -> str:
        """The policy id agent ``agent_id`` acts with (RLlib's call); a ConfigError naming the agent and
        the id when the mapping function returns an id the run has no policy of."""
        if self.mapping_fn is None:
            return next(iter(self.entries))
        policy_id = self.mapping_fn(agent_id, episode, worker=worker)
        if policy_id not in self.entries:
            raise ConfigError(f"policy_mapping_fn mapped agent {agent_id!r} to policy {policy_id!r}, which is not "
                              f"one of the policies {sorted(self.entries)}")
        return policy_id

    def trains(self, policy_id: str) -> bool:
        """Whether ``policy_id`` is trained (``policies_to_train``; a function is asked ``fn(id, batch=None)``)."""
        if not self.entries[policy_id].learned:
            return False
        if callable(self.to_train):
            return bool(self.to_train(policy_id, None))
        return policy_id in self.to_train

    def learned(self) -> list[str]:
        """The ids of the policies volley keeps a network for, trained or frozen."""
        return [policy_id for policy_id, entry in self.entries.items() if entry.learned]

    def with_policy(self, entry: PolicyEntry, mapping_fn: MappingFn | None,
                    to_train: Iterable[str] | Callable[..., bool] | None) -> PolicyMap:
        """This map with ``entry`` added (RLlib's ``add_policy``), and a new mapping or set to train if given."""
        train = self.to_train if to_train is None else to_train if callable(to_train) else frozenset(to_train)
        return PolicyMap({**self.entries, entry.policy_id: entry}, mapping_fn or self.mapping_fn, train)

    def without_policy(self, policy_id: str, mapping_fn: MappingFn | None,
                       to_train: Iterable[str] | Callable[..., bool] | None) -> PolicyMap:
        """This map with ``policy_id`` removed (RLlib's ``remove_policy``)."""
        entries = {p: e for p, e in self.entries.items() if p != policy_id}
        train = self.to_train if to_train is None else to_train if callable(to_train) else frozenset(to_train)
        if isinstance(train, frozenset):
            train = train - {policy_id}
        return PolicyMap(entries, mapping_fn or self.mapping_fn, train)


@dataclass(frozen=True)
class PolicySetup:
    """What a multi-agent worker is built from, resolved on the driver and shipped in its recipe: the
    policy map, and each learned policy's config and network (unbound: a worker binds the spaces of
    the agents it finds mapped to the policy)."""

    policy_map: PolicyMap
    configs: dict[str, AlgorithmConfig]
    networks: dict[str, NetworkSpec]

    @classmethod
    def of(cls, config: AlgorithmConfig, policy_map: PolicyMap | None = None) -> PolicySetup:
        policy_map = policy_map or PolicyMap.of(config)
        configs = {policy_id: entry.config(config) for policy_id, entry in policy_map.entries.items() if entry.learned}
        return cls(policy_map, configs, {policy_id: NetworkSpec.of(c) for policy_id, c in configs.items()})
