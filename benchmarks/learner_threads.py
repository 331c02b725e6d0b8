"""The learner's torch threads: one PPO update timed with 1 and 2 threads, idle and loaded.

volley's default (``num_cpus_for_driver=None``) gives an MLP learner one thread and a CNN
learner the cores no worker uses while it learns. This script is the measurement behind
that choice: the same update on the same batch with each thread count, on an idle machine
and beside one busy process (a worker stepping environments, or anything else, holding a
core).

    python benchmarks/learner_threads.py          # prints a markdown table
"""

from __future__ import annotations

import multiprocessing
import statistics
import time

import torch

from volley import PPOConfig

SETUPS = {
    # CartPole with volley's defaults: 2048 rows, minibatches of 512, 10 epochs
    "MLP 64x64 (CartPole, 2048 rows x 10 epochs)": PPOConfig().environment("CartPole-v1"),
    # Pong pixels with DeepMind preprocessing and the Nature CNN: 1024 rows, minibatches of 256, 4 epochs
    "CNN (Pong 84x84x4, 1024 rows x 4 epochs)": PPOConfig().environment("ALE/Pong-v5").update(
        num_envs_per_worker=8, train_batch_size=1024, minibatch_size=256, num_epochs=4),
}
REPEATS = 3


def spin() -> None:
    while True:
        pass


def update_seconds(config: PPOConfig, threads: int) -> float:
    """Median wall time of one ``PPO.update`` on one sampled batch, with ``threads`` torch threads."""
    algo = config.copy(copy_frozen=False).resources(engine="local", num_cpus_for_driver=threads).debugging(
        seed=0).build()
    try:
        batch = algo.sample()
        algo.update(batch)  # warm-up: allocator, kernels
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            algo.update(batch)
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        algo.stop()


def main() -> None:
    rows = []
    for name, config in SETUPS.items():
        for load in ("idle", "one busy process"):
            hog = multiprocessing.Process(target=spin, daemon=True) if load != "idle" else None
            if hog is not None:
                hog.start()
            try:
                one, two = (update_seconds(config, n) for n in (1, 2))
            finally:
                if hog is not None:
                    hog.terminate()
                    hog.join()
            rows.append(f"| {name} | {load} | {one:.3f} | {two:.3f} | {one / two:.2f} |")
    print("| learner | machine | 1 thread (s) | 2 threads (s) | 1 thread / 2 threads |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print(f"\n(torch {torch.__version__}, median of {REPEATS} updates each)")


if __name__ == "__main__":
    main()
