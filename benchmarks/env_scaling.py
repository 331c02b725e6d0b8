"""The environment alone in 1, 2, ... processes at once: the ceiling of that many rollout workers.

Each process steps its own copy of the environment with random actions (no policy, no
volley) for ``--seconds``; the table gives the summed steps per second and its ratio to one
process, interleaved over ``--repeats``. No sampler can scale better than this on the same
machine, so a ``volley bench speedup`` figure is read against it: with the learner's share
of an iteration (serial sample s ``S``, learn s ``L``, the speedup table's columns), ``k``
workers are bounded by ``(S + L) / (S / r_k + L)``, ``r_k`` this script's ratio.

    python benchmarks/env_scaling.py ALE/Pong-ram-v5 --processes 1 2 --seconds 10 --repeats 3
"""

from __future__ import annotations

import argparse
import multiprocessing


def steps_per_second(env_id: str, seed: int, seconds: float, queue: multiprocessing.Queue) -> None:
    from volley.bench import raw_env_rate

    queue.put(raw_env_rate(env_id, 1, seconds, seed))


def together(env_id: str, processes: int, seconds: float) -> float:
    """Summed steps per second of ``processes`` copies stepping at the same time."""
    queue: multiprocessing.Queue = multiprocessing.Queue()
    children = [multiprocessing.Process(target=steps_per_second, args=(env_id, i, seconds, queue))
                for i in range(processes)]
    for child in children:
        child.start()
    rates = [queue.get() for _ in children]
    for child in children:
        child.join()
    return sum(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates: dict[int, list[float]] = {n: [] for n in args.processes}
    for _ in range(args.repeats):
        for n in args.processes:
            rates[n].append(together(args.env, n, args.seconds))
    # imported after the measurements, so the children fork a process that has not imported torch
    from volley.bench import rates_table

    print(rates_table(rates, "processes"))


if __name__ == "__main__":
    main()
