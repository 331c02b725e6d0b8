"""``volley bench speedup`` and ``volley bench sampler``: what parallel workers and the sampler buy.

``speedup``: the same first iterations with 0, 1, 2, ... workers, side by side.

Every worker count starts from the same config and seed and runs the same number of
iterations; the clock covers the iterations only (building the algorithm, Ray's
start-up and ``mpiexec``'s are outside it). ``warmup`` iterations run first, untimed:
the first iteration of a fresh worker pays one-off costs (torch's lazy initialisation,
the first object-store transfers) that say nothing about steady-state throughput.
Speedup is the serial (``workers=0``, in-process) wall time over this row's; parallel
efficiency divides the speedup by the number of workers. Each row also splits its wall
time into sampling and learning (the iterations' ``sample_time_s`` and ``learn_time_s``):
workers share only the sampling, so the learner's share bounds the speedup (Amdahl).

Ray rows run in this process; MPI rows (``mpi_ranks``) each start ``mpiexec -n R``
running this module, whose rank 0 prints its measurement as one JSON line.

``sampler``: for each environment, how fast it steps on its own (random actions, no
policy), how fast the policy's forward pass alone runs on the same number of
observations, and how fast one rollout worker samples with both (PPO's sampling:
filters, bookkeeping and GAE included), so the ratios show what volley costs beyond the
environment and the network.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from volley.algorithms import get_config_class
from volley.errors import VolleyError
from volley.logging import ProgressBar


@dataclass
class SpeedupRow:
    """One engine and worker count's measurement."""

    engine: str
    workers: int
    wall_s: float
    env_steps: int
    sample_s: float  # of wall_s: the iterations' sampling (workers stepping, batches gathered)
    learn_s: float  # of wall_s: the learner's updates
    speedup: float = 1.0

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.wall_s

    @property
    def efficiency(self) -> float:
        return self.speedup / max(1, self.workers)


def measure(algo: str, env: str, iterations: int, engine: str, workers: int, overrides: dict[str, Any],
            warmup: int = 0, progress: ProgressBar | None = None) -> SpeedupRow:
    """Build on ``engine`` with ``workers`` workers, run ``warmup`` then ``iterations``, time the latter
    (``progress`` advances by one each iteration, outside the clock: drawing the bar is not the run's)."""
    config = get_config_class(algo)().environment(env).update(**overrides)
    config.update(engine=engine, **({} if engine == "mpi" else {"num_workers": workers}))
    instance = config.build()
    try:
        for _ in range(warmup):
            instance.train()
            _advance(progress)
        results, wall = [], 0.0
        for _ in range(iterations):
            start = time.perf_counter()
            results.append(instance.train())
            wall += time.perf_counter() - start
            _advance(progress)
    finally:
        instance.stop()
    return SpeedupRow(engine, instance.workers.plan.num_workers, wall,
                      sum(r["timesteps_this_iter"] for r in results),
                      sum(r["sample_time_s"] for r in results), sum(r["learn_time_s"] for r in results))


def _advance(progress: ProgressBar | None, units: float = 1.0) -> None:
    if progress is not None:
        progress.advance(units)


def measure_mpi(algo: str, env: str, iterations: int, ranks: int, overrides: dict[str, Any],
                warmup: int = 0) -> SpeedupRow:
    """The same measurement on the MPI engine, under ``mpiexec -n ranks``."""
    from volley.engines.mpi_engine import mpiexec_path

    job = json.dumps({"algo": algo, "env": env, "iterations": iterations, "overrides": overrides,
                      "warmup": warmup})
    out = subprocess.run([mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "volley.bench", job],
                         capture_output=True, text=True)
    rows = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not rows:
        raise VolleyError(f"the {ranks}-rank MPI run failed: {out.stderr.strip()[-500:]}")
    return SpeedupRow(**json.loads(rows[-1]))


