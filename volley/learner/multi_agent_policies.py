"""The policy API of a multi-agent run (:mod:`volley.learner.multi_agent`): RLlib's ``get_policy``
and ``compute_single_action`` by policy id, and ``add_policy`` / ``remove_policy`` while training."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from volley.errors import ConfigError
from volley.learner.inference import Inference
from volley.learner.loop import Learner
from volley.policies import PolicyEntry, PolicyMap, PolicySetup
from volley.rllib_policies import Policy, PolicySpec, policies_value
from volley.rllib_results import DEFAULT_POLICY
from volley.rollout.filters import FilterStats
from volley.rollout.fragments import TrainBatch
from volley.torch_networks.policy import Policy as Network


class MultiAgentPolicies(Inference):
    """The policy API of :class:`~volley.learner.multi_agent.MultiAgent`, which sets the fields below
    and builds each learned policy's learner (``_policy_learner``)."""

    setup_: PolicySetup
    learners: dict[str, Learner]
    by_hand: dict[str, Policy]  # the hand-written policies' instances
    policy_spaces: dict[str, tuple[Any, Any]]  # each policy's observation and action spaces
    _by_hand_returns: dict[str, deque[float]]
    published: dict[str, tuple[np.ndarray, FilterStats | None, int]]
    _stream_batches: dict[str, deque[TrainBatch]]
    _streaming: bool
    _policy_learner: Callable[[str], Learner]
    _publish: Callable[[], None]

    def get_policy(self, policy_id: str = DEFAULT_POLICY) -> Network | Policy:  # type: ignore[override]
        """Policy ``policy_id``: a learned one's torch network, or the hand-written policy's instance."""
        if policy_id in self.learners:
            return self.learners[policy_id].policy
        if policy_id in self.by_hand:
            return self.by_hand[policy_id]
        raise ConfigError(f"no policy {policy_id!r}: the run's policies are {sorted(self.setup_.policy_map.entries)}")

    def compute_single_action(self, observation: Any = None, state: list | None = None, *,
                              policy_id: str = DEFAULT_POLICY, **kwargs: Any) -> Any:
        """The action of policy ``policy_id`` for one agent's observation (RLlib's call)."""
        if policy_id in self.by_hand:
            return self.by_hand[policy_id].compute_single_action(observation, state)[0]
        if policy_id not in self.learners:
            self.get_policy(policy_id)  # says which ids there are
        return self.learners[policy_id].compute_single_action(observation, state, **kwargs)

    def add_policy(self, policy_id: str, policy_cls: type | None = None, *, observation_space: Any = None,
                   action_space: Any = None, config: dict[str, Any] | None = None, policy_spec: PolicySpec | None = None,
                   policy_mapping_fn: Callable[..., str] | None = None,
                   policies_to_train: Iterable[str] | Callable[..., bool] | None = None,
                   policy_state: dict[str, Any] | None = None, **_: Any) -> Network | Policy:
        """RLlib's ``add_policy`` while training: a new policy (a learned one of the run's algorithm, or a
        hand-written ``policy_cls``), and the mapping and set to train from now on. ``policy_state``:
        RLlib's ``policy.get_state()`` of another policy, whose weights it starts from (self-play
        leagues add frozen snapshots of the learner so)."""
        if policy_id in self.setup_.policy_map.entries:
            raise ConfigError(f"add_policy: policy {policy_id!r} exists already")
        spec = policy_spec or PolicySpec(policy_cls, observation_space, action_space, config)
        described = policies_value({policy_id: spec})[policy_id]  # type: ignore[index]
        entry = PolicyEntry.of(policy_id, described, self.config.algo_name)
        policy_map = self.setup_.policy_map.with_policy(entry, policy_mapping_fn, policies_to_train)
        self._change_policies(policy_map, {policy_id: described})
        if entry.learned:
            self.learners[policy_id] = self._policy_learner(policy_id)
            if policy_state is not None and "weights" in policy_state:
                self.learners[policy_id].policy.set_weights(policy_state["weights"])
        else:
            obs_space, act_space = self.policy_spaces[policy_id]
            self.by_hand[policy_id] = entry.policy_class(obs_space, act_space, entry.overrides)  # type: ignore[misc]
        if self._streaming:  # the workers act with it from their next fragment
            self._publish()
        return self.get_policy(policy_id)

    def remove_policy(self, policy_id: str, *, policy_mapping_fn: Callable[..., str] | None = None,
                      policies_to_train: Iterable[str] | Callable[..., bool] | None = None, **_: Any) -> None:
        """RLlib's ``remove_policy``: the policy is dropped from the run, its agents mapped anew."""
        if policy_id not in self.setup_.policy_map.entries:
            self.get_policy(policy_id)
        self._change_policies(self.setup_.policy_map.without_policy(policy_id, policy_mapping_fn, policies_to_train),
                              {policy_id: None})
        self.learners.pop(policy_id, None)
        self.by_hand.pop(policy_id, None)
        self._by_hand_returns.pop(policy_id, None)
        if self._streaming:
            self._publish()

    def _change_policies(self, policy_map: PolicyMap, changed: dict[str, dict[str, Any] | None]) -> None:
        """The run's config and workers take ``policy_map``: the config's ``policies`` with the entries
        ``changed`` (None: removed), and the map's mapping function and set to train, so that the
        run rebuilt from a checkpoint plays and trains as this one does now."""
        policies = {p: e for p, e in {**(self.config.policies or {}), **changed}.items() if e is not None}
        to_train = policy_map.to_train
        config = self.config.copy(copy_frozen=False).update(
            policies=policies, policy_mapping_fn=policy_map.mapping_fn,
            policies_to_train=to_train if callable(to_train) else sorted(to_train))
        config.freeze()
        self.config = config
        self.setup_ = PolicySetup.of(config, policy_map)
        self.workers.call("set_policies", self.setup_)
        if self.eval_workers is not None:
            self.eval_workers.call("set_policies", self.setup_)
        self.policy_spaces = {**self.workers.spaces(), **self.policy_spaces}
        for policy_id, entry in changed.items():
            if entry is None:  # removed: its weights leave the stream's
                self.published.pop(policy_id, None)
                self._stream_batches.pop(policy_id, None)
