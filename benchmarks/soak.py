"""Soak: PPO with 2 Ray workers for many iterations, watching resident memory (issue 6).

After every iteration the driver records its own resident set size (RSS) and asks each
worker actor for its pid and RSS. Memory grows while a run warms up (allocator pools,
Ray's object store clients, torch's caches), so growth is measured from the end of the
warm-up (the first ``--warmup`` fraction of iterations) to the end of the run, each
end averaged over 5 % of the iterations. Target: under 5 % for every process.

    python benchmarks/soak.py                # 3000 iterations, ~9 minutes on a quiet 2-core machine
    python benchmarks/soak.py --iters 100    # a quick look
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psutil
import ray

from volley import PPOConfig

TARGET_PERCENT = 5.0
MB = 2**20


def _pid_and_rss(host: object) -> tuple[int, int]:
    """Runs inside a worker actor (``__ray_call__``): its pid and resident set size."""
    return os.getpid(), psutil.Process().memory_info().rss


def worker_memory(algo) -> list[tuple[int, int]]:
    """(pid, RSS) of each worker, in worker order."""
    return ray.get([actor.__ray_call__.remote(_pid_and_rss) for actor in algo.workers.actors])


def growth_percent(series: list[int], start: int, window: int) -> float:
    """Mean RSS over the last ``window`` samples against the ``window`` from ``start`` on."""
    base = statistics.fmean(series[start:start + window])
    return 100.0 * (statistics.fmean(series[-window:]) - base) / base


def soak(iters: int, warmup: float, seed: int) -> None:
    config = (PPOConfig().environment("CartPole-v1", observation_filter="MeanStdFilter")
              .resources(engine="ray", num_cpus=2).rollouts(num_workers=2).debugging(seed=seed))
    algo = config.build()
    driver = psutil.Process()
    names = ["driver"] + [f"worker {i}" for i in range(algo.workers.num_workers)]
    series: dict[str, list[int]] = {name: [] for name in names}
    pids: dict[str, set[int]] = {name: set() for name in names}
    start = time.perf_counter()
    try:
        for _ in range(iters):
            result = algo.train()
            samples = [(driver.pid, driver.memory_info().rss), *worker_memory(algo)]
            for name, (pid, rss) in zip(names, samples, strict=True):
                series[name].append(rss)
                pids[name].add(pid)
    finally:
        algo.stop()
    wall = time.perf_counter() - start

    begin = int(iters * warmup)
    window = max(1, iters // 20)
    print(f"PPO on CartPole-v1, 2 Ray workers, {iters} iterations, {result['timesteps_total']} env steps, "
          f"{wall:.0f} s; warm-up {begin} iterations; means over {window} iterations\n")
    print("| iteration | " + " | ".join(f"{name} RSS (MB)" for name in names) + " |")
    print("|---:|" + "---:|" * len(names))
    for i in sorted({0, begin, *range(0, iters, max(1, iters // 10)), iters - 1}):
        print(f"| {i + 1} | " + " | ".join(f"{series[name][i] / MB:.1f}" for name in names) + " |")
    growth = {name: growth_percent(series[name], begin, window) for name in names}
    total = [sum(values) for values in zip(*series.values(), strict=True)]
    print("\n| process | after warm-up (MB) | at the end (MB) | growth |")
    print("|---|---:|---:|---:|")
    for name, values in [*series.items(), ("all", total)]:
        change = growth_percent(values, begin, window)
        print(f"| {name} | {statistics.fmean(values[begin:begin + window]) / MB:.1f} | "
              f"{statistics.fmean(values[-window:]) / MB:.1f} | {change:+.2f} % |")
    restarted = [name for name in names if len(pids[name]) > 1]
    if restarted:
        print(f"\nrestarted during the soak (new pids): {', '.join(restarted)}")
    worst = max(growth.values())
    print(f"\nlargest growth {worst:+.2f} % (target < {TARGET_PERCENT:g} %): "
          f"{'PASS' if worst < TARGET_PERCENT else 'FAIL'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=3000, help="training iterations (default: 3000)")
    parser.add_argument("--warmup", type=float, default=0.1,
                        help="fraction of iterations before growth is measured (default: 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    soak(args.iters, args.warmup, args.seed)


if __name__ == "__main__":
    main()
