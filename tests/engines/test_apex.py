"""Ape-X on Ray (DQN, and SAC asynchronously): config checks, per-worker ε, results, a killed worker
replaced, checkpoints. The faults (a killed acting worker or replay shard, the restart limit) run
with the Ray engine's actors in this process (``in_process``), where a death lands at a known call."""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from volley import (
    Algorithm,
    ApexDQN,
    ApexDQNConfig,
    ApexSAC,
    ApexSACConfig,
    ConfigError,
    DQNConfig,
    SACConfig,
)
from volley.algorithms.dqn.apex import per_worker_epsilon
from volley.checkpoint import read_checkpoint
from volley.cli import main
from volley.errors import WorkerError
from volley.run import LATEST, Stop, train_until


@pytest.mark.parametrize(("update", "message"), [
    ({"engine": "mpi"}, r"engine='mpi' cannot host it; use engine='ray', or the synchronous algorithm 'dqn'"),
    ({"engine": "local"}, r"engine='local' cannot host it"),
    ({"num_workers": 0}, r"needs num_workers >= 1 acting workers, got num_workers=0"),
    ({"num_replay_shards": 0}, r"'num_replay_shards' must be > 0, got 0"),
    ({"max_sample_lead": -1}, r"'max_sample_lead' must be >= 0 or None, got -1"),
    ({"observation_filter": "MeanStdFilter"}, r"takes observation_filter='NoFilter', got 'MeanStdFilter'"),
])
def test_config_errors_name_the_value(update, message):
    with pytest.raises(ConfigError, match=message):
        ApexDQNConfig().update(**update).validate()


def test_mpi_engine_is_refused_at_build_before_any_rank_starts():
    with pytest.raises(ConfigError, match=r"engine='mpi'"):
        ApexDQNConfig().resources(engine="mpi").build()


def test_cli_reports_the_mpi_engine_in_one_line():
    out = subprocess.run([sys.executable, "-m", "volley", "train", "--algo", "apex_dqn", "--engine", "mpi"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "volley train: error: apex_dqn runs its acting workers, replay shards and parameter server as "
        "Ray actors, so engine='mpi' cannot host it; use engine='ray', or the synchronous algorithm "
        "'dqn', which runs on every engine"]


def test_async_mode_keeps_the_dqn_settings_and_adds_apex_keys():
    config = DQNConfig().training(n_step=2, lr=5e-4).async_mode(num_replay_shards=2, max_sample_lead=100)
    assert isinstance(config, ApexDQNConfig)
    assert (config.n_step, config.lr, config.num_replay_shards, config.max_sample_lead) == (2, 5e-4, 2, 100)
    with pytest.raises(ConfigError, match=r"did you mean 'num_replay_shards'"):
        DQNConfig().async_mode(num_replay_shard=2)


def test_per_worker_epsilon_follows_the_apex_formula():
    config = ApexDQNConfig()  # ε = 0.4 throughout, α = 7
    # ε_i = 0.4^(1 + 7 i / 2) for 3 workers
    assert [per_worker_epsilon(config, i, 3, 0) for i in range(3)] == pytest.approx([0.4, 0.4**4.5, 0.4**8])
    assert per_worker_epsilon(config, 0, 1, 0) == 0.4
    decaying = config.copy().training(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=100)
    assert per_worker_epsilon(decaying, 1, 2, 50) == pytest.approx(0.505**8)  # the base decays first


def small(**training) -> ApexDQNConfig:
    return (ApexDQNConfig().environment("CartPole-v1")
            .rollouts(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=16)
            .training(learning_starts=64, minibatch_size=16, weight_sync_interval=64,
                      epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=500,
                      model={"fcnet_hiddens": [32]}, **training)
            .reporting(min_time_s_per_iteration=0.5).debugging(seed=5))


def test_learner_trains_on_what_the_workers_push(ray_session):
    algo = small(train_intensity=1.0, max_sample_lead=256).build()
    actors, shards = list(algo.workers.actors), list(algo.workers.replay_shards.actors)
    try:
        results = [algo.train() for _ in range(3)]
        while results[-1]["learner_updates"] == 0 and len(results) < 20:  # a slow machine's start-up
            results.append(algo.train())
        last = results[-1]
        for key in ("episode_reward_mean", "replay_size", "learner_updates", "weight_version_lag",
                    "sample_throughput", "train_throughput", "num_worker_restarts"):
            assert key in last, key
        assert last["timesteps_total"] > 0 and last["learner_updates"] > 0 and math.isfinite(last["loss"])
        # never more updates than train_intensity allows; workers never run max_sample_lead ahead
        # of it by more than the runs they had queued (2 per worker, 64 steps each, 16-step chunks)
        assert last["learner_updates"] <= last["timesteps_total"] - 64
        assert last["timesteps_total"] <= last["learner_updates"] + 64 + 256 + 2 * 2 * (64 + 32)
        # every reported step is in the shard (a worker reports after its pushes are stored)
        assert last["replay_size"] >= last["timesteps_total"]
        assert sum(r["num_updates"] for r in results) == last["learner_updates"]
        assert last["num_worker_restarts"] == 0
    finally:
        algo.stop()
    pings = [lambda: algo.workers.parameter_server.call.remote("fetch", 0),
             *(lambda shard=shard: shard.call.remote("size") for shard in shards),
             *(lambda actor=actor: actor.call.remote("spaces") for actor in actors)]
    for ping in pings:  # stop() ended every actor (ray.kill takes effect soon, not at once)
        assert_dies(ray_session, ping)


def test_the_first_iteration_waits_for_a_first_report(ray_session):
    """The workers start on the first train(); on a loaded machine that outlasts a short
    iteration, which would return a result with no steps. The first iteration waits for a first
    report (bounded); later ones keep to their time."""
    algo = small(max_sample_lead=256).reporting(min_time_s_per_iteration=0.01).build()
    try:
        first = algo.train()
        assert first["timesteps_this_iter"] > 0, first
        assert algo.train()["time_this_iter_s"] < 5  # no wait once the workers have reported
    finally:
        algo.stop()


def assert_dies(ray, ping) -> None:
    for _ in range(20):
        try:
            ray.get(ping(), timeout=60)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.5)
    pytest.fail("an actor still answers 10 s after stop()")


