"""Programs the MPI tests start under ``mpiexec -n 2``; the first argument picks one.

    first_batch OUT.npz   rank 0 saves the first gathered batch (gather mode)
    allreduce             5 updates in allreduce mode, then prints the largest weight
                          difference between the ranks' replicas
    kl_penalty            3 iterations in allreduce mode with PPO's adaptive KL penalty; every
                          rank prints its own KL and the penalty weight after each
    fail_on_rank_1        an environment whose creator raises on rank 1 only
"""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np

from volley import PPOConfig, register_env


def ppo(**resources):
    return (PPOConfig().environment("CartPole-v1").resources(engine="mpi", **resources)
            .rollouts(num_envs_per_worker=3).training(train_batch_size=600, minibatch_size=100)
            .debugging(seed=3))


def first_batch(out: str) -> None:
    algo = ppo().build()
    try:
        batch = algo.sample()
        np.savez(out, **batch)
    finally:
        algo.stop()


def allreduce() -> None:
    algo = ppo(mpi_mode="allreduce").build()
    try:
        start = algo.policy.get_flat_weights()
        for _ in range(5):
            result = algo.train()
        replicas = algo.workers.replica_weights(algo.policy.get_flat_weights())
        print(f"replicas {len(replicas)} moved {np.abs(replicas[0] - start).max():.6f} "
              f"maxdiff {float(max(np.abs(w - replicas[0]).max() for w in replicas))!r} "
              f"steps {result['timesteps_total']}", flush=True)
    finally:
        algo.stop()


def kl_penalty() -> None:
    from volley.algorithms.ppo import PPO

    training_step = PPO.training_step

    def reporting_step(self: PPO) -> dict:  # every rank, rank 0 and those serving it alike
        stats = training_step(self)
        print(f"rank {self.workers.rank} kl {stats['kl']!r} kl_coeff {self.kl_coeff!r}", flush=True)
        return stats

    PPO.training_step = reporting_step  # type: ignore[method-assign]
    algo = ppo(mpi_mode="allreduce").training(kl_coeff=0.2, kl_target=1e-4).build()
    try:
        for _ in range(3):
            algo.train()
    finally:
        algo.stop()


def fail_on_rank_1() -> None:
    def creator(env_config: dict) -> gym.Env:
        if os.environ.get("PMI_RANK") == "1":
            raise RuntimeError("this environment cannot start here")
        return gym.make("CartPole-v1")

    register_env("Flaky", creator)
    algo = PPOConfig().environment("Flaky").resources(engine="mpi").build()
    try:
        for _ in range(3):
            algo.train()
    finally:
        algo.stop()


if __name__ == "__main__":
    {"first_batch": first_batch, "allreduce": allreduce, "kl_penalty": kl_penalty,
     "fail_on_rank_1": fail_on_rank_1}[sys.argv[1]](
        *sys.argv[2:])
