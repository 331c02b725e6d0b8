"""A training run: iterate until a stop criterion, logging results and keeping checkpoints.

This is what ``volley train`` does, usable from Python too::

    algo = PPOConfig().environment("CartPole-v1").build()
    outcome = train_until(algo, Stop(reward=475), run_dir=Path("runs/cartpole"))

Checkpoints go to ``RUN_DIR/checkpoint_NNNNNN``; ``RUN_DIR/checkpoint`` is a link to
the newest, replaced atomically, so it always names a complete checkpoint, and
pruning old checkpoints never touches the one it names. SIGINT and SIGTERM stop the
current iteration and write a final checkpoint. A run killed outright (``kill -9``)
continues with :func:`latest_checkpoint` and :func:`rewind` (``volley train --resume``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from volley.algorithm import Algorithm
from volley.checkpoint import fsync, remove_checkpoint, remove_leftovers
from volley.engines.mpi_engine import install_rank_hooks
from volley.errors import CallbackError, CheckpointError, EnvError, WorkerError
from volley.logging import PROGRESS, ResultLogger

LATEST = "checkpoint"
PARAMS = "params.json"
_NUMBERED = re.compile(r"checkpoint_(\d{6,})")
_LINK_TMP = f".{LATEST}.link-tmp"


@dataclass
class Stop:
    """Stop criteria; the first one met ends the run (None: not a criterion)."""

    reward: float | None = None
    iterations: int | None = None
    timesteps: int | None = None
    time_s: float | None = None  # training seconds (time_total_s: a resumed run's earlier ones count)

    def reason(self, result: dict[str, Any]) -> str | None:
        """Why ``result`` ends the run, or None to go on."""
        mean = result["episode_reward_mean"]
        if self.reward is not None and mean == mean and mean >= self.reward:
            return f"episode_reward_mean {mean:.1f} >= {self.reward:g}"
        if self.iterations is not None and result["training_iteration"] >= self.iterations:
            return f"reached {self.iterations} iterations"
        if self.timesteps is not None and result["timesteps_total"] >= self.timesteps:
            return f"reached {self.timesteps} timesteps"
        if self.time_s is not None and result["time_total_s"] >= self.time_s:
            return f"trained for {self.time_s:g} s"
        return None

    def fraction(self, result: dict[str, Any]) -> float | None:
        """How far ``result`` is towards the nearest iteration, timestep or time limit (None: no
        such limit; a reward target says nothing about the time left)."""
        parts = [result[key] / limit for key, limit in (("training_iteration", self.iterations),
                                                        ("timesteps_total", self.timesteps),
                                                        ("time_total_s", self.time_s))
                 if limit is not None]
        return max(parts) if parts else None

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.reward, self.iterations, self.timesteps, self.time_s))


@dataclass
class Outcome:
    """How a run ended; ``signal`` is the number of the signal that stopped it, or 0."""

    result: dict[str, Any]
    reason: str
    checkpoint: str
    wall_time_s: float
    signal: int = 0


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a run was training."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _interrupt_on_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` in the main thread.

    Ray's ``init`` makes SIGTERM call ``sys.exit``, which would skip the final
    checkpoint; a supervisor's SIGTERM (Kubernetes, Slurm, systemd) deserves the
    same clean stop as Ctrl-C.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_dir_name(algo: Algorithm) -> str:
    """``PPO_CartPole-v1_20260101-120000``: algorithm, environment, start time."""
    env = re.sub(r"[^A-Za-z0-9_.-]", "-", algo.config.env)
    return f"{type(algo).__name__}_{env}_{time.strftime('%Y%m%d-%H%M%S')}"


def numbered_checkpoints(run_dir: Path) -> dict[int, Path]:
    """The run's ``checkpoint_NNNNNN`` directories by iteration, oldest first."""
    found = {}
    for path in run_dir.iterdir():
        match = _NUMBERED.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink():
            found[int(match[1])] = path
    return dict(sorted(found.items()))


