"""Start-up: seconds from launching ``volley train`` to the end of its first iteration, whole process.

``--engines ray-library`` times a script's ``config.build()`` and first ``train()`` instead.

Each run launches ``python -m volley train ... --max-iters 1`` and reads its output as it
comes: the first iteration has ended when its row is printed (``iter`` 1 of the table). The
time to the process's exit is shown beside it; the difference is the teardown (the final
checkpoint, Ray's shutdown). Runs of several source trees are interleaved, so a machine
that slows down slows every tree alike; each tree's library is taken from it by
``PYTHONPATH`` (Ray's workers inherit it).

    python benchmarks/startup.py --runs 5                          # this checkout, local and Ray
    python benchmarks/startup.py --runs 5 --trees /work/old .     # two trees, interleaved
    python benchmarks/startup.py --runs 8 --engines ray-library --trees /work/old .
    python benchmarks/startup.py --runs 5 --engines ray --algo dqn --trees /work/old .
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGINES = {
    "local": ["--engine", "local"],
    "ray": ["--engine", "ray", "--workers", "2", "--num-cpus", "2"],
}
# The library path of a script (``config.build()``, then ``train()``), Ray with 2 workers: it
# prints a row starting with 1 when its first iteration has ended, as ``volley train`` does
LIBRARY = ("from volley.algorithms import get_config_class\n"
           "algo = get_config_class({algo!r})().environment('CartPole-v1')"
           ".resources(engine='ray', num_cpus=2).rollouts(num_workers=2).build()\n"
           "print(1, algo.train()['timesteps_total'], flush=True)\n"
           "algo.stop()\n")


def command(engine: str, logdir: str, algo: str) -> list[str]:
    if engine == "ray-library":
        return [sys.executable, "-c", LIBRARY.format(algo=algo)]
    return [sys.executable, "-m", "volley", "train", "--algo", algo, *ENGINES[engine], "--max-iters", "1",
            "--logdir", logdir]


def one_run(tree: Path, engine: str, algo: str = "ppo") -> tuple[float, float]:
    """(seconds to the first iteration's row, seconds to exit) of one ``volley train``."""
    with tempfile.TemporaryDirectory() as logdir:
        env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
        start = time.perf_counter()
        # in the tree: ``python -m`` and ``-c`` put the working directory first on sys.path, so
        # from inside another checkout its volley would be imported instead of the tree's
        proc = subprocess.Popen(command(engine, logdir, algo), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=tree)
        assert proc.stdout is not None
        first, lines = None, []
        for line in proc.stdout:
            lines.append(line)
            if first is None and line.split()[:1] == ["1"]:
                first = time.perf_counter() - start
        if proc.wait() != 0 or first is None:
            raise SystemExit(f"volley train ({engine}, {tree}) failed:\n{''.join(lines)}")
        return first, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trees", type=Path, nargs="+", default=[Path(__file__).parents[1]])
    parser.add_argument("--engines", nargs="+", choices=[*ENGINES, "ray-library"], default=list(ENGINES),
                        help="ray-library: a script's config.build() and train(), Ray with 2 workers")
    parser.add_argument("--algo", default="ppo", help="the algorithm every run trains (default: ppo)")
    args = parser.parse_args()
    firsts: dict[tuple[Path, str], list[float]] = {}
    exits: dict[tuple[Path, str], list[float]] = {}
    for _ in range(args.runs):
        for engine in args.engines:
            for tree in args.trees:
                first, end = one_run(tree, engine, args.algo)
                firsts.setdefault((tree, engine), []).append(first)
                exits.setdefault((tree, engine), []).append(end)
                print(f"{tree} {engine}: first iteration {first:.2f} s, exit {end:.2f} s", file=sys.stderr)
    print("| tree | engine | to the end of the first iteration (s) | median | to exit (s) | median |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (tree, engine), times in firsts.items():
        ends = exits[(tree, engine)]
        print(f"| {tree} | {engine} | {', '.join(f'{t:.2f}' for t in times)} | {statistics.median(times):.2f} "
              f"| {', '.join(f'{t:.2f}' for t in ends)} | {statistics.median(ends):.2f} |")


if __name__ == "__main__":
    main()
