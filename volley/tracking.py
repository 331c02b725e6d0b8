"""Weights & Biases: a run's config once, every result row, evaluation returns and videos.

As with SB3's ``WandbCallback``, the user starts the W&B run and the callbacks log into it::

    import wandb
    from volley import PPOConfig
    from volley.tracking import WandbCallbacks

    wandb.init(project="cartpole")
    algo = PPOConfig().environment("CartPole-v1").callbacks(WandbCallbacks).build()
    for _ in range(20):
        algo.train()
    wandb.finish()

``volley train --wandb`` does both, as CleanRL's ``--track`` does; ``volley tune --wandb``
hands Tune's own ``WandbLoggerCallback`` to the sweep (one W&B run per trial); ``volley
evaluate --wandb`` logs the returns and the ``--video``. ``wandb`` is an optional extra
(``pip install 'volley-rl[wandb]'``); W&B's own variables (``WANDB_MODE=offline``,
``WANDB_DIR``, ``WANDB_ENTITY``, ...) apply as everywhere.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from volley.callbacks import DefaultCallbacks, callbacks_name, classes_named
from volley.errors import ConfigError
from volley.logging import scalars

DEFAULT_PROJECT = "volley"  # CleanRL's default is its own name too ("cleanRL")


def import_wandb() -> ModuleType:
    """The ``wandb`` module, or a ConfigError saying how to install it."""
    try:
        import wandb
    except ImportError:
        raise ConfigError("--wandb needs Weights & Biases: pip install 'volley-rl[wandb]'") from None
    return wandb


class WandbCallbacks(DefaultCallbacks):
    """Logs into the active W&B run (``wandb.run``): the algorithm's config once, when it is built,
    then each result ``train()`` returns, the numbers the console table and ``progress.jsonl``
    show (evaluation returns as ``evaluation/episode_reward_mean``), against ``timesteps_total``.

    With no active run it logs nothing and warns once: a checkpoint's config names this class,
    and playing or resuming it elsewhere must not open a W&B run of its own.
    """

    def __init__(self) -> None:
        self.warned = False

    def _run(self) -> Any:
        import wandb

        if wandb.run is None and not self.warned:
            self.warned = True
            warnings.warn("WandbCallbacks: no active W&B run (call wandb.init() before building the "
                          "algorithm); nothing is logged", RuntimeWarning, stacklevel=3)
        return wandb.run

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        run = self._run()
        if run is not None:
            run.config.update({"algorithm": type(algorithm).__name__, **algorithm.config.to_dict()},
                              allow_val_change=True)
            run.define_metric("*", step_metric="timesteps_total")

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        run = self._run()
        if run is not None:
            run.log(scalars(result))


_NAME = str(callbacks_name(WandbCallbacks))


def tracked_callbacks(named: str | list[str] | None, wandb: bool) -> dict[str, Any]:
    """The ``callbacks_class`` override that adds :class:`WandbCallbacks` to a config's callbacks
    (``wandb``) or takes it out (a tracked run resumed or played without ``--wandb``); ``{}``
    when the config already has it as asked."""
    names = [] if named is None else [named] if isinstance(named, str) else list(named)
    others = [name for name in names if name.partition("#")[0] != _NAME]
    if (len(others) < len(names)) == wandb:
        return {}
    classes = [*classes_named(others).values(), *([WandbCallbacks] if wandb else [])]
    return {"callbacks_class": classes if len(classes) > 1 else classes[0] if classes else None}


@contextmanager
def wandb_run(project: str | None, job_type: str, config: dict[str, Any] | None = None) -> Iterator[Any]:
    """A W&B run for one command (CleanRL's ``--track``), finished when the command ends."""
    run = import_wandb().init(project=project or DEFAULT_PROJECT, job_type=job_type, config=config)
    try:
        yield run
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()


def tune_callback(project: str | None) -> Any:
    """Tune's own ``WandbLoggerCallback``: each trial a W&B run, in the sweep's group."""
    import_wandb()
    from ray.air.integrations.wandb import WandbLoggerCallback

    return WandbLoggerCallback(project=project or DEFAULT_PROJECT)


def log_evaluation(run: Any, stats: dict[str, Any], timesteps_total: int, video: Path | None) -> None:
    """``volley evaluate``'s returns (as ``evaluation/...``, the keys a training run logs) and its
    video, as CleanRL's ``--capture_video`` uploads the episodes it records."""
    row: dict[str, Any] = dict(scalars({"evaluation": stats}))
    if video is not None:
        row["evaluation/video"] = import_wandb().Video(str(video))
    run.log({"timesteps_total": timesteps_total, **row})
