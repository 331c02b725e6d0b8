"""Learning results: volley's tuned presets beside the peer library's own tuned settings.

Each task trains volley's preset and, where one exists, the peer (Stable-Baselines3 or
sb3-contrib with rl-baselines3-zoo's hyperparameters for the task, VecNormalize included)
to the same environment-step budget, seeds interleaved (volley seed 0, peer seed 0,
volley seed 1, ...), every run in a fresh process whose wall time counts from its launch
(imports and start-up included). After training, each policy plays 10 episodes with its
most likely actions (observation statistics frozen, raw rewards).

    python benchmarks/learning.py ppo-halfcheetah ppo-hopper      # run what has no result yet
    python benchmarks/learning.py --table                          # the markdown table so far
    volley plot benchmarks/learning/ppo-halfcheetah/* -o halfcheetah.png   # the curves

Everything lands under ``--out`` (default ``benchmarks/learning``): per run a directory
with ``progress.jsonl`` (the curve), checkpoints, and ``result.json`` once it has finished.
A run cut off part-way continues from its last checkpoint when the script is started
again (``volley train --resume``; the peer from its own saved model). rl-zoo's settings are
for the MuJoCo v4 tasks and are applied to v5 as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STARTED = time.time()
ROOT = Path(__file__).resolve().parent.parent
EVAL_EPISODES = 10
SB3_SAVE_EVERY = 100_000  # env steps between the peer's checkpoints


@dataclass(frozen=True)
class Task:
    """A preset, the peer trained beside it (an rl-zoo algorithm and env key, or None), the
    step budget (None: the preset's own stop criterion) and the seeds."""

    preset: str
    peer: tuple[str, str] | None
    steps: int | None
    seeds: tuple[int, ...]


TASKS = {
    "ppo-halfcheetah": Task("ppo-halfcheetah", ("ppo", "HalfCheetah-v4"), 1_000_000, (0, 1)),
    "ppo-hopper": Task("ppo-hopper", ("ppo", "Hopper-v4"), 1_000_000, (0,)),
    "trpo-hopper": Task("trpo-hopper", ("trpo", "Hopper-v4"), 1_000_000, (0, 1)),
    "ppo-humanoid": Task("ppo-humanoid", None, 2_000_000, (0,)),
    "trpo-pong-ram": Task("trpo-pong-ram", None, None, (0,)),
    "ppo-pong": Task("ppo-pong", None, 2_000_000, (0,)),
    "ppo-walker2d": Task("ppo-walker2d", ("ppo", "Walker2d-v4"), 1_000_000, (0, 1)),
    "ppo-pendulum": Task("ppo-pendulum", ("ppo", "Pendulum-v1"), 100_000, (0,)),
    "sac-halfcheetah": Task("sac-halfcheetah", ("sac", "HalfCheetah-v4"), 300_000, (0, 1)),
    "sac-pendulum": Task("sac-pendulum", ("sac", "Pendulum-v1"), 20_000, (0,)),
    "ppo-cartpole": Task("ppo-cartpole", None, None, (0,)),
    "dqn-cartpole": Task("dqn-cartpole", None, None, (0,)),
    "apex-dqn-cartpole": Task("apex-dqn-cartpole", None, None, (0,)),
    "pg-pong": Task("pg-pong", None, None, (0,)),
    "dqn-pong": Task("dqn-pong", None, None, (0,)),
}


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "volley"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


# -- volley ----------------------------------------------------------------------------------


def run_volley(task: Task, seed: int, run_dir: Path) -> dict[str, Any]:
    """``volley train --preset`` in a fresh process (``--resume`` if an earlier one was cut off),
    then ``volley evaluate`` on its final checkpoint."""
    volley = [sys.executable, "-m", "volley"]
    resumed_from = 0  # the iteration this process starts from
    if (run_dir / "checkpoint").exists():
        resumed_from = int(os.readlink(run_dir / "checkpoint").rsplit("_", 1)[1])
        command = [*volley, "train", "--resume", str(run_dir)]
    else:
        budget = ["--max-timesteps", str(task.steps)] if task.steps else []
        command = [*volley, "train", "--preset", task.preset, "--seed", str(seed), *budget,
                   "--logdir", str(run_dir.parent), "--name", run_dir.name, "--checkpoint-freq", "20"]
    launched = time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    segment = time.time() - launched
    rows = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    last = rows[-1]
    # the run's training seconds (a resumed run's earlier processes included, as its checkpoints
    # carry them) plus the start-up and checkpoint writing of the process that finished it
    startup = segment - sum(r["time_this_iter_s"] for r in rows if r["training_iteration"] > resumed_from)
    evaluation = subprocess.run([*volley, "evaluate", str(run_dir / "checkpoint"), "--episodes",
                                 str(EVAL_EPISODES)], check=True, capture_output=True, text=True).stdout
    match = re.search(r"return (-?[\d.]+) \+/- ([\d.]+)", evaluation)
    assert match, evaluation
    return {"steps": last["timesteps_total"], "return_last100": last["episode_reward_mean"],
            "wall_time_s": last["time_total_s"] + startup,
            "eval_return": float(match[1]), "eval_std": float(match[2])}


# -- the peer: SB3 / sb3-contrib with rl-zoo's hyperparameters --------------------------------


def zoo_hyperparameters(algo: str, env_key: str) -> dict[str, Any]:
    """rl-zoo's tuned settings for ``env_key``, read from the installed rl_zoo3 package."""
    import importlib.util

    import yaml

    spec = importlib.util.find_spec("rl_zoo3")  # its files only: importing it wants huggingface_hub
    assert spec is not None and spec.submodule_search_locations, "pip install rl_zoo3"
    path = Path(spec.submodule_search_locations[0]) / "hyperparams" / f"{algo}.yml"
    return dict(yaml.safe_load(path.read_text())[env_key])


def sb3_model(algo: str, params: dict[str, Any], env: Any, seed: int) -> Any:
    """The peer's model from rl-zoo's settings (``lin_X`` schedules and policy_kwargs as rl-zoo
    reads them)."""
    from torch import nn

    kwargs = {k: v for k, v in params.items() if k not in ("n_envs", "n_timesteps", "normalize", "policy")}
    for key, value in kwargs.items():
        if isinstance(value, str) and value.startswith("lin_"):
            start = float(value[4:])
            kwargs[key] = lambda progress, start=start: progress * start
    if isinstance(kwargs.get("policy_kwargs"), str):
        kwargs["policy_kwargs"] = eval(kwargs["policy_kwargs"], {"nn": nn, "dict": dict})
    return peer_class(algo)(params.get("policy", "MlpPolicy"), env, seed=seed, device="cpu", verbose=0, **kwargs)


def peer_class(algo: str) -> Any:
    """The peer's algorithm class (sb3-contrib's TRPO, else SB3's)."""
    if algo == "trpo":
        from sb3_contrib import TRPO

        return TRPO
    import stable_baselines3

    return getattr(stable_baselines3, algo.upper())


def run_peer(task: Task, seed: int, run_dir: Path) -> dict[str, Any]:
    """The peer in this (fresh) process, saving its model and normalisation statistics every
    ``SB3_SAVE_EVERY`` steps so that a cut-off run continues where it was."""
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    assert task.peer is not None and task.steps is not None
    # one learner thread, as volley's MLP learner has: torch's default of one per core collapses
    # on 2 cores as soon as anything else runs (HalfCheetah here: 161 env steps/s with two threads
    # beside a test run, 567/s with one)
    torch.set_num_threads(1)
    algo, env_key = task.peer
    params = zoo_hyperparameters(algo, env_key)
    env_id = env_key.replace("-v4", "-v5")
    run_dir.mkdir(parents=True, exist_ok=True)
    progress, state_file = run_dir / "progress.jsonl", run_dir / "state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"steps": 0, "seconds": 0.0}
    env = make_vec_env(env_id, n_envs=params.get("n_envs", 1), seed=seed + state["steps"])
    normalize = {"gamma": params["gamma"]} if "gamma" in params else {}
    if state["steps"]:
        env = VecNormalize.load(str(run_dir / "vecnormalize.pkl"), env)
        model = peer_class(algo).load(run_dir / "model.zip", env=env, device="cpu")
        rows = progress.read_text().splitlines()
        progress.write_text("".join(r + "\n" for r in rows if json.loads(r)["timesteps_total"] <= state["steps"]))
    else:
        env = VecNormalize(env, **normalize) if params.get("normalize") else env
        model = sb3_model(algo, params, env, seed)
        progress.unlink(missing_ok=True)
    earlier = state["seconds"]

    def elapsed() -> float:
        return earlier + time.time() - STARTED

    class Record(BaseCallback):
        """The curve (volley's progress.jsonl format) and the periodic checkpoint."""

        logged: object = None  # the newest episode when the last point was written

        def _on_rollout_end(self) -> None:  # a point per rollout that ended episodes (SAC's: one step each)
            buffer = self.model.ep_info_buffer
            rewards = [e["r"] for e in buffer] if buffer and buffer[-1] is not self.logged else []
            if rewards:
                self.logged = buffer[-1]
                with open(progress, "a") as f:
                    f.write(json.dumps({"timesteps_total": self.model.num_timesteps, "time_total_s": elapsed(),
                                        "episode_reward_mean": float(np.mean(rewards)),
                                        "episode_reward_min": min(rewards),
                                        "episode_reward_max": max(rewards)}) + "\n")
            if self.model.num_timesteps // SB3_SAVE_EVERY > state["steps"] // SB3_SAVE_EVERY:
                self.model.save(run_dir / "model.zip")
                if isinstance(env, VecNormalize):
                    env.save(str(run_dir / "vecnormalize.pkl"))
                state.update(steps=self.model.num_timesteps, seconds=elapsed())
                state_file.write_text(json.dumps(state))

        def _on_step(self) -> bool:
            return True

    model.learn(total_timesteps=task.steps - model.num_timesteps, callback=Record(),
                reset_num_timesteps=not state["steps"])
    wall = elapsed()
    returns = [e["r"] for e in model.ep_info_buffer]
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 1_000_000)
    if isinstance(env, VecNormalize):
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False, **normalize)
        eval_env.obs_rms = env.obs_rms
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return {"steps": model.num_timesteps, "return_last100": float(np.mean(returns)), "wall_time_s": wall,
            "eval_return": float(mean), "eval_std": float(std)}


