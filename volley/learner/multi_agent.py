"""A multi-agent run: several policies, each learned by its own learner of the run's algorithm.

``PPO(config)`` with ``config.multi_agent(policies=...)``, or on a multi-agent environment, builds
:class:`MultiAgent` over PPO (:func:`multi_agent_class`): it holds the multi-agent workers and
the run's counters, and for every learned policy one ordinary PPO learner (its network,
optimizer, schedules, replay buffer) built on a :class:`PolicyWorkers` view of the workers.
How the run feeds those learners is what the algorithm declares (``multi_agent_feed``):

- ``"sample"`` (PPO, PG, DQN, SAC, ...): each iteration samples once with every policy's weights;
  then each policy to train runs its algorithm's own ``training_step`` on its part of the sample
  (:class:`PolicyWorkers`);
- ``"stream"`` (IMPALA, APPO): the workers stream fragments without waiting for the learners, and
  each train batch of the stream (``train_batch_size`` environment steps, as RLlib's) is split by
  policy; every policy to train updates on its part, one update at a time, in turn with the
  others (:class:`PolicyStream`, :class:`StreamLearner`), and every policy's weights travel to the
  workers together, each with its own version.

Either way nothing of an algorithm is written twice: a policy learns exactly as a single-agent run
of the algorithm would from the same batches.

This is RLlib's layout (a ``Policy`` per id, each with its own loss and optimizer), and what its
``multi_agent_two_trainers`` example does by hand: PPO and DQN each train their own policy.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Protocol, cast

import numpy as np
import torch

from volley.callbacks import EnvContext
from volley.checkpoint import SavedCheckpoint, json_part
from volley.config import AlgorithmConfig
from volley.engines import StreamingWorkerGroup, WorkerGroup, make_worker_group
from volley.envs import EnvCreator, registered_creator
from volley.errors import ConfigError
from volley.learner.base import EVAL_SEED_OFFSET
from volley.learner.loop import Learner
from volley.multi_agent_env import is_multi_agent_env
from volley.named import env_name
from volley.policies import PolicyEntry, PolicyMap, PolicySetup
from volley.registry import algorithm_class
from volley.rllib_policies import CheckpointedPolicy, Policy, PolicySpec, policies_value
from volley.rllib_results import DEFAULT_POLICY
from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats
from volley.rollout.fragments import Filters, TrainBatch, Version, Weights
from volley.rollout.multi_agent import MultiAgentRolloutWorker, MultiAgentSample
from volley.rollout.worker import SampleResult
from volley.torch_networks.policy import Policy as Network

_PROBED: dict[Any, bool] = {}  # creator function -> whether it makes multi-agent environments


def is_multi_agent(config: AlgorithmConfig | dict[str, Any] | None, env: Any) -> bool:
    """Whether a run of ``config`` (and ``env``, as an algorithm's constructor takes them) is
    multi-agent: its config names policies, or its environment is a multi-agent one (a creator
    function is called once, on the driver, to see what it makes)."""
    if isinstance(config, AlgorithmConfig):
        policies, env = config.policies, env or config.env
        env_config = config.env_config
    else:
        config = config or {}
        policies = config.get("policies") or (config.get("multiagent") or {}).get("policies")
        env, env_config = env or config.get("env"), config.get("env_config") or {}
    if policies:
        return True
    if env is None:
        return False
    creator = registered_creator(env if isinstance(env, str) else env_name(env))
    if creator is None:
        return False
    if isinstance(creator, type):
        return is_multi_agent_env(creator)
    if creator not in _PROBED:
        try:
            made = creator(EnvContext(dict(env_config), 0, None, 0))
        except Exception:  # a creator that fails is named, with the error, where the workers make it
            return False
        _PROBED[creator] = is_multi_agent_env(made)
        if callable(getattr(made, "close", None)):
            made.close()
    return _PROBED[creator]


class PolicyWorkers(WorkerGroup):
    """One policy's view of a multi-agent run's workers: ``sample`` gives the policy's part of the
    run's latest sample (the run samples again if the policy has read it already). A worker that had
    no agent of the policy sampled a batch without columns: it gets the others' columns, with no
    rows, so the learner concatenates the workers' batches as a single-agent run's."""

    def __init__(self, run: MultiAgent, policy_id: str, spaces: tuple[Any, Any]) -> None:
        self.run, self.policy_id, self._spaces = run, policy_id, spaces
        self.plan, self.num_workers = run.workers.plan, run.workers.num_workers

    def call(self, method: str, *args: Any) -> list[Any]:
        if method != "sample":
            raise ConfigError(f"{type(self.run).__name__} trains policy {self.policy_id!r} of a multi-agent run from "
                              f"sampled batches; '{method}' is not available there")
        results = self.run.policy_results(self.policy_id)
        columns = next((result.batch for result in results if result.batch), Batch())
        return [result if result.batch else replace(result, batch=Batch({key: value[:0] for key, value in columns.items()}))
                for result in results]

    def spaces(self) -> tuple[Any, Any]:
        return self._spaces

    def stop(self) -> None:
        """The run's workers are stopped by the run."""


class PolicyStream(PolicyWorkers, StreamingWorkerGroup):
    """One policy's view of a multi-agent run's stream of fragments: ``next_batch`` gives the policy's
    part of the stream's next train batch, and what the policy's learner publishes goes to the workers
    with every other policy's weights."""

    def start(self, weights: Weights, filters: Filters, version: Version) -> None:
        """The run starts the stream, with every policy's weights; this one's are recorded."""
        self.publish(weights, filters, version)

    def publish(self, weights: Weights, filters: Filters, version: Version) -> None:
        assert isinstance(weights, np.ndarray) and isinstance(version, int)
        self.run.published[self.policy_id] = (weights, cast(FilterStats | None, filters), version)

    def next_batch(self) -> TrainBatch:
        return self.run.policy_batch(self.policy_id)

    @property
    def num_dropped_fragments(self) -> int:  # type: ignore[override]
        return cast(StreamingWorkerGroup, self.run.workers).num_dropped_fragments


class StreamLearner(Protocol):
    """A learner of an algorithm a multi-agent run feeds a stream (``multi_agent_feed = "stream"``):
    its iteration in three steps, so that the run interleaves the policies' updates."""

    def begin_updates(self) -> None: ...

    def update_once(self) -> None: ...

    def updates_statistics(self, took: float) -> dict[str, Any]: ...


class MultiAgent(Learner):
    """A multi-agent run of ``algorithm_class``: the workers, the run's counters and results, and a
    learner of the algorithm per learned policy (``learners``)."""

    algorithm_class: ClassVar[type[Learner]]
    setup_: PolicySetup
    learners: dict[str, Learner]
    # a stream's: what each policy's learner published last (weights, filter statistics, its version)
    published: dict[str, tuple[np.ndarray, FilterStats | None, int]]

    def make_workers(self, env_creator: EnvCreator | None, setup: PolicySetup | None = None) -> WorkerGroup:
        """The algorithm's own kind of workers, multi-agent ones, once the algorithm says how its
        learners are fed by policy (``multi_agent_feed``)."""
        algorithm = self.algorithm_class
        if algorithm.multi_agent_feed is None:
            raise ConfigError(f"multi-agent training with {algorithm.__name__} is not supported yet: its learner "
                              "reads its workers' output as a whole (replay shards filled by acting workers, or a "
                              "single-agent worker's fragments), which a multi-agent run cannot split by policy "
                              "(PPO, PG, A2C, TRPO, DQN, SAC, IMPALA and APPO train several policies)")
        cfg = self.config
        if cfg.engine == "mpi" and cfg.mpi_mode == "allreduce":  # each policy's learner would update on its own
            raise ConfigError("multi-agent training with mpi_mode='allreduce' is not supported yet: the policies' "
                              "learners do not average their gradients over the ranks; use mpi_mode='gather'")
        if getattr(cfg, "sample_async", False):
            raise ConfigError("multi-agent training samples between the policies' updates: sample_async=True is "
                              "not supported yet")
        self.setup_ = PolicySetup.of(cfg)
        return super().make_workers(env_creator, self.setup_)

    def _set_up(self, config: AlgorithmConfig) -> None:
        self.device = torch.device("cpu")
        self._start_counters(config)
        self.agent_timesteps_total = 0
        self._agent_steps_this_iter = 0
        self._pending: dict[str, list[SampleResult]] = {}
        self._stream_batches: dict[str, deque[TrainBatch]] = {}  # each policy's parts of train batches not yet read
        self.published = {}
        self._sent: dict[str, tuple[np.ndarray, FilterStats | None, int]] = {}  # what the workers have
        self._streaming = False
        # the recent returns of the hand-written policies' agents (a learned policy's learner keeps its own)
        self._by_hand_returns: dict[str, deque[float]] = {}
        self.policy_spaces = self.workers.spaces()
        self.learners = {}
        for policy_id in self.setup_.configs:
            self.learners[policy_id] = self._policy_learner(policy_id)
        self.by_hand = {policy_id: entry.policy_class(self.policy_spaces[policy_id][0], self.policy_spaces[policy_id][1],
                                                      entry.overrides)
                        for policy_id, entry in self.setup_.policy_map.entries.items() if entry.policy_class is not None}
        self._finish_set_up(config)

    def make_eval_workers(self) -> WorkerGroup | None:
        """``evaluation_num_workers`` multi-agent workers with the evaluation settings (None for 0)."""
        cfg = self.config
        if cfg.evaluation_num_workers == 0:
            return None
        settings = cfg.evaluation_settings().update(num_workers=cfg.evaluation_num_workers)
        return make_worker_group(settings, type(self).postprocess, registered_creator(cfg.env),
                                 seed_offset=EVAL_SEED_OFFSET + 1, setup=self.setup_,
                                 reserved_cpus=self.workers.plan.num_workers * cfg.num_cpus_per_worker)

    def _policy_learner(self, policy_id: str) -> Learner:
        """An ordinary learner of the algorithm for ``policy_id``, on its view of the workers; seeded
        apart from the others, so that policies of one architecture start from different weights."""
        index = list(self.setup_.policy_map.entries).index(policy_id)
        config = self.setup_.configs[policy_id].copy(copy_frozen=False).update(
            seed=self.config.seed + 7919 * index, callbacks_class=None, create_env_on_driver=False,
            evaluation_num_workers=0, evaluation_interval=None)
        other = self.setup_.policy_map.entries[policy_id].algorithm  # a policy this run acts with, never trains
        algorithm = self.algorithm_class if other is None else algorithm_class(other)
        view = PolicyStream if self.algorithm_class.multi_agent_feed == "stream" else PolicyWorkers
        return algorithm(config, workers=view(self, policy_id, self.policy_spaces[policy_id]))

    # -- sampling and the training step ----------------------------------------------------------

    def policy_results(self, policy_id: str) -> list[SampleResult]:
        """The workers' results for ``policy_id`` not yet read, sampling with every policy if there are none."""
        if policy_id not in self._pending:
            self._sample_all()
        return self._pending.pop(policy_id)

    def _sample_all(self) -> None:
        start = time.perf_counter()
        weights = {policy_id: learner.policy.get_flat_weights() for policy_id, learner in self.learners.items()}
        filters: dict[str, FilterStats | None] = {p: learner.filter_stats for p, learner in self.learners.items()}
        samples: list[MultiAgentSample] = self.workers.call("sample", weights, filters, None)
        self._sample_time += time.perf_counter() - start
        self._pending = {policy_id: [s.policies[policy_id] for s in samples] for policy_id in self.learners}
        self._count(samples)

    def _count(self, samples: list[MultiAgentSample]) -> None:
        """The run's counters take the environments' episodes and steps, and the hand-written
        policies' agents' returns (a learned policy's learner counts its own)."""
        for sample in samples:
            self._returns_this_iter.extend(sample.episode_returns.tolist())
            self._lengths_this_iter.extend(sample.episode_lengths.tolist())
            self._recent_returns.extend(sample.episode_returns.tolist())
            self._recent_lengths.extend(sample.episode_lengths.tolist())
            by_agents = self.config.count_steps_by == "agent_steps"
            self._steps_this_iter += sample.agent_steps if by_agents else sample.env_steps
            self._agent_steps_this_iter += sample.agent_steps
            self._episode_metrics.add(sample.episode_metrics)
            for policy_id, result in sample.policies.items():  # a hand-written policy's returns
                if policy_id not in self.learners:
                    self._by_hand_returns.setdefault(policy_id, deque(
                        maxlen=self.config.metrics_num_episodes_for_smoothing)).extend(result.episode_returns.tolist())

    def training_step(self) -> dict[str, Any]:
        """Each policy to train learns from its part of what the workers sampled, by its algorithm's own
        training step (or, from a stream, its own updates); returns each one's statistics by policy id."""
        if self.algorithm_class.multi_agent_feed == "stream":
            return self._stream_step()
        self._sample_all()
        stats = {}
        for policy_id, learner in self.learners.items():
            if self.setup_.policy_map.trains(policy_id) and any(len(r.batch) for r in self._pending[policy_id]):
                learner.iteration = self.iteration
                stats[policy_id] = learner.training_step()
                learner.timesteps_total += learner._steps_this_iter  # each learner's schedules run on its own steps
                learner._steps_this_iter = 0
            elif policy_id in self._pending:  # untrained: its agents' episodes still count in its returns
                learner._merge(self._pending.pop(policy_id))
        self._pending = {}
        return stats

    # -- a stream of fragments (IMPALA, APPO) -----------------------------------------------------

    def _stream_step(self) -> dict[str, Any]:
        """Train batches from the stream for ``min_time_s_per_iteration`` seconds (and
        ``min_sample_timesteps_per_iteration`` steps), each split by policy; every policy to train
        updates on its part as its algorithm would (as many updates as its minibatch buffer takes to
        read it), in turn with the others, so no policy's batches wait for another's updates."""
        cfg = self.config
        start = time.perf_counter()
        trained = {policy_id: cast(StreamLearner, learner) for policy_id, learner in self.learners.items()
                   if self.setup_.policy_map.trains(policy_id)}
        for policy_id, learner in trained.items():
            self.learners[policy_id].iteration = self.iteration
            learner.begin_updates()
        updated: set[str] = set()
        taken = 0
        while (not taken or time.perf_counter() - start < cfg.min_time_s_per_iteration
               or self._steps_this_iter < cfg.min_sample_timesteps_per_iteration):
            self._take_train_batch()
            taken += 1
            for policy_id, learner in trained.items():
                while self._stream_batches.get(policy_id):
                    learner.update_once()
                    updated.add(policy_id)
        took = time.perf_counter() - start
        for policy_id in updated:  # each learner's schedules run on its own steps
            self.learners[policy_id].timesteps_total += self.learners[policy_id]._steps_this_iter
            self.learners[policy_id]._steps_this_iter = 0
        return {policy_id: trained[policy_id].updates_statistics(took) for policy_id in trained if policy_id in updated}

    def _take_train_batch(self) -> None:
        """The stream's next train batch, with what the learners published last: the run counts its new
        fragments' episodes and steps, a policy to train keeps its part to update on, and any other
        learned policy takes its agents' episodes."""
        self._publish()
        start = time.perf_counter()
        train_batch = cast(StreamingWorkerGroup, self.workers).next_batch()
        self._sample_time += time.perf_counter() - start
        self._count([cast(MultiAgentSample, fragment.result) for fragment in train_batch.fragments])
        for policy_id, learner in self.learners.items():
            part = train_batch.of_policy(policy_id)
            if part.batches and self.setup_.policy_map.trains(policy_id):
                self._stream_batches.setdefault(policy_id, deque()).append(part)
            else:
                learner._merge(part.results())

    def policy_batch(self, policy_id: str) -> TrainBatch:
        """Policy ``policy_id``'s part of the next train batch it has not read (the run takes train
        batches from the stream until one holds rows of it)."""
        batches = self._stream_batches.setdefault(policy_id, deque())
        while not batches:
            self._take_train_batch()
        return batches.popleft()

    def _publish(self) -> None:
        """Every policy's weights, filter statistics and version, as its learner last published them (a
        learner that has not: its weights now, version 0), go to the workers together; the first
        time, the stream starts with them."""
        for policy_id, learner in self.learners.items():
            self.published.setdefault(policy_id, (learner.policy.get_flat_weights(), learner.filter_stats, 0))
        if self._streaming and self._sent.keys() == self.published.keys() and all(
                self._sent[policy_id] is entry for policy_id, entry in self.published.items()):
            return  # the workers have these
        weights = {policy_id: entry[0] for policy_id, entry in self.published.items()}
        filters = {policy_id: entry[1] for policy_id, entry in self.published.items()}
        versions = {policy_id: entry[2] for policy_id, entry in self.published.items()}
        workers = cast(StreamingWorkerGroup, self.workers)
        (workers.publish if self._streaming else workers.start)(weights, filters, versions)
        self._sent, self._streaming = dict(self.published), True

    # -- results -------------------------------------------------------------------------------

    def close_iteration(self, took: float, stats: dict[str, Any], evaluation: dict[str, Any] | None) -> dict[str, Any]:
        """The run's result, with RLlib's multi-agent keys: ``policy_reward_mean`` / ``_min`` / ``_max``
        and ``hist_stats/policy_<id>_reward`` per policy, over the last ``metrics_num_episodes_for_smoothing``
        episodes of its agents as RLlib's, ``agent_timesteps_total``, and each trained policy's
        statistics under ``learner/<id>`` (RLlib's ``info/learner/<id>``)."""
        self.agent_timesteps_total += self._agent_steps_this_iter
        self._agent_steps_this_iter = 0
        result = super().close_iteration(took, {}, evaluation)
        returns = {policy_id: list(learner._recent_returns) for policy_id, learner in self.learners.items()}
        returns.update({policy_id: list(r) for policy_id, r in self._by_hand_returns.items()})
        summary = {policy_id: np.asarray(r) for policy_id, r in returns.items() if r}
        result["policy_reward_mean"] = {p: float(r.mean()) for p, r in summary.items()}
        result["policy_reward_min"] = {p: float(r.min()) for p, r in summary.items()}
        result["policy_reward_max"] = {p: float(r.max()) for p, r in summary.items()}
        result.setdefault("hist_stats", {}).update({f"policy_{p}_reward": r.tolist() for p, r in summary.items()})
        result["agent_timesteps_total"] = self.agent_timesteps_total
        result["learner"] = stats
        result["learners"] = stats
        result["info"] = {"learner": {p: {"learner_stats": s} for p, s in stats.items()}}
        return result

    # -- the policy API ----------------------------------------------------------------------------

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

    # -- checkpoints -------------------------------------------------------------------------------

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The run's counters, and each learned policy's whole learner state under its id."""
        tensors: dict[str, torch.Tensor] = {"rng.torch": torch.get_rng_state()}
        policies = {}
        for policy_id, learner in self.learners.items():
            learner_tensors, policies[policy_id] = learner.checkpoint_state()
            tensors.update({f"policies.{policy_id}.{k}": v for k, v in learner_tensors.items()})
        state = {"iteration": self.iteration, "timesteps_total": self.timesteps_total,
                 "agent_timesteps_total": self.agent_timesteps_total, "episodes_total": self.episodes_total,
                 "time_total_s": self.time_total_s, "recent_returns": list(self._recent_returns),
                 "recent_lengths": list(self._recent_lengths), "rng": self.rng.bit_generator.state,
                 "policies": policies}
        return tensors, state

    def save(self, path: str | Path | None = None) -> SavedCheckpoint:
        """The run's checkpoint, and in it RLlib's ``policies/<id>/``: each learned policy's weights and
        config, which ``Policy.from_checkpoint`` reads (RLlib's restore_1_of_n_agents_from_checkpoint)."""
        saved = super().save(path)
        for policy_id, learner in self.learners.items():
            config, _ = json_part(learner.config.to_dict(), "")
            CheckpointedPolicy(policy_id, learner.policy.get_weights(), config).write(Path(saved) / "policies" / policy_id)
        return saved

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any], path: Any) -> None:
        self.published.clear()  # a stream's learners publish their restored weights again
        for policy_id, learner in self.learners.items():
            if policy_id not in state["policies"]:
                raise ConfigError(f"checkpoint '{path}' holds no policy {policy_id!r} (it holds "
                                  f"{sorted(state['policies'])})")
            prefix = f"policies.{policy_id}."
            own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            learner.load_checkpoint_state(own, state["policies"][policy_id], path)
        torch.set_rng_state(tensors["rng.torch"])
        self.rng.bit_generator.state = state["rng"]
        self.iteration, self.timesteps_total = state["iteration"], state["timesteps_total"]
        self.agent_timesteps_total = state["agent_timesteps_total"]
        self.episodes_total, self.time_total_s = state["episodes_total"], state["time_total_s"]
        self._recent_returns.extend(state["recent_returns"])
        self._recent_lengths.extend(state["recent_lengths"])
        if self._streaming:
            self._publish()

    # -- evaluation ----------------------------------------------------------------------------------

    def play_evaluation(self, num_episodes: int | None = None, before_step: Callable[[], None] | None = None
                        ) -> dict[str, Any]:
        """Whole episodes on the evaluation workers, or on the driver's own multi-agent environment (always
        with ``before_step``, which a video's frames are grabbed by), every policy acting with its most
        likely actions (unless the evaluation config explores); returns summed over agents."""
        from volley.learner.evaluation import episodes_of, summarize_episodes

        start = time.perf_counter()
        cfg = self.config
        by_steps = num_episodes is None and cfg.evaluation_duration_unit == "timesteps"
        amount = num_episodes or cfg.evaluation_duration
        weights = {policy_id: learner.policy.get_flat_weights() for policy_id, learner in self.learners.items()}
        filters = {policy_id: learner.filter_stats for policy_id, learner in self.learners.items()}
        if self.eval_workers is None or before_step is not None:
            results = [self.driver_worker().evaluate(weights, filters, None if by_steps else amount,
                                                     amount if by_steps else None, before_step)]
        else:
            share = -(-amount // self.eval_workers.num_workers)
            results = self.eval_workers.call("evaluate", weights, filters, None if by_steps else share,
                                             share if by_steps else None)
        flat = {**summarize_episodes(episodes_of(results)), "time_s": time.perf_counter() - start}
        return {**flat, "evaluation": dict(flat)}

    def driver_worker(self) -> Any:
        """The driver's own multi-agent worker of one environment, seeded apart from training ones: where
        evaluation plays without evaluation workers, and videos are drawn (a class that takes a
        ``render_mode``, as ``make_multi_agent``'s, is made with ``"rgb_array"``). It takes the policies
        ``add_policy`` / ``remove_policy`` changed since it was built."""
        if self._driver_worker is None:
            cfg = self.config
            self._driver_worker = MultiAgentRolloutWorker(  # type: ignore[assignment]
                cfg.evaluation_settings(), 0, type(self).postprocess, registered_creator(cfg.env), num_envs=1,
                seed_offset=EVAL_SEED_OFFSET, render_mode="rgb_array", plan=self.workers.plan, setup=self.setup_)
        worker: MultiAgentRolloutWorker = self._driver_worker  # type: ignore[assignment]
        if worker.setup is not self.setup_:
            worker.set_policies(self.setup_)
        return worker

    @property
    def env(self) -> Any:
        """The driver's multi-agent environment, RLlib's ``algo.workers.local_worker().env``: the one
        :meth:`evaluate` plays when there are no evaluation workers."""
        self.check_env_on_driver()
        return self.driver_worker().envs[0]

    def stop(self) -> None:
        if self._driver_worker is not None:
            self._driver_worker.stop()
            self._driver_worker = None
        super().stop()


@cache
def multi_agent_class(algorithm: type[Learner]) -> type[MultiAgent]:
    """The class of multi-agent runs of ``algorithm``: named as it is (checkpoints and results name
    the algorithm), an instance of it, and its :class:`MultiAgent` methods first."""
    return type(algorithm.__name__, (MultiAgent, algorithm), {"algorithm_class": algorithm, "multi_agent": True,
                                                              "__module__": algorithm.__module__})

