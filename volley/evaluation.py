"""RLlib's evaluation and curriculum keys that call the user's code: ``custom_evaluation_function``,
``render_env`` and ``env_task_fn``; and RLlib's ``collect_episodes`` and ``summarize_episodes``,
which such a function calls.

:meth:`volley.algorithm.Algorithm.evaluate` plays volley's evaluation episodes; with
``custom_evaluation_function`` set it calls ``fn(algorithm, eval_workers)`` instead, RLlib's
signature, and the metrics it returns are the evaluation's (``result["evaluation"]``). With
``render_env`` (RLlib's key, which rendered to a window) the episodes are played on the driver's
environment and recorded as a video in the run directory, as ``volley evaluate --video`` does.
``env_task_fn(train_result, env, env_context)`` is RLlib's curriculum: after every iteration each
training environment that has ``set_task`` (a :class:`volley.envs.TaskSettableEnv`) gets the
task it returns.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from volley.callbacks import EpisodeRecord, result_of
from volley.errors import ConfigError, shown
from volley.named import find_function
from volley.video import FrameRecorder, write_video

if TYPE_CHECKING:
    from volley.algorithm import Algorithm


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

    def __init__(self, algorithm: Algorithm) -> None:
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


def custom_evaluation(algorithm: Algorithm) -> dict[str, Any]:
    """The metrics ``config.custom_evaluation_function(algorithm, eval_workers)`` returns, with the
    seconds it took as ``time_s`` where it gave none; a ConfigError unless they are a dict."""
    fn = find_function("custom_evaluation_function", algorithm.config.custom_evaluation_function or "")
    start = time.perf_counter()
    metrics = fn(algorithm, EvaluationWorkers(algorithm))
    if not isinstance(metrics, dict):
        raise ConfigError(f"custom_evaluation_function {getattr(fn, '__name__', fn)} returned {shown(metrics)}: "
                          "it must return a dict of metrics (RLlib puts them under result['evaluation'])")
    return {"time_s": time.perf_counter() - start, **metrics}


def recorded_evaluation(algorithm: Algorithm, num_episodes: int | None) -> dict[str, Any]:
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


def set_env_tasks(algorithm: Algorithm, result: dict[str, Any]) -> None:
    """RLlib's ``env_task_fn`` after an iteration: on every training worker, each environment's task
    becomes ``env_task_fn(result, env, env_context)`` where it differs from ``env.get_task()``."""
    name = algorithm.config.env_task_fn
    if name is None:
        return
    task_fn = find_function("env_task_fn", name)
    algorithm.workers.call("foreach_env_with_context", functools.partial(_new_task, task_fn, result))


def _new_task(task_fn: Callable[..., Any], result: dict[str, Any], env: Any, env_context: Any) -> None:
    if not callable(getattr(env, "set_task", None)):
        raise ConfigError(f"env_task_fn is set but the environment {type(env).__name__} has no set_task(): "
                          "make it a TaskSettableEnv (from volley import TaskSettableEnv)")
    task = task_fn(result, env, env_context)
    if env.get_task() != task:
        env.set_task(task)