def speedup(algo: str, env: str, iterations: int, worker_counts: list[int],
            overrides: dict[str, Any], num_cpus: int | None = None, warmup: int = 0,
            mpi_ranks: list[int] | None = None, progress: ProgressBar | None = None) -> list[SpeedupRow]:
    """Measure every worker count (one Ray cluster serves them all), then every MPI rank count;
    ``progress`` advances by one per iteration, warm-up included (an MPI row's all at its end)."""
    uses_ray = any(worker_counts)  # local and MPI rows run without Ray (a machine may lack it)
    if uses_ray:
        from volley.engines import ray_boot
        from volley.engines.ray_engine import shutdown_ray

        # started and stopped as the Ray engine does it (without Ray's one-second naps)
        ray_boot.init(ray_boot.cluster_kwargs(None, num_cpus, "WARNING"))
    try:
        rows = [measure(algo, env, iterations, "local" if n == 0 else "ray", n, overrides, warmup, progress)
                for n in worker_counts]
    finally:
        if uses_ray:
            shutdown_ray()
    for n in mpi_ranks or []:
        rows.append(measure_mpi(algo, env, iterations, n, overrides, warmup))
        _advance(progress, warmup + iterations)
    serial = next((row.wall_s for row in rows if row.workers == 0), rows[0].wall_s)
    for row in rows:
        row.speedup = serial / row.wall_s
    return rows


def table(rows: list[SpeedupRow]) -> str:
    """The rows as a markdown table."""
    lines = ["| engine | workers | wall s | sample s | learn s | env steps | env steps/s | speedup | efficiency |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.engine} | {r.workers} | {r.wall_s:.2f} | {r.sample_s:.2f} | {r.learn_s:.2f} | {r.env_steps} | "
              f"{r.env_steps_per_s:.0f} | {r.speedup:.2f} | {r.efficiency:.2f} |" for r in rows]
    return "\n".join(lines)


# (environment, envs per worker, config keys): the sampler benchmark's cases
SAMPLER_CASES: list[tuple[str, int, dict[str, Any]]] = [
    ("CartPole-v1", 16, {}),
    ("ALE/Pong-ram-v5", 1, {"observation_filter": "MeanStdFilter"}),
    ("ALE/Pong-v5", 1, {}),
    ("HalfCheetah-v5", 1, {"observation_filter": "MeanStdFilter"}),
    ("Humanoid-v5", 1, {"observation_filter": "MeanStdFilter"}),
]


@dataclass
class SamplerRow:
    """Steps per second of one environment: alone, the policy's forward alone, and volley's sampler."""

    env: str
    num_envs: int
    raw: float
    forward: float
    volley: float

    @property
    def floor(self) -> float:
        """Steps/s if stepping and the forward pass were all there is: ``1 / (1/raw + 1/forward)``."""
        return 1 / (1 / self.raw + 1 / self.forward)


def rate(step: Any, steps_per_call: int, seconds: float) -> float:
    """Calls ``step()`` for about ``seconds`` (after one untimed call); steps per second."""
    step()
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step()
        calls += 1
    return calls * steps_per_call / elapsed


# the policies the sampler benchmark compares, beside volley's MLP (64x64 tanh, separate policy and
# value bodies, acting in numpy): RLlib's FullyConnectedNetwork given as a custom model (the same
# layers, traced into numpy: volley.traced), and an LSTM of 64 cells on each body (acting in numpy, storing a state
# at each sequence start)
VARIANTS = {"custom model": {"custom_model": "volley.modelv2:FullyConnectedNetwork"},
            "LSTM 64": {"use_lstm": True, "lstm_cell_size": 64}}


def sampling_worker(env: str, num_envs: int, overrides: dict[str, Any],
                    variant: str = "") -> tuple[Any, Any, int]:
    """A PPO rollout worker as a Ray worker has it, the learner's weights, and the steps of one
    ``worker.sample(weights, None)``; torch on one thread, as in every worker. ``variant``: one of
    :data:`VARIANTS` in place of volley's MLP."""
    import torch

    from volley.algorithms.ppo import PPO, PPOConfig
    from volley.catalog import build_network
    from volley.rollout.worker import RolloutWorker

    torch.set_num_threads(1)
    config = PPOConfig().environment(env).rollouts(num_envs_per_worker=num_envs).update(
        train_batch_size=2048, **overrides)
    if variant:
        config.training(model=VARIANTS[variant])
    plan = config.plan(num_workers=1)
    worker = RolloutWorker(config, 0, PPO.postprocess, plan=plan)
    # the learner's weights, built apart: the worker acts as a Ray worker does (an MLP in numpy,
    # its torch network never built)
    weights = build_network(worker.network_spec).get_flat_weights()
    return worker, weights, plan.fragment_length * num_envs


