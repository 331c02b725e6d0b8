"""The result of an iteration: this iteration's counts folded into the run's totals, and the
flat dict ``train()`` returns (which progress.jsonl and TensorBoard record) with RLlib's nested
views of the same numbers (``volley.rllib_results.training_views``)."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from volley.errors import ConfigError
from volley.learner.base import LearnerBase
from volley.rllib_results import training_views


class Results(LearnerBase):
    """The result dict of an iteration."""

    def close_iteration(self, took: float, stats: dict[str, float],
                        evaluation: dict[str, Any] | None) -> dict[str, Any]:
        """Add this iteration (``took`` seconds, evaluation included) to the totals and return its
        result: the counters, the episodes' statistics, the algorithm's ``stats`` and the
        ``evaluation``'s, if one ran."""
        eval_time = evaluation["time_s"] if evaluation is not None else 0.0
        self.timesteps_total += self._steps_this_iter
        self.episodes_total += len(self._returns_this_iter)
        self.time_total_s += took
        # RLlib's episodes for the statistics (Algorithm._compile_iteration_results): all of this
        # iteration's when there are metrics_num_episodes_for_smoothing or more, else that many of the
        # latest, topped up from earlier iterations. Not always the last 100: with many short episodes
        # an iteration's mean counts each of them (curriculum_learning's env_task_fn reads it).
        whole = len(self._returns_this_iter) >= self.config.metrics_num_episodes_for_smoothing
        recent_returns = self._returns_this_iter if whole else list(self._recent_returns)
        recent_lengths = self._lengths_this_iter if whole else list(self._recent_lengths)
        returns = np.asarray(recent_returns) if recent_returns else np.array([math.nan])
        result = {
            "training_iteration": self.iteration,
            "seed": self.config.seed,
            "timesteps_total": self.timesteps_total,
            "timesteps_this_iter": self._steps_this_iter,
            "episodes_total": self.episodes_total,
            "episodes_this_iter": len(self._returns_this_iter),
            "episode_reward_mean": float(returns.mean()),
            "episode_reward_min": float(returns.min()),
            "episode_reward_max": float(returns.max()),
            "episode_len_mean": float(np.mean(recent_lengths)) if recent_lengths else math.nan,
            "episode_returns_this_iter": self._returns_this_iter,
            "episode_lengths_this_iter": self._lengths_this_iter,
            "time_this_iter_s": took,
            "time_total_s": self.time_total_s,
            "sample_time_s": self._sample_time,
            "learn_time_s": took - self._sample_time - eval_time,
            "env_steps_per_s": self._steps_this_iter / (took - eval_time) if took > eval_time else math.nan,
            "num_workers": self.workers.plan.num_workers,
            "num_worker_restarts": self.workers.num_restarts,
            "num_env_errors": self.num_env_errors,
            "num_skipped_updates": self.num_skipped_updates,
            **self._episode_metrics.result(recent_returns, recent_lengths),
            **stats,
        }
        if self._learner_metrics.dicts:
            result["learner_custom_metrics"] = self._learner_metrics.pop()
        if evaluation is not None:
            result["evaluation"] = {k: v for k, v in evaluation.items() if k != "evaluation"}
        result.update(training_views(result, stats))
        return result

    def log_result(self, result: dict[str, Any]) -> None:
        """RLlib's ``logger_config`` with a ``type``: its logger gets the result (``on_result``)."""
        if self._result_logger is None and (self.config.logger_config or {}).get("type") is not None:
            self._result_logger = result_logger(self.config.logger_config or {}, self.results_dir)
        if self._result_logger is not None:
            self._result_logger.on_result(result)


def result_logger(logger_config: dict[str, Any], results_dir: Path) -> Any:
    """The logger RLlib 2.9's ``Algorithm`` builds from ``logger_config``: ``type`` (a class, or a
    dotted path such as ``"ray.tune.logger.JsonLogger"``) called with the rest of the dict and
    ``logdir=`` its ``logdir`` or, by default, the run's results directory."""
    config = dict(logger_config)
    kind, logdir = config.pop("type"), config.pop("logdir", str(results_dir))
    if isinstance(kind, str):
        module, _, name = kind.rpartition(".")
        try:
            kind = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            raise ConfigError(f"logger_config type {kind!r} is not a class volley can import: give the "
                              "class itself or its dotted path, e.g. 'ray.tune.logger.JsonLogger'") from None
    Path(logdir).mkdir(parents=True, exist_ok=True)  # as RLlib's default (a new temporary directory)
    return kind(config, logdir=logdir)
