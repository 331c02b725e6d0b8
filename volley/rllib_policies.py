"""RLlib's classes a multi-agent config is written with: ``PolicySpec`` (one entry of
``multi_agent(policies=...)``) and ``Policy`` (the base of a policy a script writes by hand), and
the config's form of ``policies`` (:func:`policies_value`): data, with classes kept by name as
the config's other objects are (:mod:`volley.named`). :mod:`volley.policies` resolves it."""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import safetensors.numpy

from volley.errors import CheckpointError, ConfigError, VolleyError, shown
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


@dataclass
class ViewRequirement:
    """RLlib's description of one column a policy reads (``policy.view_requirements[column]``): kept
    for the hand-written policies that read or adjust it; volley's workers do not consult it."""

    data_col: str | None = None
    space: gym.Space | None = None
    shift: int = 0
    used_for_compute_actions: bool = True
    used_for_training: bool = True


# the columns RLlib's Policy describes by default (SampleBatch's names)
DEFAULT_COLUMNS = ("obs", "new_obs", "actions", "prev_actions", "rewards", "prev_rewards", "terminateds",
                   "truncateds", "infos", "eps_id", "unroll_id", "agent_index", "t")


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
        self.exploration = None
        self.global_timestep = 0
        self.init_view_requirements()

    def _create_exploration(self) -> None:
        """RLlib's heuristics call it; a hand-written policy explores as its ``compute_actions`` says."""
        return None

    def init_view_requirements(self) -> None:
        """RLlib's hook for the columns a policy reads, with RLlib's defaults for those not set yet
        (a subclass adjusts them, as RLlib's ``RandomPolicy`` does). volley's workers read none of
        them: every policy is given the same columns."""
        if not hasattr(self, "view_requirements"):
            self.view_requirements: dict[str, Any] = {}
        spaces = {"obs": self.observation_space, "new_obs": self.observation_space, "actions": self.action_space}
        for column in DEFAULT_COLUMNS:
            self.view_requirements.setdefault(column, ViewRequirement(
                space=spaces.get(column), used_for_compute_actions=column not in ("new_obs", "actions", "infos")))

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

    def compute_log_likelihoods(self, actions: Any, obs_batch: Any, state_batches: list[Any] | None = None,
                                prev_action_batch: Any = None, prev_reward_batch: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no compute_log_likelihoods()")

    def _get_dummy_batch_from_view_requirements(self, batch_size: int = 1) -> dict[str, Any]:
        """RLlib's batch of zeros for the policy's observation and action columns."""
        return {column: gym.vector.utils.create_empty_array(space, batch_size, fn=np.zeros)
                for column, space in (("obs", self.observation_space), ("actions", self.action_space))}

    def learn_on_batch(self, samples: Any) -> dict[str, Any]:
        return {}

    @staticmethod
    def from_checkpoint(checkpoint: str | os.PathLike, policy_ids: Collection[str] | None = None
                        ) -> CheckpointedPolicy | dict[str, CheckpointedPolicy]:
        """RLlib's call: the policy a policy checkpoint holds (``<algorithm checkpoint>/policies/<id>``,
        RLlib's layout, which volley's multi-agent checkpoints have), or of an algorithm checkpoint
        its policies by id (``policy_ids``, default all): each with its weights and config."""
        path = Path(checkpoint)
        if (path / POLICY_META).is_file():
            if policy_ids is not None:
                raise ConfigError(f"'{path}' is one policy's checkpoint: give no policy_ids")
            return CheckpointedPolicy.read(path)
        found = sorted(p.parent.name for p in (path / "policies").glob(f"*/{POLICY_META}"))
        if not found:
            raise CheckpointError(f"'{path}' holds no policy checkpoint (neither {POLICY_META} nor policies/<id>/)")
        missing = sorted(set(policy_ids or ()) - set(found))
        if missing:
            raise CheckpointError(f"checkpoint '{path}' holds no policy {missing[0]!r} (it holds {found})")
        return {policy_id: CheckpointedPolicy.read(path / "policies" / policy_id)
                for policy_id in (policy_ids or found)}

    def get_weights(self) -> dict[str, Any]:
        return {}

    def set_weights(self, weights: Any) -> None:
        """A hand-written policy has no weights."""


POLICY_META = "policy.json"  # a policy checkpoint: its id and config ...
POLICY_WEIGHTS = "weights.safetensors"  # ... and its network's tensors by name


class CheckpointedPolicy(Policy):
    """A learned policy as a checkpoint holds it: its weights and config, to give to ``set_weights`` of
    another run (RLlib's restore_1_of_n_agents_from_checkpoint). Acting needs its network, which the
    algorithm restored from the checkpoint builds (``Algorithm.from_checkpoint``)."""

    def __init__(self, policy_id: str, weights: dict[str, np.ndarray], config: dict[str, Any]) -> None:
        super().__init__(None, None, config)  # type: ignore[arg-type]
        self.policy_id = policy_id
        self.weights = weights

    @classmethod
    def read(cls, path: Path) -> CheckpointedPolicy:
        meta = json.loads((path / POLICY_META).read_text())
        return cls(meta["policy_id"], safetensors.numpy.load_file(path / POLICY_WEIGHTS), meta["config"])

    def write(self, path: Path) -> None:
        """This policy as a policy checkpoint in directory ``path`` (its config: what JSON holds of it)."""
        path.mkdir(parents=True, exist_ok=True)
        safetensors.numpy.save_file({k: np.ascontiguousarray(v) for k, v in self.weights.items()},
                                    path / POLICY_WEIGHTS)
        (path / POLICY_META).write_text(json.dumps({"policy_id": self.policy_id, "config": self.config}, indent=1))

    def get_weights(self) -> dict[str, np.ndarray]:
        return dict(self.weights)

    def set_weights(self, weights: Any) -> None:
        self.weights = dict(weights)

    def compute_actions(self, obs_batch: Any, state_batches: list[Any] | None = None, prev_action_batch: Any = None,
                        prev_reward_batch: Any = None, info_batch: Any = None, episodes: Any = None,
                        **kwargs: Any) -> tuple[Any, list[Any], dict[str, Any]]:
        raise VolleyError(f"policy {self.policy_id!r} was restored from a checkpoint as its weights: to act with "
                          "it, restore its algorithm (Algorithm.from_checkpoint) and use algo.get_policy(id)")


# the hand-written policy classes a config names ("module:QualName"), found again as its other objects are
POLICY_CLASSES = NamedObjects("policy class", "policies", "PolicySpec(policy_class={obj})",
                              "pass the class itself", lambda obj, _: isinstance(obj, type))


_SPEC_FIELDS = ("policy_class", "observation_space", "action_space", "config")


def policies_value(value: Any) -> dict[str, dict[str, Any]] | None:
    """The config's form of RLlib's ``policies``: a set (list, tuple) of ids, or a dict of ids to a
    :class:`PolicySpec`, RLlib's tuple ``(policy_class, obs_space, act_space, config)`` or None;
    each becomes ``{"policy_class": name or None, "observation_space", "action_space", "config"}``, and
    an entry in that form already (a saved config's) stays as it is."""
    if value is None:
        return None
    if isinstance(value, (set, frozenset)):  # in a fixed order: a set's varies from process to process
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
        elif isinstance(spec, Mapping) and set(spec) == set(_SPEC_FIELDS):  # the config's own form (a saved config)
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