def test_a_killed_acting_worker_is_replaced_and_counted(in_process):
    algo = small(max_sample_lead=2000).build()
    try:
        algo.train()
        victim = algo.workers.actors[0]
        in_process.kill(victim)
        for _ in range(20):
            result = algo.train()
            if result["num_worker_restarts"]:
                break
        assert result["num_worker_restarts"] == 1
        assert algo.workers.actors[0] is not victim
        steps, updates = result["timesteps_total"], result["learner_updates"]
        for _ in range(3):
            result = algo.train()
        assert result["timesteps_total"] > steps and result["learner_updates"] > updates
        assert result["num_worker_restarts"] == 1
        # the replacement acts with weights from the parameter server, not its initial ones
        spaces = in_process.get(in_process.call(algo.workers.actors[0], "spaces"))
        assert spaces[1].n == 2
    finally:
        algo.stop()


def train_until_counted(algo: ApexDQN, key: str, count: int, iterations: int = 20) -> dict:
    """Train until ``result[key]`` reaches ``count`` (a death is noticed on the next call to the actor)."""
    for _ in range(iterations):
        result = algo.train()
        if result[key] >= count:
            return result
    pytest.fail(f"{key} still {result[key]} after {iterations} iterations")


def assert_stops_with_a_checkpoint(algo: ApexDQN, run_dir, message: str) -> None:
    """``train_until`` raises a one-line WorkerError matching ``message`` and leaves a checkpoint
    of the last complete iteration."""
    with pytest.raises(WorkerError) as caught:
        train_until(algo, Stop(iterations=1000), run_dir, tensorboard=False, out=io.StringIO())
    assert "\n" not in str(caught.value)
    assert re.fullmatch(message, str(caught.value)), str(caught.value)
    _, manifest = read_checkpoint(run_dir / LATEST)
    assert manifest["state"]["iteration"] == algo.iteration >= 1


def test_worker_deaths_past_max_worker_restarts_stop_apex_with_a_checkpoint(in_process, tmp_path):
    algo = small(max_sample_lead=2000).fault_tolerance(max_worker_restarts=1).build()
    try:
        algo.train()
        in_process.kill(algo.workers.actors[0])
        assert train_until_counted(algo, "num_worker_restarts", 1)["num_worker_restarts"] == 1
        in_process.kill(algo.workers.actors[1])
        assert_stops_with_a_checkpoint(algo, tmp_path, r"acting worker 1 died \(.+\); not replaced: "
                                                       r"max_worker_restarts=1 replacements were made already")
        _, manifest = read_checkpoint(tmp_path / LATEST)
        assert manifest["state"]["faults"]["num_worker_restarts"] == 1
    finally:
        algo.stop()


