"""A training run: iterate until a stop criterion, logging results and keeping checkpoints.

This is what ``volley train`` does, usable from Python too::

    algo = PPOConfig().environment("CartPole-v1").build()
    outcome = train_until(algo, Stop(reward=475), run_dir=Path("runs/cartpole"))

Checkpoints go to ``RUN_DIR/checkpoint_NNNNNN``; ``RUN_DIR/checkpoint`` is a link to
the newest, replaced atomically, so it always names a complete checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from volley.algorithm import Algorithm
from volley.logging import ResultLogger

LATEST = "checkpoint"


@dataclass
class Stop:
    """Stop criteria; the first one met ends the run (None: not a criterion)."""

    reward: float | None = None
    iterations: int | None = None
    timesteps: int | None = None

    def reason(self, result: dict[str, Any]) -> str | None:
        """Why ``result`` ends the run, or None to go on."""
        mean = result["episode_reward_mean"]
        if self.reward is not None and mean == mean and mean >= self.reward:
            return f"episode_reward_mean {mean:.1f} >= {self.reward:g}"
        if self.iterations is not None and result["training_iteration"] >= self.iterations:
            return f"reached {self.iterations} iterations"
        if self.timesteps is not None and result["timesteps_total"] >= self.timesteps:
            return f"reached {self.timesteps} timesteps"
        return None

    def fraction(self, result: dict[str, Any]) -> float | None:
        """How far ``result`` is towards the nearest iteration or timestep limit (None: no
        such limit; a reward target says nothing about the time left)."""
        parts = [result[key] / limit for key, limit in (("training_iteration", self.iterations),
                                                        ("timesteps_total", self.timesteps))
                 if limit is not None]
        return max(parts) if parts else None

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.reward, self.iterations, self.timesteps))


@dataclass
class Outcome:
    """How a run ended."""

    result: dict[str, Any]
    reason: str
    checkpoint: str
    wall_time_s: float


def run_dir_name(algo: Algorithm) -> str:
    """``PPO_CartPole-v1_20260101-120000``: algorithm, environment, start time."""
    env = re.sub(r"[^A-Za-z0-9_.-]", "-", algo.config.env)
    return f"{type(algo).__name__}_{env}_{time.strftime('%Y%m%d-%H%M%S')}"


def save_run_checkpoint(algo: Algorithm, run_dir: Path, keep: int = 5) -> str:
    """Save ``checkpoint_NNNNNN``, point ``checkpoint`` at it, keep the newest ``keep``."""
    name = f"checkpoint_{algo.iteration:06d}"
    algo.save(run_dir / name)
    link_tmp = run_dir / f".{LATEST}.link-tmp"
    if link_tmp.is_symlink():
        link_tmp.unlink()
    os.symlink(name, link_tmp)
    os.replace(link_tmp, run_dir / LATEST)
    numbered = sorted(p for p in run_dir.glob("checkpoint_*") if p.is_dir())
    for old in numbered[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return str(run_dir / LATEST)


def train_until(algo: Algorithm, stop: Stop, run_dir: Path | None = None,
                checkpoint_freq: int = 10, tensorboard: bool = True,
                out: TextIO = sys.stdout) -> Outcome:
    """Train until ``stop`` (or Ctrl-C), then write a final checkpoint if ``run_dir`` is set."""
    start = time.perf_counter()
    logger = ResultLogger(run_dir, tensorboard=tensorboard, out=out, fraction=stop.fraction)
    if run_dir is not None:
        (run_dir / "params.json").write_text(json.dumps(
            {"algorithm": type(algo).__name__, "config": algo.config.to_dict()}, indent=1))
    result: dict[str, Any] = {}
    reason = "interrupted"
    try:
        while True:
            result = algo.train()
            logger.log(result)
            if run_dir is not None and checkpoint_freq and algo.iteration % checkpoint_freq == 0:
                save_run_checkpoint(algo, run_dir)
            stopped = stop.reason(result)
            if stopped is not None:
                reason = stopped
                break
    except KeyboardInterrupt:
        print("interrupted: saving a final checkpoint", file=out)
    finally:
        logger.close()
    checkpoint = save_run_checkpoint(algo, run_dir) if run_dir is not None else ""
    return Outcome(result, reason, checkpoint, time.perf_counter() - start)
