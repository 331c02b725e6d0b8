"""Evaluation on the learner's side: :meth:`Evaluation.evaluate` plays whole episodes with the
evaluation settings on the evaluation workers or the driver's own worker; and RLlib's evaluation
and curriculum keys that call the user's code: ``custom_evaluation_function``, ``render_env`` and
``env_task_fn``; and RLlib's ``collect_episodes`` and ``summarize_episodes``, which such a function
calls.

With ``custom_evaluation_function`` set, :meth:`Evaluation.evaluate` calls ``fn(algorithm,
eval_workers)`` instead, RLlib's signature, and the metrics it returns are the evaluation's
(``result["evaluation"]``). With ``render_env`` (RLlib's key, which rendered to a window) the
episodes are played on the driver's environment and recorded as a video in the run directory, as
``volley evaluate --video`` does. ``env_task_fn(train_result, env, env_context)`` is RLlib's
curriculum: after every iteration each training environment that has ``set_task`` (a
:class:`volley.envs.TaskSettableEnv`) gets the task it returns.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from volley.custom_metrics import result_of
from volley.envs import SingleEnv
from volley.episode import EpisodeRecord
from volley.errors import ConfigError, shown
from volley.learner.sampling import Sampling
from volley.named import find_function
from volley.rllib_results import evaluation_views
from volley.video import FrameRecorder, write_video


@dataclass
class RolloutMetrics:
    """One evaluation episode, as RLlib's ``collect_episodes`` returns it."""

    episode_length: int
    episode_reward: float
    custom_metrics: dict[str, Any] = field(default_factory=dict)
    hist_data: dict[str, list[Any]] = field(default_factory=dict)


def summarize_episodes(episodes: list[RolloutMetrics], new_episodes: list[RolloutMetrics] | None = None,
                       keep_custom_metrics: bool = False) -> dict[str, Any]:
    """RLlib's summary of episodes: ``episode_reward_mean`` (``_min``, ``_max``; NaN for none),
    ``episode_len_mean``, ``episodes_this_iter``, ``timesteps_this_iter``, the custom metrics and
    ``hist_stats`` (what volley's own evaluation returns too)."""
    returns = np.array([e.episode_reward for e in episodes], np.float64)
    lengths = np.array([e.episode_length for e in episodes], np.int64)
    records = [(e.custom_metrics, e.hist_data) for e in episodes]
    some = len(episodes) > 0
    return {"episode_reward_mean": float(returns.mean()) if some else math.nan,
            "episode_reward_std": float(returns.std()) if some else math.nan,
            "episode_reward_min": float(returns.min()) if some else math.nan,
            "episode_reward_max": float(returns.max()) if some else math.nan,
            "episode_len_mean": float(lengths.mean()) if some else math.nan,
            "episodes_this_iter": len(episodes), "timesteps_this_iter": int(lengths.sum()),
            **result_of(records, returns, lengths, keep_custom_metrics)}


def episodes_of(results: list[tuple[np.ndarray, np.ndarray, list[EpisodeRecord]]]) -> list[RolloutMetrics]:
    """The episodes of workers' ``evaluate()`` results (returns, lengths, custom-metric records)."""
    return [RolloutMetrics(int(length), float(ret), *record)
            for returns, lengths, records in results
            for ret, length, record in zip(returns, lengths, records or [({}, {})] * len(returns), strict=True)]


class EvaluationWorker:
    """RLlib's evaluation worker, as ``custom_evaluation_function`` sees it: the driver's evaluation
    worker (``worker_index``, ``env``, ``foreach_env``, ``foreach_env_with_context``), whose
    :meth:`sample` plays one episode with the evaluation settings and keeps it for
    :func:`collect_episodes`."""

    def __init__(self, workers: EvaluationWorkers) -> None:
        self._workers = workers
        self.worker = workers.algorithm.driver_worker()
        self.worker_index = self.worker.worker_index
        self.env = self.worker.env

    def foreach_env(self, func: Callable[[Any], Any]) -> list[Any]:
        return self.worker.foreach_env(func)

    def foreach_env_with_context(self, func: Callable[[Any, Any], Any]) -> list[Any]:
        return self.worker.foreach_env_with_context(func)

    def sample(self) -> list[RolloutMetrics]:
        """One evaluation episode with the current weights, kept for :func:`collect_episodes`."""
        algorithm = self._workers.algorithm
        played = episodes_of([self.worker.evaluate(algorithm.policy.get_flat_weights(), algorithm.filter_stats, 1)])
        self._workers.episodes.extend(played)
        return played


