"""What the CartPole time-to-475 benchmarks share: the stop rule, fresh processes, the table.

Each run is a fresh Python process, so start-up (imports, Ray's cluster) counts. A run
ends when the mean return of the last 100 episodes reaches 475 (the same window in
every library: SB3's ep_info_buffer holds 100 episodes). Seeds are interleaved, so
drift on a noisy machine hits every library alike; the table gives medians and their
ratios to SB3.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

THRESHOLD = 475.0

Runner = Callable[[int], dict]  # seed -> {"reached_at": time.time(), "steps": ..., "reward": ...}


def train_volley(algo: Any, max_steps: int) -> dict:
    """Train until the threshold (or ``max_steps``); what :func:`measure` needs."""
    result = {"episode_reward_mean": float("nan"), "timesteps_total": 0}
    try:
        while not result["episode_reward_mean"] >= THRESHOLD and result["timesteps_total"] < max_steps:
            result = algo.train()
        reached = time.time()
    finally:
        algo.stop()
    return {"reached_at": reached, "steps": result["timesteps_total"], "reward": result["episode_reward_mean"]}


def sb3_stop_at_threshold() -> Any:
    """An SB3 callback that ends ``learn()`` once the last 100 episodes average 475."""
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAtThreshold(BaseCallback):
        def _on_step(self) -> bool:
            buffer = self.model.ep_info_buffer
            return not (buffer is not None and len(buffer) > 0
                        and np.mean([e["r"] for e in buffer]) >= THRESHOLD)

    return StopAtThreshold()


def sb3_report(model: Any) -> dict:
    reached = time.time()
    rewards = [e["r"] for e in model.ep_info_buffer]
    return {"reached_at": reached, "steps": model.num_timesteps, "reward": sum(rewards) / len(rewards)}


def measure(script: str, name: str, seed: int) -> dict:
    start = time.time()
    out = subprocess.run([sys.executable, script, "--child", name, "--seeds", str(seed)],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["time_to_475"] = report.pop("reached_at") - start
    report["reached"] = report["reward"] >= THRESHOLD
    return report


def main(script: str, description: str, runners: dict[str, Runner]) -> None:
    """``--seeds ...``: run every runner per seed in a fresh process and print a markdown table
    (``sb3`` is the reference for the ratios)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--child", choices=list(runners), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(runners[args.child](args.seeds[0])))
        return
    rows: dict[str, list[dict]] = {name: [] for name in runners}
    for seed in args.seeds:
        for name in runners:
            report = measure(script, name, seed)
            rows[name].append(report)
            print(f"# {name} seed {seed}: {report}", file=sys.stderr, flush=True)
    sb3_time = statistics.median(r["time_to_475"] for r in rows["sb3"])
    sb3_steps = statistics.median(r["steps"] for r in rows["sb3"])
    print("| run | seeds reaching 475 | median time-to-475 (s) | median steps-to-475 | "
          "time / SB3 | steps / SB3 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, reports in rows.items():
        t = statistics.median(r["time_to_475"] for r in reports)
        s = statistics.median(r["steps"] for r in reports)
        times = ", ".join(f"{r['time_to_475']:.1f}" for r in reports)
        print(f"| {name} | {sum(r['reached'] for r in reports)}/{len(reports)} | {t:.1f} ({times}) | "
              f"{s:,.0f} | {t / sb3_time:.2f} | {s / sb3_steps:.2f} |")
    if not all(r["reached"] for reports in rows.values() for r in reports):
        print("\nA run that did not reach 475 counts the time and steps of its whole budget "
              "(a lower bound).")
