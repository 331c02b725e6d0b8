"""One SAC gradient step (actor, both critics, temperature, Polyak targets), volley against
Stable-Baselines3, on the same minibatch size and networks.

Both learners are built for the task (volley's preset, SB3 with rl-zoo's settings: 256x256
ReLU networks, minibatches of 256), their buffers filled with the same number of random
steps, and then timed in interleaved blocks (volley, SB3, volley, ...) of ``--steps`` gradient
steps each, one torch thread each, so that drift on a shared machine hits both alike. The
table gives the median milliseconds per gradient step (wall and CPU time) and their ratio.
With ``--profile`` it also prints where volley's step spends its time (torch's profiler, the
ten most expensive operators), and the floor its matrix products alone set: the same GEMMs,
back to back, with nothing else.

    python benchmarks/sac_update.py                            # HalfCheetah-v5 and Pendulum-v1
    python benchmarks/sac_update.py --env HalfCheetah-v5 --profile
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

PRESETS = {"HalfCheetah-v5": "sac-halfcheetah", "Pendulum-v1": "sac-pendulum"}


def volley_learner(env: str, batch_size: int) -> Callable[[int], None]:
    from volley.presets import load_preset

    config = load_preset(PRESETS[env]).make_config({"learning_starts": 0, "train_batch_size": batch_size})
    algo = config.build()
    for _ in range(1000):
        algo.replay.add(algo.sample())

    def steps(n: int) -> None:
        for _ in range(n):
            algo.update(algo.replay.sample(batch_size))
            algo.update_target()
    steps.algo = algo  # type: ignore[attr-defined]
    return steps


def sb3_learner(env: str, batch_size: int) -> Callable[[int], None]:
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", env, batch_size=batch_size, learning_starts=1000, device="cpu", verbose=0, seed=0)
    model.learn(1000)  # random steps into its buffer, no update yet

    def steps(n: int) -> None:
        model.train(gradient_steps=n, batch_size=batch_size)
    return steps


def gemm_floor(algo: object, batch_size: int) -> float:
    """Milliseconds of the matrix products one volley step makes, back to back: the forward passes
    (the actor on s and s', the critics on (s', a'), (s, a) and (s, ã)) and the backward ones
    (the actor's weights and activations; the critics' weights and activations on (s, a); the
    activations alone on (s, ã), whose critic weights are frozen)."""
    actor = [p.shape for p in algo.policy.actor_parameters() if p.dim() == 2]  # type: ignore[attr-defined]
    critic = [w.shape[1:] for w in algo.critics.weights]  # type: ignore[attr-defined]
    k = algo.critics.k  # type: ignore[attr-defined]
    shapes = []
    for _ in range(2):  # the actor's forward passes: weights are [out, in]
        shapes += [(batch_size, n_in, n_out) for n_out, n_in in actor]
    for _ in range(3 * k):
        shapes += [(batch_size, n_in, n_out) for n_in, n_out in critic]
    shapes += [(n_in, batch_size, n_out) for n_out, n_in in actor]  # actor: weight gradients
    shapes += [(batch_size, n_out, n_in) for n_out, n_in in actor[1:]]  # and activation gradients
    for _ in range(k):
        shapes += [(n_in, batch_size, n_out) for n_in, n_out in critic]  # critics on (s, a)
        shapes += [(batch_size, n_out, n_in) for n_in, n_out in critic[1:]]
        shapes += [(batch_size, n_out, n_in) for n_in, n_out in critic]  # frozen, on (s, ã)
    mats = [(torch.randn(m, n), torch.randn(n, o)) for m, n, o in shapes]
    start = time.perf_counter()
    for _ in range(20):
        for a, b in mats:
            a @ b
    return (time.perf_counter() - start) / 20 * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50, help="gradient steps per timed block")
    parser.add_argument("--blocks", type=int, default=8, help="timed blocks per library")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| task | volley ms/step (wall) | SB3 ms/step (wall) | wall volley / SB3 | volley ms/step (CPU) | "
          "SB3 ms/step (CPU) | CPU volley / SB3 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for env in args.env:
        learners = {"volley": volley_learner(env, args.batch_size), "sb3": sb3_learner(env, args.batch_size)}
        for steps in learners.values():
            steps(10)  # warm-up: allocations, optimizer state
        wall: dict[str, list[float]] = {name: [] for name in learners}
        cpu: dict[str, list[float]] = {name: [] for name in learners}
        for _ in range(args.blocks):
            for name, steps in learners.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                steps(args.steps)
                wall[name].append((time.perf_counter() - start) / args.steps * 1e3)
                cpu[name].append((time.process_time() - start_cpu) / args.steps * 1e3)
        w = {name: statistics.median(v) for name, v in wall.items()}
        c = {name: statistics.median(v) for name, v in cpu.items()}
        print(f"| {env} | {w['volley']:.2f} | {w['sb3']:.2f} | {w['volley'] / w['sb3']:.2f} | {c['volley']:.2f} | "
              f"{c['sb3']:.2f} | {c['volley'] / c['sb3']:.2f} |", flush=True)
        if args.profile:
            algo = learners["volley"].algo  # type: ignore[attr-defined]
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                learners["volley"](20)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
            print(f"{env}: the matrix products alone: {gemm_floor(algo, args.batch_size):.2f} ms a step "
                  f"(volley's step: {w['volley']:.2f})\n")
        np.random.seed(0)


if __name__ == "__main__":
    main()
