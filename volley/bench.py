"""``volley bench speedup``: the same first iterations with 0, 1, 2, ... workers, side by side.

Every worker count starts from the same config and seed and runs the same number of
iterations; the clock covers the iterations only (building the algorithm and Ray's
start-up are outside it). ``warmup`` iterations run first, untimed: the first
iteration of a fresh worker pays one-off costs (torch's lazy initialisation, the first
object-store transfers) that say nothing about steady-state throughput. Speedup is the serial (``workers=0``, in-process) wall time
over this count's; parallel efficiency divides the speedup by the number of workers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from volley.algorithms import get_config_class


@dataclass
class SpeedupRow:
    """One worker count's measurement."""

    workers: int
    wall_s: float
    env_steps: int
    speedup: float = 1.0

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.wall_s

    @property
    def efficiency(self) -> float:
        return self.speedup / max(1, self.workers)


def measure(algo: str, env: str, iterations: int, workers: int, overrides: dict[str, Any],
            warmup: int = 0) -> SpeedupRow:
    """Build with ``workers`` workers (0: in-process), run ``warmup`` then ``iterations``, time the latter."""
    config = get_config_class(algo)().environment(env).update(**overrides)
    config.update(num_workers=workers, engine="ray" if workers > 0 else "local")
    instance = config.build()
    try:
        steps_before = sum(instance.train()["timesteps_this_iter"] for _ in range(warmup))
        start = time.perf_counter()
        for _ in range(iterations):
            result = instance.train()
        wall = time.perf_counter() - start
    finally:
        instance.stop()
    return SpeedupRow(workers, wall, result["timesteps_total"] - steps_before)


def speedup(algo: str, env: str, iterations: int, worker_counts: list[int],
            overrides: dict[str, Any], num_cpus: int | None = None, warmup: int = 0) -> list[SpeedupRow]:
    """Measure every worker count; one Ray cluster serves them all."""
    import ray

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING)
    try:
        rows = [measure(algo, env, iterations, n, overrides, warmup) for n in worker_counts]
    finally:
        ray.shutdown()
    serial = next((row.wall_s for row in rows if row.workers == 0), rows[0].wall_s)
    for row in rows:
        row.speedup = serial / row.wall_s
    return rows


def table(rows: list[SpeedupRow]) -> str:
    """The rows as a markdown table."""
    lines = ["| workers | wall s | env steps | env steps/s | speedup | efficiency |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.workers} | {r.wall_s:.1f} | {r.env_steps} | {r.env_steps_per_s:.0f} | "
              f"{r.speedup:.2f} | {r.efficiency:.2f} |" for r in rows]
    return "\n".join(lines)