class EvaluationWorkers:
    """What ``custom_evaluation_function`` gets as ``eval_workers``: RLlib's ``WorkerSet`` calls on
    volley's evaluation. Its one worker is the driver's evaluation worker (an
    :class:`EvaluationWorker`), which plays the part of RLlib's remote evaluation workers too, so
    :meth:`foreach_worker` calls a function on it whatever ``local_worker`` says;
    :meth:`evaluate` plays volley's own evaluation episodes and returns their metrics."""

    def __init__(self, algorithm: Evaluation) -> None:
        self.algorithm = algorithm
        self.episodes: list[RolloutMetrics] = []  # played by sample(), for collect_episodes
        self._worker: EvaluationWorker | None = None

    def local_worker(self) -> EvaluationWorker:
        if self._worker is None:
            self._worker = EvaluationWorker(self)
        return self._worker

    def num_remote_workers(self) -> int:
        return 0

    def num_healthy_remote_workers(self) -> int:
        return 0

    def foreach_worker(self, func: Callable[[EvaluationWorker], Any], local_worker: bool = True,
                       healthy_only: bool = True) -> list[Any]:
        """``[func(worker)]`` for the driver's evaluation worker."""
        return [func(self.local_worker())]

    def evaluate(self, num_episodes: int | None = None) -> dict[str, Any]:
        """volley's own evaluation (``evaluation_duration`` episodes by default): its flat metrics."""
        played = self.algorithm.play_evaluation(num_episodes)
        return {key: value for key, value in played.items() if key not in ("evaluation", "env_runners")}


def collect_episodes(local_worker: Any = None, remote_workers: Any = None, to_be_collected: Any = None,
                     timeout_seconds: float = 180, workers: EvaluationWorkers | None = None) -> list[RolloutMetrics]:
    """RLlib's call: the episodes the workers' ``sample()`` played since the last collection."""
    group = workers if workers is not None else remote_workers
    if not isinstance(group, EvaluationWorkers):
        raise ConfigError(f"collect_episodes(workers=...) takes the eval_workers of a custom_evaluation_function, "
                          f"got {shown(group)}")
    episodes, group.episodes = group.episodes, []
    return episodes


def custom_evaluation(algorithm: Evaluation) -> dict[str, Any]:
    """The metrics ``config.custom_evaluation_function(algorithm, eval_workers)`` returns, with the
    seconds it took as ``time_s`` where it gave none; a ConfigError unless they are a dict."""
    fn = find_function("custom_evaluation_function", algorithm.config.custom_evaluation_function or "")
    start = time.perf_counter()
    metrics = fn(algorithm, EvaluationWorkers(algorithm))
    if not isinstance(metrics, dict):
        raise ConfigError(f"custom_evaluation_function {getattr(fn, '__name__', fn)} returned {shown(metrics)}: "
                          "it must return a dict of metrics (RLlib puts them under result['evaluation'])")
    return {"time_s": time.perf_counter() - start, **metrics}


def recorded_evaluation(algorithm: Evaluation, num_episodes: int | None) -> dict[str, Any]:
    """volley's evaluation played on the driver's environment and recorded (``render_env``): the
    video goes to ``videos/evaluation_<iteration>.mp4`` (``.gif`` without ffmpeg) in the run directory.
    An environment that cannot render is said in one line on stderr, and evaluation goes on."""
    recorder = FrameRecorder(algorithm.driver_worker(), algorithm.config.env)
    evaluation = algorithm.play_evaluation(num_episodes, before_step=recorder)
    if recorder.failure is not None or not recorder.frames:
        print(f"volley: render_env: environment '{algorithm.config.env}' cannot be recorded "
              f"({recorder.failure or 'no frames'}); no video written", file=sys.stderr)
        return evaluation
    folder = Path(algorithm.results_dir) / "videos"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"evaluation_{algorithm.iteration:06d}{_video_suffix()}"
    write_video(recorder.frames, path, recorder.fps)
    return {**evaluation, "video": str(path)}


def _video_suffix() -> str:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return ".gif"
    return ".mp4"


def set_env_tasks(algorithm: Evaluation, result: dict[str, Any]) -> None:
    """RLlib's ``env_task_fn`` after an iteration: on every training worker, each environment's task
    becomes ``env_task_fn(result, env, env_context)`` where it differs from ``env.get_task()``."""
    name = algorithm.config.env_task_fn
    if name is None:
        return
    task_fn = find_function("env_task_fn", name)
    algorithm.workers.foreach_env_with_context(functools.partial(_new_task, task_fn, result))