def test_a_killed_replay_shard_is_replaced_empty_and_counted(in_process, tmp_path):
    algo = small(max_sample_lead=2000, num_replay_shards=2).build()
    try:
        for _ in range(2):
            algo.train()
        shards = algo.workers.replay_shards
        victim = shards.actors[1]
        assert in_process.get(in_process.call(victim, "size")) > 0
        in_process.kill(victim)
        result = train_until_counted(algo, "num_shard_restarts", 1)
        assert result["num_shard_restarts"] == 1 and result["num_worker_restarts"] == 0
        assert shards.actors[1] is not victim
        steps, updates = result["timesteps_total"], result["learner_updates"]
        for _ in range(3):
            result = algo.train()
        assert result["timesteps_total"] > steps and result["learner_updates"] > updates
        assert in_process.get(in_process.call(shards.actors[1], "size")) > 0  # the workers fill the new shard
        assert result["num_shard_restarts"] == 1
        path = algo.save(tmp_path / "apex")
    finally:
        algo.stop()
    assert read_checkpoint(path)[1]["state"]["extra"]["num_shard_restarts"] == 1
    restored = ApexDQN.from_checkpoint(path)
    try:
        assert restored.train()["num_shard_restarts"] == 1
    finally:
        restored.stop()


def test_a_dead_replay_shard_without_restarts_stops_the_run_with_a_checkpoint(in_process, tmp_path):
    algo = small(max_sample_lead=2000).fault_tolerance(restart_failed_workers=False).build()
    try:
        algo.train()
        in_process.kill(algo.workers.replay_shards.actors[0])
        assert_stops_with_a_checkpoint(algo, tmp_path, r"replay shard 0 died \(.+\); restart_failed_workers=False")
    finally:
        algo.stop()


def updates_after_restore(algo) -> int:
    """The learner's updates after the first iteration that made any: a restored algorithm's new
    workers start first (up to 20 iterations, for a slow machine)."""
    before, limit = algo.learner_updates, algo.iteration + 20
    while algo.learner_updates == before and algo.iteration < limit:
        algo.train()
    return algo.learner_updates


def test_checkpoint_round_trip_with_replay_contents(ray_session, tmp_path):
    algo = small(checkpoint_replay=True, num_replay_shards=2).build()
    try:
        for _ in range(2):
            algo.train()
        # until the learner has moved its weights away from the target (a slow machine's start-up)
        while np.array_equal(algo.policy.get_flat_weights(), algo.target.get_flat_weights()) and algo.iteration < 20:
            algo.train()
        path = algo.save(tmp_path / "apex")
        saved = {"weights": algo.policy.get_flat_weights(), "target": algo.target.get_flat_weights(),
                 "updates": algo.learner_updates, "steps": algo.timesteps_total,
                 "version": algo.workers.weight_version,
                 "adam": algo.optimizer.state_dict()["state"][0]["exp_avg"].clone()}
    finally:
        algo.stop()
    tensors, manifest = read_checkpoint(path)
    assert {"replay.0.obs", "replay.1.priority_alpha", "target.q_head.weight"} <= set(tensors)
    restored = ApexDQN.from_checkpoint(path)
    try:
        assert isinstance(restored, ApexDQN)
        np.testing.assert_array_equal(restored.policy.get_flat_weights(), saved["weights"])
        np.testing.assert_array_equal(restored.target.get_flat_weights(), saved["target"])
        assert not np.array_equal(saved["weights"], saved["target"])  # the target was saved, not copied
        torch.testing.assert_close(restored.optimizer.state_dict()["state"][0]["exp_avg"], saved["adam"])
        assert (restored.learner_updates, restored.timesteps_total, restored.workers.weight_version) == (
            saved["updates"], saved["steps"], saved["version"])
        for index, shard in enumerate(restored.workers.replay_state()):  # before any worker pushed
            assert len(shard["obs"]) > 0
            for column, values in shard.items():
                np.testing.assert_array_equal(values, tensors[f"replay.{index}.{column}"].numpy(),
                                              err_msg=column)
        assert updates_after_restore(restored) > saved["updates"]  # and it trains on
    finally:
        restored.stop()


