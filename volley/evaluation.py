"""RLlib's evaluation and curriculum keys that call the user's code: ``custom_evaluation_function``,
``render_env`` and ``env_task_fn``.

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
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from volley.errors import ConfigError, shown
from volley.named import find_function
from volley.rollout.worker import RolloutWorker
from volley.video import FrameRecorder, write_video

if TYPE_CHECKING:
    from volley.algorithm import Algorithm


class EvaluationWorkers:
    """What ``custom_evaluation_function`` gets as ``eval_workers``: RLlib's ``WorkerSet`` calls on
    volley's evaluation. :meth:`evaluate` plays volley's evaluation episodes and returns their
    metrics; :meth:`foreach_worker` calls a function on the driver's evaluation worker (a
    :class:`~volley.rollout.worker.RolloutWorker`: ``worker_index``, ``env``, ``foreach_env``)."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm

    def local_worker(self) -> RolloutWorker:
        return self.algorithm.driver_worker()

    def num_remote_workers(self) -> int:
        return 0

    def foreach_worker(self, func: Callable[[RolloutWorker], Any], local_worker: bool = True,
                       healthy_only: bool = True) -> list[Any]:
        """``[func(worker)]`` for the driver's evaluation worker (``[]`` without ``local_worker``:
        the evaluation has no remote workers here)."""
        return [func(self.local_worker())] if local_worker else []

    def evaluate(self, num_episodes: int | None = None) -> dict[str, Any]:
        """volley's own evaluation (``evaluation_duration`` episodes by default): its flat metrics."""
        played = self.algorithm.play_evaluation(num_episodes)
        return {key: value for key, value in played.items() if key not in ("evaluation", "env_runners")}


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
