"""Result logging: a console table row per iteration, ``progress.jsonl`` and TensorBoard events.

All three record the flat result keys. The nested views ``train()`` adds for RLlib's
spellings (``env_runners``, ``learners``, ...) hold the same numbers again, so they are
left out: a progress file or an event file has each number once.

On a terminal, a progress bar with the time left sits under the table when the run
has a stop criterion to measure against; logs and CI get the plain rows only.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from volley.rllib_results import without_views

PROGRESS = "progress.jsonl"

Column = tuple[str, str, int, str]  # (header, result key, width, format)
# every run's columns
COLUMNS: list[Column] = [
    ("iter", "training_iteration", 5, "d"),
    ("steps", "timesteps_total", 9, "d"),
    ("reward", "episode_reward_mean", 8, ".1f"),
    ("min", "episode_reward_min", 7, ".1f"),
    ("max", "episode_reward_max", 7, ".1f"),
    ("len", "episode_len_mean", 6, ".0f"),
    ("fps", "env_steps_per_s", 7, ".0f"),
    ("sample_s", "sample_time_s", 8, ".2f"),
    ("learn_s", "learn_time_s", 7, ".2f"),
]
# each shown once a result holds its key, so each algorithm shows its own: PPO, TRPO, PG and
# IMPALA/APPO their policy and value losses (IMPALA/APPO and Ape-X the lag of the acting
# weights), DQN its TD loss, SAC its actor, critic and temperature; eval once a run evaluates
OPTIONAL_COLUMNS: list[Column] = [
    ("pi_loss", "policy_loss", 8, ".3f"),
    ("vf_loss", "vf_loss", 8, ".3f"),
    ("actor", "actor_loss", 8, ".3f"),
    ("critic", "critic_loss", 8, ".3f"),
    ("loss", "loss", 8, ".4f"),
    ("alpha", "alpha", 7, ".4f"),
    ("a_loss", "alpha_loss", 7, ".3f"),
    ("entropy", "entropy", 7, ".3f"),
    ("kl", "kl", 7, ".4f"),
    ("q_mean", "q_mean", 7, ".2f"),
    ("epsilon", "epsilon", 7, ".3f"),
    ("lag", "policy_lag_mean", 5, ".1f"),
    ("lag", "weight_version_lag", 5, ".1f"),
    ("eval", "evaluation/episode_reward_mean", 8, ".1f"),
]


def flat_items(result: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(key, value)`` pairs of a result whose nested dicts (``evaluation``) become
    ``evaluation/episode_reward_mean``, as TensorBoard and the console columns name them."""
    items: list[tuple[str, Any]] = []
    for key, value in result.items():
        if isinstance(value, dict):
            items += flat_items(value, f"{prefix}{key}/")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def scalars(result: dict[str, Any]) -> dict[str, numbers.Real]:
    """The finite numbers of a result under their flat keys, without RLlib's views: what
    TensorBoard and Weights & Biases plot."""
    return {key: value for key, value in flat_items(without_views(result))
            if isinstance(value, numbers.Real) and math.isfinite(value)}


