"""Time-to-475 on CartPole-v1: volley (local and Ray engines) against Stable-Baselines3 PPO.

Each run is a fresh Python process, so start-up (imports, Ray's cluster) counts. A run
ends when the mean return of the last 100 episodes reaches 475 (the same window in
both libraries: SB3's ep_info_buffer holds 100 episodes). SB3 uses rl-zoo's tuned
CartPole-v1 hyperparameters; volley uses its defaults, as ``volley train`` does.

    python benchmarks/cartpole_ppo.py --seeds 0 1 2          # prints a markdown table
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

THRESHOLD = 475.0


def run_volley(engine: str, seed: int) -> dict:
    from volley import PPOConfig

    config = PPOConfig().environment("CartPole-v1").resources(engine=engine).debugging(seed=seed)
    if engine == "ray":
        config.resources(num_cpus=2)
    algo = config.build()
    result = {"episode_reward_mean": float("nan"), "timesteps_total": 0}
    while not result["episode_reward_mean"] >= THRESHOLD and result["timesteps_total"] < 500_000:
        result = algo.train()
    reached = time.time()
    algo.stop()
    return {"reached_at": reached, "steps": result["timesteps_total"],
            "reward": result["episode_reward_mean"]}


def run_sb3(seed: int) -> dict:
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class StopAt475(BaseCallback):
        def _on_step(self) -> bool:
            buffer = self.model.ep_info_buffer
            return not (buffer is not None and len(buffer) > 0
                        and np.mean([e["r"] for e in buffer]) >= THRESHOLD)

    def linear(start: float):
        return lambda progress: progress * start

    # rl-zoo hyperparams/ppo.yml, CartPole-v1
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                n_epochs=20, ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2),
                seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=100_000, callback=StopAt475())
    reached = time.time()
    rewards = [e["r"] for e in model.ep_info_buffer]
    return {"reached_at": reached, "steps": model.num_timesteps, "reward": float(np.mean(rewards))}


RUNNERS = {"volley-local": lambda s: run_volley("local", s), "volley-ray": lambda s: run_volley("ray", s),
           "sb3": run_sb3}


def measure(name: str, seed: int) -> dict:
    start = time.time()
    out = subprocess.run([sys.executable, __file__, "--child", name, "--seeds", str(seed)],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["time_to_475"] = report.pop("reached_at") - start
    report["reached"] = report["reward"] >= THRESHOLD
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--child", choices=list(RUNNERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(RUNNERS[args.child](args.seeds[0])))
        return
    rows: dict[str, list[dict]] = {name: [] for name in RUNNERS}
    for seed in args.seeds:  # interleaved, so drift on a noisy machine hits every library alike
        for name in RUNNERS:
            report = measure(name, seed)
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


if __name__ == "__main__":
    main()