def test_volley_evaluate_plays_an_apex_checkpoint_on_one_idle_acting_worker(ray_session, tmp_path, capsys):
    """Only Ray hosts Ape-X, so its checkpoint is played on Ray (not the local engine, which
    refuses it) with one acting worker that never starts; the episodes use the learner's network."""
    algo = small(max_sample_lead=2000).build()
    try:
        algo.train()
        path = algo.save(tmp_path / "apex")
        weights = algo.policy.get_flat_weights()
    finally:
        algo.stop()
    played = Algorithm.from_checkpoint(path, to_play=True)
    try:
        assert isinstance(played, ApexDQN)
        assert (played.config.engine, played.config.num_workers, played.started) == ("ray", 1, False)
        np.testing.assert_array_equal(played.policy.get_flat_weights(), weights)
        assert played.evaluate(2)["episodes_this_iter"] == 2
        assert not played.started
    finally:
        played.stop()
    assert main(["evaluate", str(path), "--episodes", "2"]) == 0
    assert "volley: 2 episodes of CartPole-v1: return" in capsys.readouterr().out


# -- asynchronous SAC: the same layout with SAC's learner ------------------------------------------


def small_sac(**training) -> ApexSACConfig:
    return (ApexSACConfig().environment("Pendulum-v1").rollouts(num_workers=1, rollout_fragment_length=16)
            .training(learning_starts=64, train_batch_size=32, weight_sync_interval=32, max_sample_lead=200,
                      model={"fcnet_hiddens": [16]}, q_model_config={"fcnet_hiddens": [16]}, **training)
            .reporting(min_time_s_per_iteration=0.5).debugging(seed=5))


def test_async_sac_keeps_the_sac_settings_and_is_refused_off_ray():
    config = SACConfig().training(tau=0.02, train_batch_size=64).async_mode(num_replay_shards=2)
    assert isinstance(config, ApexSACConfig) and (config.tau, config.train_batch_size) == (0.02, 64)
    assert config.normalize_actions and config.num_envs_per_worker == 1  # SAC's defaults, not the base's
    with pytest.raises(ConfigError, match=r"engine='local' cannot host it; use engine='ray', or the synchronous "
                                          r"algorithm 'sac'"):
        config.resources(engine="local").validate()


def test_async_sac_checkpoint_round_trip_with_replay_then_evaluate(ray_session, tmp_path, capsys):
    algo = small_sac(checkpoint_replay=True, num_replay_shards=2).build()
    try:
        while algo.learner_updates == 0:
            result = algo.train()
        # every reported step is in a shard; rows of runs not reported yet may be too
        assert result["replay_size"] >= result["timesteps_total"] and not algo.warming_up
        path = algo.save(tmp_path / "apex-sac")
        saved = {"weights": algo.policy.get_flat_weights(), "log_alpha": algo.log_alpha.item(),
                 "targets": [p.detach().clone() for p in algo.target_critics.parameters()],
                 "updates": algo.learner_updates, "steps": algo.timesteps_total}
    finally:
        algo.stop()
    tensors, _ = read_checkpoint(path)
    assert {"replay.0.obs", "replay.1.next_obs", "target_critics.weights.1", "log_alpha"} <= set(tensors)
    restored = Algorithm.from_checkpoint(path)
    try:
        assert isinstance(restored, ApexSAC)
        np.testing.assert_array_equal(restored.policy.get_flat_weights(), saved["weights"])
        assert restored.log_alpha.item() == saved["log_alpha"]
        torch.testing.assert_close([p.detach() for p in restored.target_critics.parameters()], saved["targets"])
        assert (restored.learner_updates, restored.timesteps_total) == (saved["updates"], saved["steps"])
        rows = [len(shard["obs"]) for shard in restored.workers.replay_state()]  # before any worker pushed
        assert rows == [len(tensors["replay.0.obs"]), len(tensors["replay.1.obs"])] and sum(rows) >= saved["steps"]
        assert updates_after_restore(restored) > saved["updates"]  # and it trains on
    finally:
        restored.stop()
    assert main(["evaluate", str(path), "--episodes", "2"]) == 0
    assert "volley: 2 episodes of Pendulum-v1: return" in capsys.readouterr().out