def _cell(value: Any, width: int, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-".rjust(width)
    return format(value, fmt).rjust(width)


def _json_safe(value: Any) -> Any:
    """NaN and inf are not JSON; write them as null (inside nested results and lists too). numpy
    numbers (a callback's ``on_train_result`` may add some) become Python's."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return _json_safe(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _histogram(values: Any) -> np.ndarray | None:
    """``hist_stats`` values as one float array for a TensorBoard histogram (None: empty, or not numbers)."""
    try:
        array = np.asarray(values, np.float64).ravel()
    except (TypeError, ValueError):
        return None
    array = array[np.isfinite(array)]
    return array if array.size else None


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """One line redrawn in place: the fraction done, elapsed time and ETA.

    A run draws the fraction its stop criterion gives each result (:meth:`draw`); ``volley bench``
    counts units of work out of a known ``total`` (:meth:`advance`). Only a terminal gets one
    (:meth:`on_terminal`): logs and CI keep their plain lines.
    """

    WIDTH = 30

    def __init__(self, out: TextIO, total: float = 1.0) -> None:
        self.out = out
        self.total = total
        self.done = 0.0
        self.start = time.monotonic()
        self.shown = False

    @classmethod
    def on_terminal(cls, out: TextIO | None, total: float = 1.0) -> ProgressBar | None:
        """A bar on ``out`` if it is a terminal, else None."""
        return cls(out, total) if out is not None and out.isatty() else None

    def line(self, done: float, elapsed: float) -> str:
        done = min(max(done, 0.0), 1.0)
        filled = round(done * self.WIDTH)
        eta = _duration(elapsed * (1 - done) / done) if done > 0 else "?"
        return (f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done:4.0%}  "
                f"{_duration(elapsed)} elapsed, ETA {eta}")

    def draw(self, done: float | None) -> None:
        """Redraw at fraction ``done`` (None: unknown, nothing drawn)."""
        if done is None:
            return
        self.clear()
        self.out.write(self.line(done, time.monotonic() - self.start))
        self.out.flush()
        self.shown = True

    def advance(self, units: float = 1.0) -> None:
        """``units`` more of ``total`` are done."""
        self.done += units
        self.draw(self.done / self.total)

    def clear(self) -> None:
        if self.shown:
            self.out.write("\r\033[K")
            self.out.flush()
            self.shown = False


class ResultLogger:
    """Writes each result dict to the console, ``progress.jsonl`` and (optionally) TensorBoard.

    ``out=None`` writes no console rows (Tune trials, whose driver prints its own table);
    ``fraction`` adds a progress bar when ``out`` is a terminal.
    """

    def __init__(self, run_dir: Path | None, tensorboard: bool = True, out: TextIO | None = sys.stdout,
                 header_every: int = 25,
                 fraction: Callable[[dict[str, Any]], float | None] | None = None) -> None:
        self.out = out
        self.header_every = header_every
        self.fraction = fraction
        self.bar = ProgressBar.on_terminal(out) if fraction is not None else None
        self.rows = 0
        self.columns = list(COLUMNS)
        self.progress: TextIO | None = None
        self.writer: Any = None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            self.progress = open(run_dir / PROGRESS, "a")  # noqa: SIM115 (closed in close())
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter
                self.writer = SummaryWriter(str(run_dir))

    def header(self) -> str:
        return " ".join(name.rjust(width) for name, _, width, _ in self.columns)

    def row(self, result: dict[str, Any]) -> str:
        flat = dict(flat_items(result))
        return " ".join(_cell(flat.get(key), width, fmt) for _, key, width, fmt in self.columns)

    def _grow(self, result: dict[str, Any]) -> bool:
        """Add the optional columns ``result`` can fill; True if any was added."""
        keys = dict(flat_items(result))
        shown = {key for _, key, _, _ in self.columns}
        columns = [*COLUMNS, *(c for c in OPTIONAL_COLUMNS if c[1] in shown or c[1] in keys)]
        grew = len(columns) > len(self.columns)
        self.columns = columns
        return grew

    def log(self, result: dict[str, Any]) -> None:
        result = without_views(result)
        if self.out is not None:
            if self.bar is not None:
                self.bar.clear()
            if self._grow(result) or self.rows % self.header_every == 0:  # a new column: a new header
                print(self.header(), file=self.out)
            print(self.row(result), file=self.out, flush=True)
            if self.bar is not None and self.fraction is not None:
                self.bar.draw(self.fraction(result))
        self.rows += 1
        if self.progress is not None:
            self.progress.write(json.dumps(_json_safe(result)) + "\n")
            self.progress.flush()
        if self.writer is not None:
            step = result["timesteps_total"]
            for key, value in scalars(result).items():
                self.writer.add_scalar(f"volley/{key}", value, step)
            for key, value in flat_items(result):
                if key.startswith(("hist_stats/", "evaluation/hist_stats/")):
                    histogram = _histogram(value)
                    if histogram is not None:
                        self.writer.add_histogram(f"volley/{key}", histogram, step)
            self.writer.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.clear()
        if self.progress is not None:
            self.progress.close()
        if self.writer is not None:
            self.writer.close()
