"""``volley bench speedup``: the same first iterations with 0, 1, 2, ... workers, side by side.

Every worker count starts from the same config and seed and runs the same number of
iterations; the clock covers the iterations only (building the algorithm, Ray's
start-up and ``mpiexec``'s are outside it). ``warmup`` iterations run first, untimed:
the first iteration of a fresh worker pays one-off costs (torch's lazy initialisation,
the first object-store transfers) that say nothing about steady-state throughput.
Speedup is the serial (``workers=0``, in-process) wall time over this row's; parallel
efficiency divides the speedup by the number of workers.

Ray rows run in this process; MPI rows (``mpi_ranks``) each start ``mpiexec -n R``
running this module, whose rank 0 prints its measurement as one JSON line.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from volley.algorithms import get_config_class
from volley.errors import VolleyError


@dataclass
class SpeedupRow:
    """One engine and worker count's measurement."""

    engine: str
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


def measure(algo: str, env: str, iterations: int, engine: str, workers: int, overrides: dict[str, Any],
            warmup: int = 0) -> SpeedupRow:
    """Build on ``engine`` with ``workers`` workers, run ``warmup`` then ``iterations``, time the latter."""
    config = get_config_class(algo)().environment(env).update(**overrides)
    config.update(engine=engine, **({} if engine == "mpi" else {"num_workers": workers}))
    instance = config.build()
    try:
        steps_before = sum(instance.train()["timesteps_this_iter"] for _ in range(warmup))
        start = time.perf_counter()
        for _ in range(iterations):
            result = instance.train()
        wall = time.perf_counter() - start
    finally:
        instance.stop()
    return SpeedupRow(engine, instance.workers.plan.num_workers, wall,
                      result["timesteps_total"] - steps_before)


def measure_mpi(algo: str, env: str, iterations: int, ranks: int, overrides: dict[str, Any],
                warmup: int = 0) -> SpeedupRow:
    """The same measurement on the MPI engine, under ``mpiexec -n ranks``."""
    from volley.engines.mpi_engine import mpiexec_path

    job = json.dumps({"algo": algo, "env": env, "iterations": iterations, "overrides": overrides,
                      "warmup": warmup})
    out = subprocess.run([mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "volley.bench", job],
                         capture_output=True, text=True)
    rows = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not rows:
        raise VolleyError(f"the {ranks}-rank MPI run failed: {out.stderr.strip()[-500:]}")
    return SpeedupRow(**json.loads(rows[-1]))


def speedup(algo: str, env: str, iterations: int, worker_counts: list[int],
            overrides: dict[str, Any], num_cpus: int | None = None, warmup: int = 0,
            mpi_ranks: list[int] | None = None) -> list[SpeedupRow]:
    """Measure every worker count (one Ray cluster serves them all), then every MPI rank count."""
    import ray

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING)
    try:
        rows = [measure(algo, env, iterations, "local" if n == 0 else "ray", n, overrides, warmup)
                for n in worker_counts]
    finally:
        ray.shutdown()
    rows += [measure_mpi(algo, env, iterations, n, overrides, warmup) for n in mpi_ranks or []]
    serial = next((row.wall_s for row in rows if row.workers == 0), rows[0].wall_s)
    for row in rows:
        row.speedup = serial / row.wall_s
    return rows


def table(rows: list[SpeedupRow]) -> str:
    """The rows as a markdown table."""
    lines = ["| engine | workers | wall s | env steps | env steps/s | speedup | efficiency |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.engine} | {r.workers} | {r.wall_s:.1f} | {r.env_steps} | {r.env_steps_per_s:.0f} | "
              f"{r.speedup:.2f} | {r.efficiency:.2f} |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # one MPI row: every rank runs this, rank 0 reports
    job = json.loads(sys.argv[1])
    row = measure(job["algo"], job["env"], job["iterations"], "mpi", 0, job["overrides"], job["warmup"])
    print(json.dumps(asdict(row)), flush=True)
