"""PPO on MuJoCo's Humanoid-v5 with MPI batch gathering, the way mpi4py RL codes run on clusters.

Every rank steps its own environments (seeded ``seed + global env index``); rank 0
gathers the batches (``Gatherv``), updates, and broadcasts the new weights (``Bcast``).
Observations pass through a running mean/std filter whose statistics are merged over
the ranks every iteration. Every rank builds the algorithm; rank 0 trains and prints,
the others serve it (``algo.serve_forever()``) until it stops.

    mpiexec -n 2 python examples/ppo_humanoid_mpi.py               # a short run (3 iterations)
    python examples/ppo_humanoid_mpi.py --nprocs 4 --iters 1000    # starts mpiexec itself
    python examples/ppo_humanoid_mpi.py --mode allreduce           # average gradients instead

The same run from the command line:

    volley train --engine mpi --nprocs 2 --algo ppo --env Humanoid-v5 \\
        --set observation_filter=MeanStdFilter --set gamma=0.99 --set gae_lambda=0.95 --set lr=3e-4
"""

from __future__ import annotations

import argparse
import sys

from volley import PPOConfig
from volley.engines.mpi_engine import install_rank_hooks, run_under_mpiexec, world_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=3, help="training iterations (default: 3)")
    parser.add_argument("--nprocs", type=int, help="start this many ranks under mpiexec")
    parser.add_argument("--mode", choices=["gather", "allreduce"], default="gather")
    parser.add_argument("--envs-per-rank", type=int, default=4)
    parser.add_argument("--batch-steps", type=int, default=4096, help="env steps per iteration, all ranks")
    args = parser.parse_args()
    if args.nprocs is not None and world_size() == 1:
        rest = [a for i, a in enumerate(sys.argv[1:]) if a != "--nprocs" and sys.argv[i] != "--nprocs"]
        raise SystemExit(run_under_mpiexec(args.nprocs, [sys.executable, __file__, *rest]))

    install_rank_hooks()  # an error on any rank ends the whole job, naming the rank
    config = (PPOConfig()
              .environment("Humanoid-v5", observation_filter="MeanStdFilter")
              .resources(engine="mpi", mpi_mode=args.mode)
              .rollouts(num_envs_per_worker=args.envs_per_rank)
              .training(train_batch_size=args.batch_steps, minibatch_size=512, num_epochs=10, lr=3e-4,
                        gamma=0.99, gae_lambda=0.95, model={"fcnet_hiddens": [256, 256]}))
    with config.build() as algo:  # stop() at the end (on rank 0: releases the other ranks)
        if not algo.is_driver:
            algo.serve_forever()  # ranks other than 0: serve rank 0 until it stops
            return
        for _ in range(args.iters):
            result = algo.train()
            print(f"iteration {result['training_iteration']}: {result['timesteps_total']} steps "
                  f"over {result['num_workers']} ranks, mean return {result['episode_reward_mean']:.1f}, "
                  f"{result['env_steps_per_s']:.0f} env steps/s", flush=True)


if __name__ == "__main__":
    main()