def measure_samplers(env: str, num_envs: int, overrides: dict[str, Any], seconds: float = 5.0,
                     variants: Sequence[str] = (), rounds: int = 1,
                     progress: ProgressBar | None = None) -> list[SamplerRow]:
    """A :class:`SamplerRow` for volley's MLP, then one for each of ``variants`` (see
    :func:`sampling_worker`); each part runs for about ``seconds`` with torch on one thread. The
    rows' sampling rates are measured in turns, ``rounds`` times each (in reverse order every
    other round), and each row keeps its median: the rows of one environment see a busy
    machine's swings alike. ``progress`` advances by one per timed part (:func:`sampler_parts`)."""
    names = ["", *variants]
    workers = [sampling_worker(env, num_envs, overrides, variant) for variant in names]
    volley: list[list[float]] = [[] for _ in names]
    for turn in range(rounds):
        pairs = list(zip(volley, workers, strict=True))
        for rates, (worker, weights, steps) in pairs if turn % 2 == 0 else pairs[::-1]:  # each goes first in turn
            rates.append(rate(lambda w=worker, x=weights: w.sample(x, None), steps, seconds))
            _advance(progress)
    rows = []
    for variant, rates, (worker, _, _) in zip(names, volley, workers, strict=True):
        assert worker.observations is not None
        obs = worker.obs_filter(worker.observations, update=False)
        forward = rate(lambda w=worker, o=obs: w.act(o, True), num_envs, seconds)
        worker.env.close()
        raw = raw_env_rate(env, num_envs, seconds)
        _advance(progress, 2)
        rows.append(SamplerRow(f"{env} ({variant})" if variant else env, num_envs, raw, forward,
                               statistics.median(rates)))
    return rows


def sampler_parts(variants: Sequence[str], rounds: int) -> int:
    """The timed parts of :func:`measure_samplers`: each policy's sampling per round, then its forward
    pass and the raw environment."""
    return (1 + len(variants)) * (rounds + 2)


def raw_env_rate(env: str, num_envs: int, seconds: float, seed: int = 0) -> float:
    """The environment alone, random actions and no policy: steps per second (several copies, or
    pixel Atari, through the vector env volley would use)."""
    import gymnasium as gym

    from volley.envs import check_env_id, make_vector_env

    check_env_id(env)  # registers ale-py's ids
    if num_envs > 1 or env.startswith("ALE/") and "-ram" not in env:  # a vector of its own
        vec = make_vector_env(env, num_envs)
        vec_actions = itertools.cycle([vec.action_space.sample() for _ in range(64)])
        vec.reset(seed=seed)
        try:
            return rate(lambda: vec.step(next(vec_actions)), num_envs, seconds)
        finally:
            vec.close()
    single = gym.make(env)
    actions = itertools.cycle([single.action_space.sample() for _ in range(64)])
    single.reset(seed=seed)

    def step() -> None:
        _, _, terminated, truncated, _ = single.step(next(actions))
        if terminated or truncated:
            single.reset()
    try:
        return rate(step, 1, seconds)
    finally:
        single.close()


def rates_table(rates: dict[Any, list[float]], label: str, unit: str = "env steps/s") -> str:
    """Interleaved repeats as a markdown table: each row's values, their median and its ratio to
    the first row's median."""
    base = statistics.median(next(iter(rates.values())))
    lines = [f"| {label} | {unit} (each repeat) | median | ratio to the first |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {', '.join(f'{v:,.0f}' for v in values)} | {statistics.median(values):,.0f} | "
              f"{statistics.median(values) / base:.2f} |" for name, values in rates.items()]
    return "\n".join(lines)


def sampler_table(rows: list[SamplerRow]) -> str:
    lines = ["| environment | envs | raw env steps/s | policy forward steps/s | raw + forward steps/s "
             "| volley steps/s | volley / raw | volley / (raw + forward) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.env} | {r.num_envs} | {r.raw:,.0f} | {r.forward:,.0f} | {r.floor:,.0f} | {r.volley:,.0f} | "
              f"{r.volley / r.raw:.2f} | {r.volley / r.floor:.2f} |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # one MPI row: every rank runs this, rank 0 reports
    job = json.loads(sys.argv[1])
    row = measure(job["algo"], job["env"], job["iterations"], "mpi", 0, job["overrides"], job["warmup"])
    print(json.dumps(asdict(row)), flush=True)
