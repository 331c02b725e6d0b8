"""Karpathy's "Pong from Pixels" policy gradient, with the episodes played by Ray workers.

The recipe: 80x80 frame differences, one hidden layer of 200 ReLUs, two actions
(up, down), the discounted return restarted at every point scored, returns
standardised over a batch of 10 episodes, RMSProp (lr 1e-4, decay 0.99). Each batch
prints the running reward (0.99·running + 0.01·episode, as Karpathy's script does);
a checkpoint is written every 10 batches and ``--resume`` continues from it.

    python examples/pg_pong.py                      # a short run (3 batches)
    python examples/pg_pong.py --batches 10000 --workers 8 --mode gradients   # the real thing
    python examples/pg_pong.py --resume             # carry on from runs/pg_pong
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from volley import Algorithm, PGConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=3, help="updates to run (default: 3)")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (0: in-process)")
    parser.add_argument("--envs-per-worker", type=int, default=1)
    parser.add_argument("--batch-episodes", type=int, default=10)
    parser.add_argument("--mode", choices=["samples", "gradients"], default="samples")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--dir", type=Path, default=Path("runs/pg_pong"), help="checkpoint directory")
    parser.add_argument("--resume", action="store_true", help="continue from --dir")
    args = parser.parse_args()

    checkpoint, state_file = args.dir / "checkpoint", args.dir / "running_reward.json"
    workers = {"num_workers": args.workers, "engine": "ray" if args.workers else "local"}
    if args.resume:
        algo = Algorithm.from_checkpoint(checkpoint, **workers)
        running_reward = json.loads(state_file.read_text())["running_reward"]
    else:
        algo = (PGConfig()
                .environment("ALE/Pong-v5", atari_preprocessing="karpathy")
                .rollouts(num_envs_per_worker=args.envs_per_worker)
                .update(**workers)
                .training(lr=args.lr, decay_rate=0.99, gamma=0.99, batch_episodes=args.batch_episodes,
                          reset_return_on_reward=True, mode=args.mode,
                          model={"fcnet_hiddens": [200], "fcnet_activation": "relu"})
                .build())
        running_reward = None
    try:
        for _ in range(args.batches):
            result = algo.train()
            for episode_return in result["episode_returns_this_iter"]:
                running_reward = (episode_return if running_reward is None
                                  else 0.99 * running_reward + 0.01 * episode_return)
            print(f"batch {result['training_iteration']}: {result['episodes_this_iter']} episodes, "
                  f"{result['timesteps_total']} steps, running reward {running_reward:.2f}", flush=True)
            if result["training_iteration"] % 10 == 0:
                save(algo, checkpoint, state_file, running_reward)
        save(algo, checkpoint, state_file, running_reward)
    finally:
        algo.stop()


def save(algo: Algorithm, checkpoint: Path, state_file: Path, running_reward: float | None) -> None:
    algo.save(checkpoint)
    state_file.write_text(json.dumps({"running_reward": running_reward}))
    print(f"checkpoint: {checkpoint}")


if __name__ == "__main__":
    main()
