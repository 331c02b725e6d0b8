"""The default run and the sampler on two checkouts of volley, interleaved in one invocation.

A change meant to leave behaviour alone (issue 45's new layout) is checked against the commit
before it on the same machine at the same time: each checkout's ``volley train`` with the
defaults (PPO on CartPole-v1 until the mean return of the last 100 episodes reaches 475) on
the local engine and on Ray with 2 workers, and its ``volley bench sampler`` (the worker's
steps per second as a fraction of the raw vector environment's). Runs alternate between the
checkouts, seed by seed, so the machine's drift hits both alike; each is a fresh process.
The local engine is deterministic for a seed: equal steps mean the same training. With
``--presets NAME=STEPS ...`` each preset also trains for that many environment steps on the
local engine (seed 0; ``NAME=STEPS@ray`` on Ray), and the table gives the mean return of the last 100 episodes at the end:
equal where the algorithm's training is unchanged (Ape-X's, asynchronous, is not reproducible).

    git worktree add --detach /tmp/before cc2d653
    python benchmarks/two_commits.py /tmp/before . --seeds 0 1 2 --presets dqn-cartpole=150000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STOPPED = re.compile(r"at iteration (\d+), (\d+) env steps, ([\d.]+) s")  # the older commits print only this


def volley(tree: Path, *args: str, cwd: str) -> str:
    """Run ``python -m volley ARGS`` with ``tree``'s code; its output (stdout and stderr)."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    done = subprocess.run([sys.executable, "-m", "volley", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{tree}: volley {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout + done.stderr


def train(tree: Path, engine: str, seed: int) -> tuple[int, float, float]:
    """Env steps to 475, seconds of training (as volley prints them), seconds of the whole process."""
    extra = ["--workers", "2"] if engine == "ray" else []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as runs:
        out = volley(tree, "train", "--engine", engine, "--seed", str(seed), *extra, cwd=runs)
    total = time.perf_counter() - start
    found = STOPPED.search(out)
    if found is None:
        raise SystemExit(f"{tree}: no 'stopped ... at iteration' line in:\n{out[-2000:]}")
    return int(found[2]), float(found[3]), total


def preset(tree: Path, name: str, steps: int, engine: str) -> tuple[int, float, float, float]:
    """Env steps, seconds of training, seconds of the process, and the last mean return of preset
    ``name`` trained for ``steps`` environment steps on ``engine``."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as runs:
        out = volley(tree, "train", "--preset", name, "--engine", engine, "--seed", "0", "--max-timesteps",
                     str(steps), cwd=runs)
        total = time.perf_counter() - start
        last = json.loads(next(Path(runs).glob("runs/*/progress.jsonl")).read_text().splitlines()[-1])
    found = STOPPED.search(out)
    if found is None:
        raise SystemExit(f"{tree}: no 'stopped ... at iteration' line in:\n{out[-2000:]}")
    return int(found[2]), float(found[3]), total, float(last["episode_reward_mean"])


def sampler(tree: Path, env: str, seconds: float) -> float:
    """The sampler's fraction of the raw environment's steps per second, on ``env``'s first row."""
    with tempfile.TemporaryDirectory() as cwd:
        out = volley(tree, "bench", "sampler", "--env", env, "--seconds", str(seconds), cwd=cwd)
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ")]
    ratios = [float(cells[6]) for cells in rows if cells[6].strip()[:1].isdigit()]  # the "volley / raw" column
    if not ratios:
        raise SystemExit(f"{tree}: no sampler row in:\n{out[-2000:]}")
    return ratios[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path, help="the checkout before the change")
    parser.add_argument("after", type=Path, help="the checkout after it")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--engines", nargs="*", default=["local", "ray"])
    parser.add_argument("--presets", nargs="*", default=[], metavar="NAME=STEPS[@ENGINE]",
                        help="presets to train for STEPS env steps, seed 0, on the local engine unless ENGINE")
    parser.add_argument("--sampler-env", action="append", default=None,
                        help="environments for volley bench sampler (repeatable; default CartPole-v1)")
    parser.add_argument("--sampler-rounds", type=int, default=3)
    parser.add_argument("--sampler-seconds", type=float, default=2.0)
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    print("| engine | seed | before: steps, train s, process s | after: steps, train s, process s |")
    print("| --- | --- | --- | --- |")
    times: dict[tuple[str, str], list[float]] = {}
    for engine in args.engines:
        for seed in args.seeds:
            row = {}
            for name, tree in trees.items():
                row[name] = train(tree, engine, seed)
                times.setdefault((engine, name), []).append(row[name][2])
            cells = [f"{s:,}, {t:.1f}, {w:.1f}" for s, t, w in row.values()]
            print(f"| {engine} | {seed} | {cells[0]} | {cells[1]} |", flush=True)
    for engine in args.engines:
        before, after = (statistics.median(times[engine, name]) for name in trees)
        print(f"{engine}: median process seconds before {before:.1f}, after {after:.1f}, after/before {after / before:.2f}")
    if args.presets:
        print("\n| preset | before: steps, train s, process s, return | after: steps, train s, process s, return |")
        print("| --- | --- | --- |")
    for entry in args.presets:
        name, budget = entry.split("=")
        steps, _, engine = budget.partition("@")
        runs = [preset(tree, name, int(steps), engine or "local") for tree in trees.values()]
        print(f"| {name} | " + " | ".join(f"{s:,}, {t:.1f}, {w:.1f}, {r:.2f}" for s, t, w, r in runs) + " |", flush=True)
    for env in args.sampler_env or ["CartPole-v1"]:
        ratios: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.sampler_rounds):
            for name, tree in trees.items():
                ratios[name].append(sampler(tree, env, args.sampler_seconds))
        before, after = (statistics.median(ratios[name]) for name in trees)
        print(f"sampler {env}: fraction of the raw env, median of {args.sampler_rounds}: before {before:.2f} "
              f"{ratios['before']}, after {after:.2f} {ratios['after']}, after/before {after / before:.2f}", flush=True)


if __name__ == "__main__":
    main()
