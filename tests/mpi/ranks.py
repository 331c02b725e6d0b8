"""Programs the MPI tests start under ``mpiexec -n 2``; the first argument picks one.

    first_batch OUT.npz   rank 0 saves the first gathered batch (gather mode)
    allreduce             5 updates in allreduce mode, then prints the largest weight
                          difference between the ranks' replicas
    kl_penalty            3 iterations in allreduce mode with PPO's adaptive KL penalty; every
                          rank prints its own KL and the penalty weight after each
    fail_on_rank_1        an environment whose creator raises on rank 1 only
    train_until RUN_DIR   volley.run.train_until on every rank: rank 0 trains, rank 1 serves
    resume_allreduce DIR  2 iterations in allreduce mode and a checkpoint; then every rank
                          restores it and trains 2 more; prints where it resumed and the
                          largest weight difference between the replicas
    train_on_rank_1       rank 1 calls train() instead of serving rank 0
    callbacks             2 iterations with custom metrics in gather mode, then in allreduce mode;
                          rank 0 prints each last result's custom_metrics, hist_stats and
                          episode_len_mean as a JSON line
    callback_fails_on_rank_1  a callbacks hook that raises on rank 1 only
    custom_model          the Dict-observation custom model of examples/custom_model_dict_obs.py,
                          2 iterations in gather mode, then 2 in allreduce mode; prints how far
                          the weights moved and the largest difference between the replicas
    masked                examples/action_masking.py's environment (it raises on a masked action)
                          through RLlib's Dict observation and sb3-contrib's action_masks(), PPO in
                          gather mode, then examples/multidiscrete_actions.py's MultiDiscrete
                          actions; rank 0 prints what it gathered

Each is written the way a user's script is: install the rank hooks first, then build on
every rank; rank 0 (``algo.is_driver``) trains and the others serve it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

from volley import DefaultCallbacks, PPOConfig, register_env
from volley.engines.mpi_engine import install_rank_hooks
from volley.run import Stop, train_until


def ppo(**resources):
    return (PPOConfig().environment("CartPole-v1").resources(engine="mpi", **resources)
            .rollouts(num_envs_per_worker=3).training(train_batch_size=600, minibatch_size=100)
            .debugging(seed=3))


def first_batch(out: str) -> None:
    with ppo().build() as algo:
        if algo.is_driver:
            np.savez(out, **algo.sample())
        else:
            algo.serve_forever()


def allreduce() -> None:
    with ppo(mpi_mode="allreduce").build() as algo:
        if not algo.is_driver:
            algo.serve_forever()  # trains its replica whenever rank 0 does
            return
        start = algo.policy.get_flat_weights()
        for _ in range(5):
            result = algo.train()
        replicas = algo.workers.replica_weights(algo.policy.get_flat_weights())
        print(f"replicas {len(replicas)} moved {np.abs(replicas[0] - start).max():.6f} "
              f"maxdiff {float(max(np.abs(w - replicas[0]).max() for w in replicas))!r} "
              f"steps {result['timesteps_total']}", flush=True)


def resume_allreduce(directory: str) -> None:
    from volley.algorithms.ppo import PPO

    checkpoint = Path(directory) / "checkpoint"
    with ppo(mpi_mode="allreduce").build() as algo:
        if algo.is_driver:
            for _ in range(2):
                algo.train()
            algo.save(checkpoint)  # before stop() releases the other ranks to restore it
        else:
            algo.serve_forever()
    with PPO.from_checkpoint(checkpoint) as algo:  # every rank restores, as `volley train --resume`
        if not algo.is_driver:
            algo.serve_forever()
            return
        resumed = algo.iteration
        for _ in range(2):
            result = algo.train()
        replicas = algo.workers.replica_weights(algo.policy.get_flat_weights())
        print(f"resumed {resumed} iteration {result['training_iteration']} "
              f"maxdiff {float(max(np.abs(w - replicas[0]).max() for w in replicas))!r}", flush=True)


def kl_penalty() -> None:
    from volley.algorithms.ppo import PPO

    training_step = PPO.training_step

    def reporting_step(self: PPO) -> dict:  # every rank, rank 0 and those serving it alike
        stats = training_step(self)
        print(f"rank {self.workers.rank} kl {stats['kl']!r} kl_coeff {self.kl_coeff!r}", flush=True)
        return stats

    PPO.training_step = reporting_step  # type: ignore[method-assign]
    with ppo(mpi_mode="allreduce").training(kl_coeff=0.2, kl_target=1e-4).build() as algo:
        if not algo.is_driver:
            algo.serve_forever()  # trains its replica whenever rank 0 does
            return
        for _ in range(3):
            algo.train()


def fail_on_rank_1() -> None:
    def creator(env_config: dict) -> gym.Env:
        if os.environ.get("PMI_RANK") == "1":
            raise RuntimeError("this environment cannot start here")
        return gym.make("CartPole-v1")

    register_env("Flaky", creator)
    with PPOConfig().environment("Flaky").resources(engine="mpi").build() as algo:
        train_until(algo, Stop(iterations=3))


class EpisodeLengths(DefaultCallbacks):
    """Each episode's length and rank, set on the rank that played it."""

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        episode.custom_metrics["length"] = episode.length
        episode.custom_metrics["rank"] = worker.worker_index
        episode.hist_data["lengths"] = [episode.length]