# -- driver ----------------------------------------------------------------------------------


def runners(task: Task) -> list[str]:
    return ["volley"] + ([f"{task.peer[0]}-sb3"] if task.peer else [])


def run_one(name: str, task_name: str, seed: int, out: Path, steps: int | None) -> None:
    task = TASKS[task_name]
    if steps is not None:  # a smaller budget, to check the script end to end
        task = Task(task.preset, task.peer, steps, task.seeds)
    run_dir = out / task_name / f"{name}-seed{seed}"
    result = run_volley(task, seed, run_dir) if name == "volley" else run_peer(task, seed, run_dir)
    result.update(task=task_name, runner=name, seed=seed, commit=commit(),
                  date=time.strftime("%Y-%m-%d"), machine=f"{os.cpu_count()} cores, no GPU")
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    print(f"# {task_name} {name} seed {seed}: {result}", file=sys.stderr, flush=True)


def table(out: Path) -> str:
    """Every finished run, then per task the means over seeds and volley's wall time over the peer's."""
    lines = ["| task | run | seed | env steps | return, last 100 episodes | eval return (10 episodes, "
             "deterministic) | wall time (s) | env steps/s | commit |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    summary = []
    for task_name in TASKS:
        by_runner: dict[str, list[dict]] = {}
        for path in sorted((out / task_name).glob("*/result.json")):
            r = json.loads(path.read_text())
            by_runner.setdefault(r["runner"], []).append(r)
            lines.append(f"| {task_name} | {r['runner']} | {r['seed']} | {r['steps']:,} | {r['return_last100']:.1f} "
                         f"| {r['eval_return']:.1f} ± {r['eval_std']:.1f} | {r['wall_time_s']:.0f} | "
                         f"{r['steps'] / r['wall_time_s']:,.0f} | {r['commit']} |")
        volley, peers = by_runner.get("volley", []), [v for k, v in by_runner.items() if k != "volley"]
        if volley and peers:
            peer = peers[0]
            ratio = statistics.mean(r["wall_time_s"] for r in volley) / statistics.mean(
                r["wall_time_s"] for r in peer)
            summary.append(f"| {task_name} | {mean_of(volley, 'return_last100')} | {mean_of(peer, 'return_last100')} "
                           f"| {mean_of(volley, 'eval_return')} | {mean_of(peer, 'eval_return')} | {ratio:.2f} |")
    if summary:
        lines += ["", "| task | volley return (last 100) | peer return (last 100) | volley eval | peer eval "
                  "| wall time volley / peer |", "| --- | --- | --- | --- | --- | --- |", *summary]
    return "\n".join(lines)


def mean_of(results: list[dict], key: str) -> str:
    values = [r[key] for r in results]
    return f"{statistics.mean(values):.0f}" + (f" ({', '.join(f'{v:.0f}' for v in values)})"
                                               if len(values) > 1 else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", nargs="*", choices=[*TASKS, []], metavar="TASK",
                        help=f"tasks to run: {', '.join(TASKS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "learning")
    parser.add_argument("--table", action="store_true", help="print the table of finished runs")
    parser.add_argument("--steps", type=int, help="override every task's step budget (a quick check)")
    parser.add_argument("--child", nargs=3, metavar=("RUNNER", "TASK", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, task_name, seed = args.child
        run_one(name, task_name, int(seed), args.out, args.steps)
        return
    for task_name in args.tasks:
        task = TASKS[task_name]
        for seed in task.seeds:
            for name in runners(task):
                if not (args.out / task_name / f"{name}-seed{seed}" / "result.json").exists():
                    steps = ["--steps", str(args.steps)] if args.steps else []
                    subprocess.run([sys.executable, __file__, "--out", str(args.out), *steps, "--child", name,
                                    task_name, str(seed)], check=True)
    if args.table or args.tasks:
        print(table(args.out))


if __name__ == "__main__":
    main()
