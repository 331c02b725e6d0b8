"""APPO against synchronous PPO (and RLlib's APPO): environment steps/s, and time to a return.

``throughput``: environment steps per second of volley's APPO against its synchronous PPO
with the same network (a 64x64 tanh MLP), the same fragment length, workers and
environments (2 Ray workers x 8 environments x 50 steps), on CartPole-v1 and ALE/Pong-ram-v5.
Both take one optimizer step per two fragments, 800 rows (APPO: ``train_batch_size`` 700 steps,
which two fragments hold however many reset steps they drop, one epoch; PPO: one epoch of one
800-row minibatch), so the learners do the same work and the ratio measures the overlap of
sampling with learning alone. Each invocation runs APPO and
PPO one after the other in fresh processes (``--warmup`` untimed seconds, then ``--seconds``
timed); the table gives each invocation's figures, APPO's learner idle fraction (the aim:
below 0.1) and its workers' idle fraction.

``time-to``: seconds (and env steps) to a mean return over the last 100 episodes of 475 on
CartPole-v1 and of 0 on ALE/Pong-ram-v5: volley's APPO (``appo.CARTPOLE``, ``APPO_PONG_RAM``
below) and synchronous PPO (its CartPole defaults; for Pong-RAM the settings below) on 2
Ray workers, and RLlib's APPO with its own tuned CartPole settings (tuned_examples/appo/
cartpole_appo.py) from the side venv (``--rllib-python``, ray[rllib] 2.60; for Pong-RAM it
needs ``pip install ale-py`` there). Every run is a fresh process, so imports and Ray's
start count; seeds are interleaved.

    python benchmarks/appo.py throughput --invocations 3
    python benchmarks/appo.py time-to --task cartpole --seeds 0 1 2
    python benchmarks/appo.py time-to --task pong-ram --seeds 0 --max-minutes 120
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

STARTED = time.time()  # a child's start: time-to figures include imports and Ray's start-up
RLLIB_PYTHON = "/work/venvs/rllib/bin/python"
THROUGHPUT_ENVS = {"cartpole": "CartPole-v1", "pong-ram": "ALE/Pong-ram-v5"}
TASKS = {"cartpole": ("CartPole-v1", 475.0, 400_000), "pong-ram": ("ALE/Pong-ram-v5", 0.0, 20_000_000)}
SHAPE = {"num_workers": 2, "num_envs_per_worker": 8, "rollout_fragment_length": 50}
# Pong-RAM for both volley algorithms: the RAM's bytes standardised by a running filter (as the
# trpo-pong-ram preset), rewards clipped to their sign, a 256x256 ReLU network
PONG_RAM = {"observation_filter": "MeanStdFilter", "clip_rewards": True, "gamma": 0.99,
            "model": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}}
APPO_PONG_RAM = {**PONG_RAM, "lr": 5e-4, "train_batch_size": 800, "num_epochs": 2, "minibatch_buffer_size": 2,
                 "vf_loss_coeff": 0.5, "entropy_coeff": 0.01, "grad_clip": 10.0, "clip_param": 0.3}
PPO_PONG_RAM = {**PONG_RAM, "lr": 2.5e-4, "train_batch_size": 8192, "minibatch_size": 512, "num_epochs": 4,
                "gae_lambda": 0.95, "entropy_coeff": 0.01, "clip_param": 0.1}


# -- the children: one run each ------------------------------------------------------------------


def volley_config(algo: str, env: str, seed: int, **keys: Any) -> Any:
    from volley import APPOConfig, PPOConfig

    cls = APPOConfig if algo == "appo" else PPOConfig
    return cls().update(env=env, engine="ray", num_cpus=2, seed=seed, **keys)


def throughput_child(algo: str, env: str, warmup: float, seconds: float) -> dict:
    """Env steps/s over ``seconds`` after ``warmup`` seconds, one optimizer step per 800 rows."""
    rows = SHAPE["num_workers"] * SHAPE["num_envs_per_worker"] * SHAPE["rollout_fragment_length"]
    learner = ({"train_batch_size": rows - 100, "num_epochs": 1, "min_time_s_per_iteration": 1.0} if algo == "appo" else
               {"train_batch_size": rows, "minibatch_size": rows, "num_epochs": 1, "min_time_s_per_iteration": 1.0})
    algo_ = volley_config(algo, env, 0, **SHAPE, **learner).build()
    try:
        start = time.time()
        while time.time() - start < warmup:
            algo_.train()
        steps, took, idle, worker_idle = 0, 0.0, [], []
        while took < seconds:
            result = algo_.train()
            steps += result["timesteps_this_iter"]
            took += result["time_this_iter_s"]
            idle.append(result.get("learner_idle_fraction", float("nan")))
            worker_idle.append(result.get("worker_idle_fraction", float("nan")))
    finally:
        algo_.stop()
    return {"steps_per_s": steps / took, "learner_idle": statistics.mean(idle),
            "worker_idle": statistics.mean(worker_idle)}


def volley_time_to(algo: str, task: str, seed: int, max_seconds: float) -> dict:
    env, threshold, max_steps = TASKS[task]
    if algo == "appo":
        from volley.algorithms.impala.appo import CARTPOLE

        keys = CARTPOLE | {"num_workers": 2, "num_envs_per_worker": 8} if task == "cartpole" else {
            **SHAPE, **APPO_PONG_RAM}
    else:
        keys = {"num_workers": 2} if task == "cartpole" else {"num_workers": 2, "num_envs_per_worker": 8,
                                                               **PPO_PONG_RAM}
    algo_ = volley_config(algo, env, seed, **keys).build()
    result: dict[str, Any] = {"episode_reward_mean": float("nan"), "timesteps_total": 0}
    try:
        while (not result["episode_reward_mean"] >= threshold and result["timesteps_total"] < max_steps
               and time.time() - STARTED < max_seconds):
            result = algo_.train()
    finally:
        algo_.stop()
    return {"seconds": time.time() - STARTED, "steps": result["timesteps_total"],
            "reward": result["episode_reward_mean"], "reached": result["episode_reward_mean"] >= threshold}


def make_ale_env(env_config: dict) -> Any:
    """ALE/Pong-ram-v5 in RLlib's env runner process, which has not imported ale_py: ale-py 0.12
    registers no ``-ram`` ids, so the RAM observations are ``ALE/Pong-v5``'s ``obs_type="ram"``
    (the alias volley registers, volley/envs.py), as float32 (RLlib's new stack feeds the bytes to
    its network as they are, and a uint8 matrix cannot meet float weights)."""
    import ale_py
    import gymnasium
    import numpy as np

    gymnasium.register_envs(ale_py)
    return gymnasium.wrappers.DtypeObservation(gymnasium.make("ALE/Pong-v5", obs_type="ram", **env_config),
                                               np.float32)


def rllib_time_to(task: str, seed: int, max_seconds: float) -> dict:
    """RLlib's APPO (new API stack) with tuned_examples/appo/cartpole_appo.py's settings, on 2 env
    runners of 8 environments and a learner in the driver, as volley's."""
    import ray
    from ray.rllib.algorithms.appo import APPOConfig

    env, threshold, max_steps = TASKS[task]
    if task == "pong-ram":  # the env runners are processes of their own: each registers ALE's envs
        from ray.tune.registry import register_env

        register_env(env, make_ale_env)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a stale cluster
    config = (APPOConfig().environment(env, clip_rewards=task == "pong-ram")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=8)
              .learners(num_learners=0).reporting(min_time_s_per_iteration=1.0).debugging(seed=seed))
    if task == "cartpole":
        config = (config.training(train_batch_size_per_learner=1000, vf_loss_coeff=0.05, entropy_coeff=0.01,
                                  num_epochs=2, lr=0.00075, minibatch_size=250)
                  .rl_module(model_config={"fcnet_hiddens": [32]}))
    else:  # volley's Pong-RAM settings, the bytes standardised by RLlib's running filter as volley's are
        from ray.rllib.connectors.env_to_module import MeanStdFilter

        config = config.env_runners(env_to_module_connector=lambda env, spaces=None, device=None: MeanStdFilter())
        config = (config.training(lr=5e-4, train_batch_size_per_learner=800, vf_loss_coeff=0.5,
                                  entropy_coeff=0.01, grad_clip=10.0, clip_param=0.3)
                  .rl_module(model_config={"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}))
    algo = config.build_algo()
    mean, steps = float("nan"), 0
    try:
        while not mean >= threshold and steps < max_steps and time.time() - STARTED < max_seconds:
            result = algo.train()
            recent = result["env_runners"].get("episode_return_mean", float("nan"))
            mean = mean if recent != recent else recent  # nan in an iteration that ended no episode
            steps = result["num_env_steps_sampled_lifetime"]
    finally:
        algo.stop()
        ray.shutdown()
    return {"seconds": time.time() - STARTED, "steps": int(steps), "reward": float(mean), "reached": bool(mean >= threshold)}


# -- the parent: fresh processes, interleaved, one table ----------------------------------------------


def child(args: list[str], python: str = sys.executable) -> dict:
    out = subprocess.run([python, __file__, "child", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"benchmarks/appo.py child {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def throughput(args: argparse.Namespace) -> None:
    print("| env | invocation | APPO env steps/s | PPO env steps/s | APPO / PPO | APPO learner idle | "
          "APPO workers idle |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.envs:
        for invocation in range(1, args.invocations + 1):
            timing = [str(args.warmup), str(args.seconds)]
            appo = child(["throughput", "appo", THROUGHPUT_ENVS[name], *timing])
            ppo = child(["throughput", "ppo", THROUGHPUT_ENVS[name], *timing])
            print(f"| {name} | {invocation} | {appo['steps_per_s']:,.0f} | {ppo['steps_per_s']:,.0f} | "
                  f"{appo['steps_per_s'] / ppo['steps_per_s']:.2f} | {appo['learner_idle']:.3f} | "
                  f"{appo['worker_idle']:.3f} |", flush=True)


def time_to(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict]] = {name: [] for name in args.runs}
    limit = str(args.max_minutes * 60)
    for seed in args.seeds:
        for name in runs:
            python = args.rllib_python if name == "rllib-appo" else sys.executable
            report = child(["time-to", name, args.task, str(seed), limit], python)
            runs[name].append(report)
            print(f"# {name} seed {seed}: {report}", file=sys.stderr, flush=True)
    target = TASKS[args.task][1]
    print(f"| {args.task}: run | seeds reaching {target:g} | median seconds | median env steps | seconds / PPO |")
    print("| --- | --- | --- | --- | --- |")
    ppo = statistics.median(r["seconds"] for r in runs["volley-ppo"]) if "volley-ppo" in runs else float("nan")
    for name, reports in runs.items():
        seconds = statistics.median(r["seconds"] for r in reports)
        every = ", ".join(f"{r['seconds']:.1f}" for r in reports)
        print(f"| {name} | {sum(r['reached'] for r in reports)}/{len(reports)} | {seconds:.1f} ({every}) | "
              f"{statistics.median(r['steps'] for r in reports):,.0f} | {seconds / ppo:.2f} |")


def run_child(argv: list[str]) -> dict:
    kind, *rest = argv
    if kind == "throughput":
        algo, env, warmup, seconds = rest
        return throughput_child(algo, env, float(warmup), float(seconds))
    name, task, seed, max_seconds = rest
    if name == "rllib-appo":
        return rllib_time_to(task, int(seed), float(max_seconds))
    return volley_time_to(name.removeprefix("volley-"), task, int(seed), float(max_seconds))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        print(json.dumps(run_child(sys.argv[2:])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    speed = sub.add_parser("throughput", help="env steps/s of APPO and synchronous PPO")
    speed.add_argument("--envs", nargs="+", choices=list(THROUGHPUT_ENVS), default=list(THROUGHPUT_ENVS))
    speed.add_argument("--invocations", type=int, default=3)
    speed.add_argument("--warmup", type=float, default=5.0)
    speed.add_argument("--seconds", type=float, default=20.0)
    to = sub.add_parser("time-to", help="time to a return: APPO, PPO, RLlib's APPO")
    to.add_argument("--task", choices=list(TASKS), default="cartpole")
    to.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    to.add_argument("--runs", nargs="+", default=["volley-appo", "volley-ppo", "rllib-appo"],
                    choices=["volley-appo", "volley-ppo", "rllib-appo"])
    to.add_argument("--max-minutes", type=float, default=10.0, help="a run's time limit")
    to.add_argument("--rllib-python", default=RLLIB_PYTHON, help="the side venv's interpreter (ray[rllib])")
    args = parser.parse_args()
    throughput(args) if args.mode == "throughput" else time_to(args)


if __name__ == "__main__":
    main()
