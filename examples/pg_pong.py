"""Karpathy's "Pong from Pixels" policy gradient, with the episodes played by Ray workers.

The recipe: 80x80 frame differences, one hidden layer of 200 ReLUs with weights drawn
from N(0, 1/fan_in), two actions (up, down), the discounted return restarted at every
point scored and standardised per episode, the gradient summed over a batch of 10
episodes, RMSProp (lr 1e-4, decay 0.99, eps 1e-5); on the game the post trained on,
gym's Pong-v0 of 2016 (each action repeated 2 to 4 frames at random, no sticky
actions). Each batch prints the running reward; a checkpoint is written every 10
batches and ``--resume`` continues from it.

    python examples/pg_pong.py                      # a short run (3 batches)
    python examples/pg_pong.py --batches 10000 --workers 8 --mode gradients   # the real thing
    python examples/pg_pong.py --resume             # carry on from runs/pg_pong
"""

from __future__ import annotations

import argparse

from recipe import add_run_flags, run

from volley import PGConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_flags(parser, "runs/pg_pong")
    parser.add_argument("--batch-episodes", type=int, default=10)
    parser.add_argument("--mode", choices=["samples", "gradients"], default="samples")
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    run(args, lambda workers: (
        PGConfig()
        .environment("ALE/Pong-v5", atari_preprocessing="karpathy",
                     env_config={"frameskip": [2, 5], "repeat_action_probability": 0.0})
        .rollouts(num_envs_per_worker=1)
        .training(lr=args.lr, decay_rate=0.99, gamma=0.99, batch_episodes=args.batch_episodes,
                  reset_return_on_reward=True, standardize_over="episode", mode=args.mode,
                  model={"fcnet_hiddens": [200], "fcnet_activation": "relu", "fcnet_init": "normal"})
        .update(**workers)
        .build()))


if __name__ == "__main__":
    main()
