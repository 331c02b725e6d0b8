"""Ape-X DQN on CartPole-v1: a parameter server, replay actors, acting workers and a learner.

The layout of Horgan et al. (2018) on Ray: acting workers step their environments
with their own ε (ε_i = ε^(1 + 7·i/(N−1)), the base ε decaying from 1 to 0 here),
push n-step transitions to the replay actors, and fetch weights from the parameter
server every 128 steps (waiting when more than 1000 steps ahead of the learner); the
learner (this process) trains on prefetched minibatches. Each iteration prints one
line; the run stops when the mean return of the last 100 episodes reaches
``--stop-reward``.

    python examples/dqn_cartpole_async.py                  # 2 workers, 1 replay actor, to 475
    python examples/dqn_cartpole_async.py --workers 4 --shards 2 --iters 1000
    python examples/dqn_cartpole_async.py --iters 2        # a quick look
"""

from __future__ import annotations

import argparse

import torch

from volley import ApexDQNConfig
from volley.algorithms.dqn.apex import CARTPOLE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="acting workers (default: 2)")
    parser.add_argument("--shards", type=int, default=1, help="replay actors (default: 1)")
    parser.add_argument("--iters", type=int, default=300, help="most iterations, ~1 s each (default: 300)")
    parser.add_argument("--stop-reward", type=float, default=475.0, help="stop at this mean return")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # The learner shares the machine with the workers: one torch thread keeps it from stalling
    # on a busy core (its minibatches of 64 are too small to split anyway).
    torch.set_num_threads(1)
    algo = (ApexDQNConfig().environment("CartPole-v1")
            .rollouts(num_workers=args.workers)
            .resources(num_cpus=args.workers)
            .training(num_replay_shards=args.shards, **CARTPOLE)
            .debugging(seed=args.seed)
            .build())
    try:
        for _ in range(args.iters):
            r = algo.train()
            print(f"iteration {r['training_iteration']}: return {r['episode_reward_mean']:.1f} over "
                  f"{r['episodes_total']} episodes, {r['timesteps_total']} steps, "
                  f"{r['learner_updates']} learner updates, replay {r['replay_size']}, "
                  f"weight lag {r['weight_version_lag']:.1f}, {r['sample_throughput']:.0f} steps/s, "
                  f"{r['train_throughput']:.0f} trained/s, {r['num_worker_restarts']} restarts", flush=True)
            if r["episode_reward_mean"] >= args.stop_reward:
                print(f"reached {args.stop_reward:g} after {r['time_total_s']:.0f} s", flush=True)
                break
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