def callbacks() -> None:
    for mode in ("gather", "allreduce"):
        with ppo(mpi_mode=mode).callbacks(EpisodeLengths).build() as algo:
            if not algo.is_driver:
                algo.serve_forever()
                continue
            for _ in range(2):
                result = algo.train()
            keys = ("custom_metrics", "hist_stats", "episode_len_mean")
            print(json.dumps({"mode": mode, **{key: result[key] for key in keys}}), flush=True)


class FailsOnRank1(DefaultCallbacks):
    def on_episode_step(self, *, worker, episode, **kwargs):
        if worker.worker_index == 1 and episode.length == 5:
            raise RuntimeError("rank 1 says no")


def callback_fails_on_rank_1() -> None:
    with ppo().callbacks(FailsOnRank1).build() as algo:
        train_until(algo, Stop(iterations=3))


def train_until_on_every_rank(run_dir: str) -> None:
    with ppo().build() as algo:
        outcome = train_until(algo, Stop(iterations=2), Path(run_dir), tensorboard=False)
        print(f"rank {os.environ.get('PMI_RANK')}: {outcome.reason}, iteration {algo.iteration}", flush=True)


def custom_model() -> None:
    """Registered on every rank, as a script does; the model reads the Dict observation's parts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("example", Path(__file__).parents[2] / "examples" /
                                                  "custom_model_dict_obs.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    for mode in ("gather", "allreduce"):
        config = (example.config(0).rollouts(num_workers="auto", num_envs_per_worker=2)
                  .resources(engine="mpi", mpi_mode=mode).training(train_batch_size=200, minibatch_size=50))
        with config.build() as algo:
            if not algo.is_driver:
                algo.serve_forever()
                continue
            start = algo.policy.get_flat_weights()
            for _ in range(2):
                algo.train()
            replicas = algo.workers.replica_weights(algo.policy.get_flat_weights()) if mode == "allreduce" else []
            print(f"custom {mode} moved {np.abs(algo.policy.get_flat_weights() - start).max():.6f} maxdiff "
                  f"{float(max([np.abs(w - replicas[0]).max() for w in replicas], default=0.0))!r} "
                  f"replicas {len(replicas)}", flush=True)


def example(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[2] / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def masked() -> None:
    """Every rank registers the examples' environments, as a script does; rank 0 checks that each
    gathered action is one its observation's mask allows (the mask's columns come first)."""
    masking, multidiscrete = example("action_masking"), example("multidiscrete_actions")
    configs = {"rllib": masking.config("ppo"), "sb3": masking.config("ppo", sb3=True),
               "multidiscrete": multidiscrete.config("multidiscrete", 0)}
    for name, config in configs.items():
        config = (config.rollouts(num_workers="auto", num_envs_per_worker=2).resources(engine="mpi")
                  .training(train_batch_size=400, minibatch_size=100))
        with config.build() as algo:
            if not algo.is_driver:
                algo.serve_forever()
                continue
            batch = algo.sample()
            algo.train()
            actions, obs = batch["actions"], batch["obs"]
            allowed = obs[np.arange(len(obs)), actions] if name != "multidiscrete" else np.ones(len(obs))
            print(f"masked {name} rows {len(obs)} actions {actions.shape} allowed {int(allowed.sum())} "
                  f"iterations {algo.iteration}", flush=True)


def train_on_rank_1() -> None:
    with ppo().build() as algo:
        algo.train()


if __name__ == "__main__":
    install_rank_hooks()
    {"first_batch": first_batch, "allreduce": allreduce, "kl_penalty": kl_penalty,
     "fail_on_rank_1": fail_on_rank_1, "train_until": train_until_on_every_rank,
     "resume_allreduce": resume_allreduce,
     "train_on_rank_1": train_on_rank_1, "callbacks": callbacks,
     "callback_fails_on_rank_1": callback_fails_on_rank_1, "custom_model": custom_model,
     "masked": masked}[sys.argv[1]](*sys.argv[2:])
