"""What the classic-recipe examples share: a running reward per batch, checkpoints, --resume."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from volley import Algorithm


def add_run_flags(parser: argparse.ArgumentParser, default_dir: str) -> None:
    """Flags every recipe takes: how long, how many workers, where to checkpoint."""
    parser.add_argument("--batches", type=int, default=3, help="updates to run (default: 3)")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (0: in-process)")
    parser.add_argument("--dir", type=Path, default=Path(default_dir), help="checkpoint directory")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --dir")


def run(args: argparse.Namespace, build: Callable[[dict], Algorithm]) -> None:
    """Train ``args.batches`` updates, printing the running reward (0.99·running + 0.01·episode,
    as Karpathy's script does) and checkpointing every 10 batches and at the end."""
    checkpoint, state_file = args.dir / "checkpoint", args.dir / "running_reward.json"
    workers = {"num_workers": args.workers, "engine": "ray" if args.workers else "local"}
    if args.resume:
        algo = Algorithm.from_checkpoint(checkpoint, **workers)
        running_reward = json.loads(state_file.read_text())["running_reward"]
    else:
        algo, running_reward = build(workers), None

    def save() -> None:
        algo.save(checkpoint)
        state_file.write_text(json.dumps({"running_reward": running_reward}))
        print(f"checkpoint: {checkpoint}", flush=True)

    try:
        for _ in range(args.batches):
            result = algo.train()
            for episode_return in result["episode_returns_this_iter"]:
                running_reward = (episode_return if running_reward is None
                                  else 0.99 * running_reward + 0.01 * episode_return)
            shown = "-" if running_reward is None else f"{running_reward:.2f}"
            print(f"batch {result['training_iteration']}: {result['episodes_this_iter']} episodes, "
                  f"{result['timesteps_total']} steps, running reward {shown}", flush=True)
            if result["training_iteration"] % 10 == 0:
                save()
        save()
    finally:
        algo.stop()
