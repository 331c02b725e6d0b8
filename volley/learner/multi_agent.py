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

The workers' per-policy views and the stream live in :mod:`volley.learner.multi_agent_stream`,
the policy API (``get_policy``, ``add_policy``, ...) in :mod:`volley.learner.multi_agent_policies`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from volley.callbacks import EnvContext
from volley.checkpoint import SavedCheckpoint, json_part
from volley.config import AlgorithmConfig
from volley.engines import WorkerGroup, make_worker_group
from volley.envs import EnvCreator, registered_creator
from volley.errors import ConfigError
from volley.learner.base import EVAL_SEED_OFFSET
from volley.learner.loop import Learner
from volley.learner.multi_agent_policies import MultiAgentPolicies
from volley.learner.multi_agent_stream import MultiAgentStream, PolicyStream, PolicyWorkers
from volley.multi_agent_env import is_multi_agent_env
from volley.named import env_name
from volley.policies import PolicySetup
from volley.registry import algorithm_class
from volley.rllib_policies import CheckpointedPolicy
from volley.rollout.filters import FilterStats
from volley.rollout.fragments import TrainBatch
from volley.rollout.multi_agent import MultiAgentRolloutWorker, MultiAgentSample
from volley.rollout.worker import SampleResult

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


class MultiAgent(MultiAgentPolicies, MultiAgentStream, Learner):
    """A multi-agent run of ``algorithm_class``: the workers, the run's counters and results, and a
    learner of the algorithm per learned policy (``learners``)."""

    algorithm_class: ClassVar[type[Learner]]
    setup_: PolicySetup
    learners: dict[str, Learner]

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

