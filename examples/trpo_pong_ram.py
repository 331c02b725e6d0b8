"""TRPO on Pong's 128-byte RAM with parallel rollouts, as modular_rl ran it on Ray.

The recipe: observations normalised by a running mean/std filter (merged across
workers every iteration), whole episodes per batch, GAE (gamma 0.99, lambda 0.97),
a natural-gradient step inside a KL trust region of 0.01, and a separately trained
value network. Each batch prints the running reward; a checkpoint is written every
10 batches and ``--resume`` continues from it.

    python examples/trpo_pong_ram.py                          # a short run (3 batches)
    python examples/trpo_pong_ram.py --batches 500 --workers 8 --batch-steps 40000
    python examples/trpo_pong_ram.py --resume                 # carry on from runs/trpo_pong_ram
"""

from __future__ import annotations

import argparse

from recipe import add_run_flags, run

from volley.algorithms.trpo import TRPOConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_flags(parser, "runs/trpo_pong_ram")
    parser.add_argument("--batch-steps", type=int, default=10_000, help="env steps per batch")
    parser.add_argument("--max-kl", type=float, default=0.01)
    args = parser.parse_args()
    run(args, lambda workers: (
        TRPOConfig()
        .environment("ALE/Pong-ram-v5", observation_filter="MeanStdFilter")
        .rollouts(num_envs_per_worker=1, batch_mode="complete_episodes")
        .training(train_batch_size=args.batch_steps, max_kl=args.max_kl, gamma=0.99, gae_lambda=0.97,
                  model={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
        .update(**workers)
        .build()))


if __name__ == "__main__":
    main()
