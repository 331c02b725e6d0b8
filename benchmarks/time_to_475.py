"""What the time-to-threshold benchmarks share: the stop rule, fresh processes, the table.

Each run is a fresh Python process, so start-up (imports, Ray's cluster) counts. A run
ends when the mean return of the last 100 episodes reaches 475 (CartPole; the same window
in every library: SB3's ep_info_buffer holds 100 episodes), or the goal a script sets with
:func:`set_goal` (Pendulum SAC: -200 over the last 10 episodes; volley's runs then smooth
over that many with ``metrics_num_episodes_for_smoothing``). Seeds are interleaved, so
drift on a noisy machine hits every library alike; the table gives medians and their
ratios to SB3. With ``--curves DIR`` each run also writes ``DIR/NAME-seedK/progress.jsonl``
(reward against env steps and against seconds since its process started), which
``volley plot DIR/*`` draws side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOAL = {"threshold": 475.0, "window": 100}  # the mean return of the last `window` episodes to reach


def set_goal(threshold: float, window: int) -> None:
    GOAL.update(threshold=threshold, window=window)
STARTED = time.time()  # a child's start: its curve's clock includes imports and Ray's start-up
CURVE: dict[str, Path | None] = {"path": None}  # this child's progress.jsonl, with --curves

Runner = Callable[[int], dict]  # seed -> {"reached_at": time.time(), "steps": ..., "reward": ...}


def log_point(steps: int, mean: float, low: float, high: float) -> None:
    """Append one point of this run's learning curve (with ``--curves``) in volley's format:
    the mean, min and max return of the last 100 episodes after ``steps`` env steps."""
    path = CURVE["path"]
    if path is None or math.isnan(mean):
        return
    point = {"timesteps_total": steps, "time_total_s": time.time() - STARTED,
             "episode_reward_mean": mean, "episode_reward_min": low, "episode_reward_max": high}
    with open(path, "a") as f:
        f.write(json.dumps(point) + "\n")


def train_volley(algo: Any, max_steps: int) -> dict:
    """Train until the threshold (or ``max_steps``); what :func:`measure` needs."""
    result = {"episode_reward_mean": float("nan"), "timesteps_total": 0}
    try:
        while not result["episode_reward_mean"] >= GOAL["threshold"] and result["timesteps_total"] < max_steps:
            result = algo.train()
            log_point(result["timesteps_total"], result["episode_reward_mean"], result["episode_reward_min"],
                      result["episode_reward_max"])
        reached = time.time()
    finally:
        algo.stop()
    return {"reached_at": reached, "steps": result["timesteps_total"], "reward": result["episode_reward_mean"]}


def sb3_stop_at_threshold() -> Any:
    """An SB3 callback that ends ``learn()`` once the last ``window`` episodes average the threshold."""
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAtThreshold(BaseCallback):
        logged: object = None  # the newest episode when the last point was logged
        checked: object = None  # ... and when the threshold was last checked

        def recent(self) -> list[float]:
            return [e["r"] for e in list(self.model.ep_info_buffer or [])[-GOAL["window"]:]]

        def newest(self) -> object:
            buffer = self.model.ep_info_buffer
            return buffer[-1] if buffer else None

        def _on_rollout_end(self) -> None:  # a point per rollout that ended episodes (SAC's: one step each)
            if self.newest() is not self.logged:
                self.logged = self.newest()
                rewards = self.recent()
                log_point(self.model.num_timesteps, float(np.mean(rewards)), min(rewards), max(rewards))

        def _on_step(self) -> bool:
            if self.newest() is self.checked:  # no episode ended since the last check
                return True
            self.checked = self.newest()
            rewards = self.recent()
            return not (rewards and np.mean(rewards) >= GOAL["threshold"])

    return StopAtThreshold()


def sb3_report(model: Any) -> dict:
    reached = time.time()
    rewards = [e["r"] for e in list(model.ep_info_buffer)[-GOAL["window"]:]]
    return {"reached_at": reached, "steps": model.num_timesteps, "reward": sum(rewards) / len(rewards)}


def measure(script: str, name: str, seed: int, curves: Path | None) -> dict:
    start = time.time()
    extra = ["--curves", str(curves)] if curves is not None else []
    out = subprocess.run([sys.executable, script, "--child", name, "--seeds", str(seed), *extra],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["time"] = report.pop("reached_at") - start
    report["reached"] = report["reward"] >= GOAL["threshold"]
    return report


def main(script: str, description: str, runners: dict[str, Runner]) -> None:
    """``--seeds ...``: run every runner per seed in a fresh process and print a markdown table
    (``sb3`` is the reference for the ratios)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--curves", type=Path, metavar="DIR",
                        help="also write each run's learning curve under DIR (for volley plot)")
    parser.add_argument("--only", nargs="+", choices=list(runners), metavar="RUNNER",
                        help=f"run only these ({', '.join(runners)}); sb3, the reference, always runs")
    parser.add_argument("--child", choices=list(runners), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.curves is not None:
            run_dir = args.curves / f"{args.child}-seed{args.seeds[0]}"
            run_dir.mkdir(parents=True, exist_ok=True)
            CURVE["path"] = run_dir / "progress.jsonl"
            CURVE["path"].unlink(missing_ok=True)
        print(json.dumps(runners[args.child](args.seeds[0])))
        return
    rows: dict[str, list[dict]] = {name: [] for name in runners
                                   if args.only is None or name in args.only or name == "sb3"}
    for seed in args.seeds:
        for name in rows:
            report = measure(script, name, seed, args.curves)
            rows[name].append(report)
            print(f"# {name} seed {seed}: {report}", file=sys.stderr, flush=True)
    sb3_time = statistics.median(r["time"] for r in rows["sb3"])
    sb3_steps = statistics.median(r["steps"] for r in rows["sb3"])
    goal = f"{GOAL['threshold']:g}"
    print(f"| run | seeds reaching {goal} | median time-to-{goal} (s) | median steps-to-{goal} | "
          "time / SB3 | steps / SB3 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, reports in rows.items():
        t = statistics.median(r["time"] for r in reports)
        s = statistics.median(r["steps"] for r in reports)
        times = ", ".join(f"{r['time']:.1f}" for r in reports)
        print(f"| {name} | {sum(r['reached'] for r in reports)}/{len(reports)} | {t:.1f} ({times}) | "
              f"{s:,.0f} | {t / sb3_time:.2f} | {s / sb3_steps:.2f} |")
    if not all(r["reached"] for reports in rows.values() for r in reports):
        print(f"\nA run that did not reach {goal} counts the time and steps of its whole budget "
              "(a lower bound).")