def _new_task(task_fn: Callable[..., Any], result: dict[str, Any], env: Any, env_context: Any) -> None:
    if not callable(getattr(env, "set_task", None)):
        raise ConfigError(f"env_task_fn is set but the environment {type(env).__name__} has no set_task(): "
                          "make it a TaskSettableEnv (from volley import TaskSettableEnv)")
    task = task_fn(result, env, env_context)
    if env.get_task() != task:
        env.set_task(task)


class Evaluation(Sampling):
    """``algo.evaluate()`` and ``algo.env``: episodes with the current weights and filters."""

    @property
    def env(self) -> gym.Env:
        """The driver's environment, to step with ``compute_single_action`` (as in RLlib).

        Its observations are the workers' (same wrappers), so they fit the policy.
        """
        self.check_env_on_driver()
        return SingleEnv(self.driver_worker().env)

    def check_env_on_driver(self) -> None:
        """As RLlib's local worker, the driver has an environment (``algo.env``) when it samples itself
        (``num_workers=0``) or is asked to; a ConfigError saying how otherwise."""
        if not self.config.create_env_on_driver and self.workers.plan.num_workers > 0:
            raise ConfigError("algo.env needs create_env_on_driver=True (or num_workers=0), e.g. "
                              "config.rollouts(create_env_on_driver=True)")

    def evaluate(self, num_episodes: int | None = None,
                 before_step: Callable[[], None] | None = None) -> dict[str, Any]:
        """Play whole episodes with the evaluation settings (``evaluation_config``; the most likely
        action unless it sets ``explore``) and the current weights and filters, which it does
        not update. Rewards are the environment's own (never clipped or normalised).

        ``num_episodes`` episodes, else ``evaluation_duration`` episodes or timesteps
        (``evaluation_duration_unit``). They are shared by the ``evaluation_num_workers``
        evaluation workers (each plays its share, rounded up), or played one after another on
        the driver's environment, which is also where a ``before_step`` callback (videos grab
        their frames there) makes them go. These steps never count as training timesteps.

        Returns ``episode_reward_mean`` / ``_std`` / ``_min`` / ``_max``, ``episode_len_mean``,
        ``episodes_this_iter``, ``timesteps_this_iter`` and ``time_s``, and RLlib's views of them:
        the new stack's ``env_runners`` (``episode_return_mean``, ...) and the old stack's
        ``evaluation`` (RLlib's ``algo.evaluate()["evaluation"]["episode_reward_mean"]``).

        RLlib's ``custom_evaluation_function`` replaces these episodes with what it returns, and
        ``render_env`` plays them on the driver's environment and records a video in the run
        directory (the functions of this module).
        """
        self.hooks("on_evaluate_start", algorithm=self)
        if self.config.custom_evaluation_function is not None and num_episodes is None and before_step is None:
            flat = custom_evaluation(self)
            evaluation = {**flat, "evaluation": dict(flat)}
        elif self.config.evaluation_settings().render_env and before_step is None:
            evaluation = recorded_evaluation(self, num_episodes)
        else:
            evaluation = self.play_evaluation(num_episodes, before_step)
        self.hooks("on_evaluate_end", algorithm=self, evaluation_metrics=evaluation)
        return evaluation

    def play_evaluation(self, num_episodes: int | None = None,
                        before_step: Callable[[], None] | None = None) -> dict[str, Any]:
        """volley's evaluation episodes, as :meth:`evaluate` describes them, without its hooks."""
        start = time.perf_counter()
        cfg = self.config
        by_steps = num_episodes is None and cfg.evaluation_duration_unit == "timesteps"
        amount = num_episodes or cfg.evaluation_duration
        weights = self.policy.get_flat_weights()
        if self.eval_workers is None or before_step is not None:
            results = [self.driver_worker().evaluate(weights, self.filter_stats, None if by_steps else amount,
                                                     amount if by_steps else None, before_step)]
        else:
            workers = self.eval_workers.num_workers
            share = -(-amount // workers)
            results = self.eval_workers.call("evaluate", weights, self.filter_stats,
                                             None if by_steps else share, share if by_steps else None)
            if not by_steps:  # exactly `amount` episodes, as RLlib plays (13 on 2 workers: 7 and 6)
                quotas = [amount // workers + (i < amount % workers) for i in range(workers)]
                results = [(r[:q], n[:q], records[:q]) for (r, n, records), q in zip(results, quotas, strict=True)]
        flat = {**summarize_episodes(episodes_of(results), keep_custom_metrics=cfg.keep_per_episode_custom_metrics),
                "time_s": time.perf_counter() - start}
        return {**flat, **evaluation_views(flat)}
