"""Sampling, the learner's side: the workers sample with the current weights, and what they
report (filter statistics, episodes, steps, environment errors) is folded into the learner's.
Every algorithm draws its batches through these methods."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from volley.config import AlgorithmConfig
from volley.learner.base import LearnerBase
from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats
from volley.rollout.sequences import Sequences
from volley.rollout.worker import SampleResult
from volley.torch_networks.policy import ActorCriticPolicy


class Sampling(LearnerBase):
    """Batches from the workers, with the bookkeeping every iteration shares."""

    @property
    def steps_sampled(self) -> int:
        """Environment steps sampled so far, this iteration's included (``timesteps_total`` counts
        them when the iteration ends)."""
        return self.timesteps_total + self._steps_this_iter

    @property
    def filter_stats(self) -> FilterStats | None:
        """The merged statistics of the observation filter and the reward normaliser (None when
        both are off): sent to the workers with every call, and saved in checkpoints."""
        obs = getattr(self.obs_filter, "stats", None)
        return None if obs is None and self.reward_stats is None else FilterStats(obs, self.reward_stats)

    def sample(self, num_episodes: int | None = None) -> Batch:
        """Every worker samples with the learner's current weights; one concatenated batch.

        With ``num_episodes``, the workers share that many whole episodes (each samples
        ``ceil(num_episodes / workers)``).
        """
        results = self._call_workers("sample", self._per_worker(num_episodes))
        self._merge(results)
        return self._learn_on(Batch.concat([result.batch for result in results]))

    def sample_ahead(self) -> Batch:
        """The batch the workers sampled while the learner was updating, and the next one started
        at once with the current weights (double-buffered sampling, as in Sample Factory and
        RLlib's APPO): the batch is one update behind the weights it is trained on."""
        def start_sampling() -> Callable[[], list[Any]]:
            return self.workers.call_async("sample", self.policy.get_flat_weights(), self.filter_stats, None)

        start = time.perf_counter()
        results = (self._next_sample or start_sampling())()
        self._merge(results)
        self._next_sample = start_sampling()
        self._sample_time += time.perf_counter() - start
        return self._learn_on(Batch.concat([result.batch for result in results]))

    def sequences(self, batch: Batch, keys: tuple[str, ...] | None = None) -> Sequences:
        """The learner's view of ``batch`` (its columns ``keys``, default all), as tensors on the
        learner's device: its rows, or a recurrent policy's padded sequences with their states and
        mask (``volley.rollout.sequences``)."""
        return Sequences.of(batch, keys).map(lambda array: torch.as_tensor(array, device=self.device))

    def _learn_on(self, batch: Batch) -> Batch:
        """The batch the learner trains on next, after the callbacks' ``on_learn_on_batch``."""
        if self.hooks.uses("on_learn_on_batch"):
            self.hooks("on_learn_on_batch", policy=self.policy, train_batch=batch,
                       result=self._learner_metrics.new())
        return batch

    def sample_and_apply(self, fn: Callable[[ActorCriticPolicy, Batch, AlgorithmConfig], Any],
                         num_episodes: int | None = None) -> list[Any]:
        """Every worker samples and returns ``fn(policy, batch, config)`` instead of its batch."""
        pairs = self._call_workers("sample_and_apply", fn, self._per_worker(num_episodes))
        self._merge([result for _, result in pairs])
        return [output for output, _ in pairs]

    def _per_worker(self, num_episodes: int | None) -> int | None:
        return None if num_episodes is None else -(-num_episodes // self.workers.num_workers)

    def _call_workers(self, method: str, *args: Any) -> list[Any]:
        """``worker.method(weights, filter_stats, *args)`` on every worker, timed as sampling."""
        start = time.perf_counter()
        results = self.workers.call(method, self.policy.get_flat_weights(), self.filter_stats, *args)
        self._sample_time += time.perf_counter() - start
        return results

    def _merge(self, results: list[SampleResult]) -> None:
        """Fold the workers' filter statistics and episode counts into the learner's."""
        filters = self.filter_stats
        for result in results:
            if filters is not None:
                filters.merge(result.filter_delta)
            self._returns_this_iter.extend(result.episode_returns.tolist())
            self._lengths_this_iter.extend(result.episode_lengths.tolist())
            self._recent_returns.extend(result.episode_returns.tolist())
            self._recent_lengths.extend(result.episode_lengths.tolist())
            self._steps_this_iter += result.env_steps
            self.num_env_errors += result.env_errors
            self._episode_metrics.add(result.episode_metrics)