def save_run_checkpoint(algo: Algorithm, run_dir: Path, keep: int = 5) -> str:
    """Save ``checkpoint_NNNNNN``, point ``checkpoint`` at it, keep the newest ``keep``.

    Each step leaves the run loadable if the process dies right after it: the new
    checkpoint is complete before the link moves (one atomic rename), and pruning
    only starts once the link names the new one.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    name = f"checkpoint_{algo.iteration:06d}"
    algo.save(run_dir / name)
    link_tmp = run_dir / _LINK_TMP
    if link_tmp.is_symlink():
        link_tmp.unlink()
    os.symlink(name, link_tmp)
    os.replace(link_tmp, run_dir / LATEST)
    fsync(run_dir)
    older = [path for path in numbered_checkpoints(run_dir).values() if path.name != name]
    for old in older[:max(len(older) - (keep - 1), 0)]:
        remove_checkpoint(old)
    return str(run_dir / LATEST)


def latest_checkpoint(run_dir: Path) -> Path:
    """The checkpoint a run continues from: the ``checkpoint`` link's target, or the newest
    ``checkpoint_NNNNNN`` if the run died before making the link."""
    if not run_dir.is_dir():
        raise CheckpointError(f"no run directory at '{run_dir}'")
    link = run_dir / LATEST
    if link.is_symlink():
        return run_dir / os.readlink(link)
    numbered = numbered_checkpoints(run_dir)
    if not numbered:
        raise CheckpointError(f"no checkpoint in run directory '{run_dir}' to resume from")
    return numbered[max(numbered)]


def rewind(run_dir: Path, iteration: int) -> None:
    """Make ``run_dir`` continue from ``iteration``: delete what a killed process left half
    done, checkpoints newer than ``iteration`` and ``progress.jsonl`` rows after it (the
    iterations that are trained again), so the log reads as one run."""
    remove_leftovers(run_dir)
    (run_dir / _LINK_TMP).unlink(missing_ok=True)
    for number, path in numbered_checkpoints(run_dir).items():
        if number > iteration:
            remove_checkpoint(path)
    progress = run_dir / PROGRESS
    if progress.exists():
        kept = [line for line in progress.read_text().splitlines(keepends=True)
                if 0 < _iteration_of(line) <= iteration]
        _write_atomically(progress, "".join(kept))


def _iteration_of(line: str) -> int:
    """The ``training_iteration`` of a progress row, or 0 for a row cut short by a crash."""
    try:
        return int(json.loads(line)["training_iteration"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return 0


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run_settings(run_dir: Path) -> dict[str, Any]:
    """The stop criteria and checkpoint settings a run was started with (from ``params.json``)."""
    path = run_dir / PARAMS
    try:
        return dict(json.loads(path.read_text())["run"])
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"'{path}' is corrupt: {exc}") from None


def train_until(algo: Algorithm, stop: Stop, run_dir: Path | None = None,
                checkpoint_freq: int = 10, keep_checkpoints: int = 5, tensorboard: bool = True,
                out: TextIO | None = None) -> Outcome:
    """Train until ``stop``, SIGINT or SIGTERM, then write a final checkpoint if ``run_dir`` is set.

    A signal stops the iteration in progress: the final checkpoint holds the counters of
    the last completed iteration (an interrupted update may have taken some of its steps).
    A lost worker, a broken environment or a callbacks hook that raised (``WorkerError``,
    ``EnvError``, ``CallbackError``) also gets a final checkpoint before it is raised: the
    learner is sound. (A ``TrainingError`` does not: the learner's own updates failed.)

    Under MPI this is the run's entry point on every rank: ranks other than 0 serve rank 0
    (:meth:`Algorithm.serve_forever`) and return when it stops.
    """
    start = time.perf_counter()
    out = out or sys.stdout  # looked up now: a caller (or a test) may have replaced sys.stdout
    if algo.config.engine == "mpi":
        install_rank_hooks()
    if not algo.is_driver:
        algo.serve_forever()
        return Outcome({}, "served rank 0", "", time.perf_counter() - start)
    logger = ResultLogger(run_dir, tensorboard=tensorboard, out=out, fraction=stop.fraction)
    if run_dir is not None:
        algo.results_dir = run_dir  # render_env's videos
        settings = {"stop": asdict(stop), "checkpoint_freq": checkpoint_freq,
                    "keep_checkpoints": keep_checkpoints}
        if algo.config.engine == "mpi":  # `volley train --resume` starts as many ranks again
            settings["nprocs"] = algo.workers.plan.num_workers
        _write_atomically(run_dir / PARAMS, json.dumps(
            {"algorithm": type(algo).__name__, "config": algo.config.to_dict(), "run": settings}, indent=1))
    result: dict[str, Any] = {}
    reason, signum = "interrupted", 0
    try:
        with _interrupt_on_signals():
            while True:
                result = algo.train()
                logger.log(result)
                if run_dir is not None and checkpoint_freq and algo.iteration % checkpoint_freq == 0:
                    save_run_checkpoint(algo, run_dir, keep_checkpoints)
                stopped = stop.reason(result)
                if stopped is not None:
                    reason = stopped
                    break
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        reason = f"interrupted by {signal.Signals(signum).name}"
        print(f"volley: {reason}: saving a final checkpoint", file=out, flush=True)
    except (WorkerError, EnvError, CallbackError) as exc:
        if run_dir is not None:
            print(f"volley: stopping on a {type(exc).__name__}: saving a final checkpoint", file=out, flush=True)
            save_run_checkpoint(algo, run_dir, keep_checkpoints)
        raise
    finally:
        logger.close()
    checkpoint = save_run_checkpoint(algo, run_dir, keep_checkpoints) if run_dir is not None else ""
    return Outcome(result, reason, checkpoint, time.perf_counter() - start, signum)
