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

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from volley.config import AlgorithmConfig
from volley.errors import ConfigError
from volley.named import find_function
from volley.network_spec import NetworkSpec
from volley.registry import REGISTRY, config_class, registered_name
from volley.rllib_policies import POLICY_CLASSES, Policy, policies_value
from volley.rllib_results import DEFAULT_POLICY

MappingFn = Callable[..., str]
# RLlib's ObservationFunction: fn(agent_obs=, worker=, base_env=, policies=, episode=) -> the agents' observations
ObservationFn = Callable[..., dict[Any, Any]]


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
    algorithm: str | None = None  # another algorithm than the run's whose policy this is (its registry key)

    @classmethod
    def of(cls, policy_id: str, spec: dict[str, Any], run_algorithm: str) -> PolicyEntry:
        """The entry of one of the config's ``policies`` (:func:`~volley.rllib_policies.policies_value`'s
        form) in a run of ``run_algorithm``. A ``policy_class`` of RLlib's own algorithms
        (``PPOTorchPolicy``, ``DQNTorchPolicy``: RLlib's multi_agent_two_trainers names them) is that
        algorithm's learned policy; any other class acts by hand."""
        name = spec["policy_class"]
        policy_class = algorithm = None
        if name is not None:
            algorithm = rllib_algorithm(name)
            if algorithm is None:
                policy_class = POLICY_CLASSES.find(name)
                if policy_class is None:
                    raise ConfigError(f"policy {policy_id!r}: {POLICY_CLASSES.missing(name)}")
        return cls(policy_id, policy_class, spec["observation_space"], spec["action_space"], dict(spec["config"]),
                   None if algorithm == registered_name(run_algorithm) else algorithm)

    @property
    def learned(self) -> bool:
        return self.policy_class is None

    def config(self, run: AlgorithmConfig) -> AlgorithmConfig:
        """This policy's config: the run's, with its overrides, as one policy of its own (a policy of
        another algorithm takes the keys set on the run that its algorithm has, as RLlib merges them)."""
        if self.algorithm is None:
            config = run.copy(copy_frozen=False)
        else:
            own, defaults = config_class(self.algorithm), type(run)().to_dict()
            config = own.from_dict({k: v for k, v in run.to_dict().items()
                                    if k in own.field_specs() and v != defaults.get(k)})
        config = config.update_from_dict(self.overrides)
        return config.update(policies=None, policy_mapping_fn=None, policies_to_train=None, observation_fn=None)


def rllib_algorithm(policy_class: str) -> str | None:
    """The registry key of the algorithm whose policy ``policy_class`` (``"module:Name"``) is, when it is
    one of RLlib's own (``ray.rllib...:PPOTorchPolicy``, ``DQNTFPolicy``: RLlib names each after its
    algorithm and framework); None for any other class."""
    module, _, name = policy_class.partition(":")
    own = re.fullmatch(r"(\w+?)(Torch|TF|TF1|TF2)Policy", name)
    if not module.startswith("ray.rllib.") or own is None:
        return None
    key = registered_name(own[1])
    if key is None:
        raise ConfigError(f"policy class '{policy_class}' is the policy of RLlib's {own[1]}, an algorithm volley "
                          f"does not have; choose from {', '.join(REGISTRY)}")
    return key


def check_rllib_policy_class(policy_class: type, algorithm: str, where: str) -> None:
    """Accept, as ``algorithm``'s own network, RLlib's policy class of that algorithm or a subclass that
    overrides none of its methods (what it adds, RLlib's class never calls: RLlib's rock-paper-scissors
    example adds a ``loss_fn`` to PPOTorchPolicy); refuse any other class with one line saying so
    (``where``: what gave it), since volley runs no RLlib policy's loss or postprocessing."""
    mro = policy_class.__mro__
    base = next((c for c in mro if c.__module__.startswith("ray.rllib.")), None)
    if base is None or rllib_algorithm(f"{base.__module__}:{base.__qualname__}") != registered_name(algorithm):
        raise ConfigError(f"{where} is {policy_class.__qualname__}, not RLlib's policy of {algorithm}: volley "
                          f"trains its own {algorithm} network")
    overridden = sorted({name for c in mro[:mro.index(base)] for name, value in vars(c).items()
                         if hasattr(base, name) and not name.startswith("__")
                         and (callable(value) or isinstance(value, classmethod | staticmethod | property))})
    if overridden:
        raise ConfigError(f"{where} is {policy_class.__qualname__}, which overrides {', '.join(overridden)} of "
                          f"RLlib's {base.__name__}: volley trains its own {algorithm} network and runs no RLlib "
                          "policy's loss or postprocessing")


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
        entries = {policy_id: PolicyEntry.of(policy_id, spec, config.algo_name) for policy_id, spec in policies.items()}
        mapping = find_function("policy_mapping_fn", config.policy_mapping_fn) if config.policy_mapping_fn else None
        if mapping is None and len(entries) > 1:
            raise ConfigError(f"multi_agent(policies={sorted(entries)}) needs a policy_mapping_fn(agent_id, episode, "
                              "worker, **kwargs) that says which policy each agent acts with")
        to_train: frozenset[str] | Callable[..., bool]
        if isinstance(config.policies_to_train, str):  # a function's name
            to_train = find_function("policies_to_train", config.policies_to_train)
        else:
            names = config.policies_to_train
            own = frozenset(p for p, e in entries.items() if e.learned and e.algorithm is None)
            to_train = own if names is None else frozenset(names)
            unknown = sorted(to_train - set(entries))
            if unknown:
                raise ConfigError(f"policies_to_train names {unknown[0]!r}, which is not one of the policies "
                                  f"{sorted(entries)}")
            by_hand = sorted(p for p in to_train if not entries[p].learned)
            if by_hand:
                raise ConfigError(f"policies_to_train names {by_hand[0]!r}, a hand-written policy "
                                  f"({entries[by_hand[0]].policy_class.__name__}) that volley cannot train")  # type: ignore[union-attr]
            foreign = sorted(p for p in to_train if entries[p].algorithm is not None)
            if foreign:
                raise ConfigError(f"policies_to_train names {foreign[0]!r}, a policy of {entries[foreign[0]].algorithm}: "
                                  f"a {config.algo_name} run acts with it and trains its own algorithm's policies; train "
                                  "it in a run of its algorithm (as RLlib's multi_agent_two_trainers does)")
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
        """Whether ``policy_id`` is trained (``policies_to_train``; a function is asked ``fn(id, batch=None)``):
        never a hand-written one, nor one of another algorithm than the run's."""
        entry = self.entries[policy_id]
        if not entry.learned or entry.algorithm is not None:
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
    policy map, each learned policy's config and network (unbound: a worker binds the spaces of
    the agents it finds mapped to the policy), and the config's ``observation_fn``."""

    policy_map: PolicyMap
    configs: dict[str, AlgorithmConfig]
    networks: dict[str, NetworkSpec]
    observation_fn: ObservationFn | None = None

    @classmethod
    def of(cls, config: AlgorithmConfig, policy_map: PolicyMap | None = None) -> PolicySetup:
        policy_map = policy_map or PolicyMap.of(config)
        configs = {policy_id: entry.config(config) for policy_id, entry in policy_map.entries.items() if entry.learned}
        observation_fn = find_function("observation_fn", config.observation_fn) if config.observation_fn else None
        return cls(policy_map, configs, {policy_id: NetworkSpec.of(c) for policy_id, c in configs.items()},
                   observation_fn)
