"""Sweeps on Ray Tune: trials side by side within the cluster's CPUs, worker actors inside each
trial's placement group, volley checkpoints per trial, ASHA stopping trials early."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ray import tune
from test_cli import volley

from volley import DefaultCallbacks, PPOConfig
from volley.algorithm import Algorithm
from volley.tune import search_space, trainable

TINY = {"env": "CartPole-v1", "train_batch_size": 128, "minibatch_size": 64, "num_envs_per_worker": 2}


def rows(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "progress.jsonl").read_text().splitlines()]


def grid_point(trial_dir: Path) -> tuple[float, int]:
    params = json.loads((trial_dir / "params.json").read_text())
    return params["lr"], params["num_sgd_iter"]


def test_volley_tune_runs_the_grid_concurrently_and_reports_the_best(tmp_path):
    out = volley("tune", "--grid", "lr=1e-3,3e-4", "--grid", "num_sgd_iter=1", "--max-iters", "2",
                 "--num-cpus", "2", "--envs-per-worker", "2", "--set", "train_batch_size=128",
                 "--set", "minibatch_size=64", "--logdir", str(tmp_path), "--name", "grid")
    assert out.returncode == 0, out.stderr[-3000:]
    trials = sorted(p for p in (tmp_path / "grid").iterdir() if p.is_dir())
    assert len(trials) == 2
    finals = {}
    for trial in trials:
        progress = rows(trial)
        assert [r["training_iteration"] for r in progress] == [1, 2]
        (checkpoint,) = trial.glob("checkpoint_*")
        assert (checkpoint / "volley_checkpoint.json").is_file()
        finals[grid_point(trial)] = progress[-1]["episode_reward_mean"]
    assert set(finals) == {(1e-3, 1), (3e-4, 1)}
    # Two 1-CPU trials at once on the 2-CPU cluster: Tune's status line counts both
    assert "Logical resource usage: 2.0/2 CPUs" in out.stdout
    best = re.search(r"best episode_reward_mean (\S+) with lr=(\S+), num_sgd_iter=(\d+)", out.stdout)
    assert best is not None, out.stdout[-2000:]
    assert float(best.group(1)) == pytest.approx(max(finals.values()), abs=0.005)
    assert finals[(float(best.group(2).rstrip(",")), int(best.group(3)))] == max(finals.values())
    best_trial = Path(re.search(r"best trial (\S+)", out.stdout).group(1))
    assert finals[grid_point(best_trial)] == max(finals.values())
    assert (best_trial / re.search(r"best checkpoint \S+/(checkpoint_\d+)", out.stdout).group(1)).is_dir()


def test_each_trial_reserves_one_cpu_plus_its_ray_workers():
    request = trainable("ppo").default_resource_request({"num_workers": 2, "num_cpus_per_worker": 0.5})
    assert request.bundles == [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]
    assert trainable("ppo").default_resource_request({}).bundles == [{"CPU": 1.0}]  # "auto": 0
    local = trainable("ppo").default_resource_request({"num_workers": 2, "engine": "local"})
    assert local.bundles == [{"CPU": 1.0}]
    wide = trainable("ppo").default_resource_request({"num_cpus_for_driver": 3})
    assert wide.bundles == [{"CPU": 3.0}]


def test_a_trial_gives_its_learner_the_cpus_its_bundle_holds():
    """A CNN learner takes every free core of its node outside Tune; in a trial, beside other
    trials, it takes the one CPU its bundle reserves (or the num_cpus_for_driver it asked for)."""
    pong = {"env": "ALE/Pong-v5", "engine": "local"}
    assert trainable("ppo").algorithm_config(pong).num_cpus_for_driver == 1
    assert trainable("ppo").algorithm_config({**pong, "num_cpus_for_driver": 2}).num_cpus_for_driver == 2


class EpisodeLengths(DefaultCallbacks):
    """Defined in a test file: the class goes to the trial's process, and on to its worker, by value."""

    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["length"] = episode.length

    def on_train_result(self, *, result, **kwargs):
        result["callback_ok"] = True


def test_tuner_runs_a_trial_whose_workers_live_in_its_placement_group(ray_session, tmp_path):
    # The trial holds both CPUs (itself + one worker): a worker actor placed outside the
    # trial's group would wait forever for a CPU; the time budget turns that into a failure.
    config = PPOConfig().update(**TINY, num_workers=1, engine="ray").callbacks(EpisodeLengths)
    tuner = tune.Tuner(trainable(config), param_space={"seed": 3},
                       tune_config=tune.TuneConfig(time_budget_s=240),
                       run_config=tune.RunConfig(storage_path=str(tmp_path), name="pg", verbose=0,
                                                 stop={"training_iteration": 2},
                                                 checkpoint_config=tune.CheckpointConfig(
                                                     checkpoint_at_end=True)))
    (result,) = tuner.fit()
    assert result.error is None
    assert result.metrics["training_iteration"] == 2
    assert result.metrics["num_workers"] == 1
    assert result.metrics["callback_ok"] is True  # what on_train_result added reaches Tune
    assert result.metrics["custom_metrics"]["length_mean"] == pytest.approx(result.metrics["episode_len_mean"])
    assert result.metrics["env_runners"]["custom_metrics"]["length_max"] == result.metrics["episode_reward_max"]
    assert [r["training_iteration"] for r in rows(Path(result.path))] == [1, 2]
    restored = Algorithm.from_checkpoint(result.checkpoint.path, engine="local", num_workers=0)
    try:
        assert restored.iteration == 2
        assert restored.timesteps_total == result.metrics["timesteps_total"]
        assert restored.config.seed == 3
    finally:
        restored.stop()


def test_asha_stops_the_worse_trials_at_the_first_rung(ray_session, tmp_path):
    # Ranked by the reported learning rate, so the outcome does not hang on learning noise:
    # one trial at a time, the first sets each rung, the later (lower) ones fall below it.
    scheduler = tune.schedulers.ASHAScheduler(time_attr="training_iteration", max_t=4,
                                              grace_period=1, reduction_factor=2)
    tuner = tune.Tuner(trainable(PPOConfig().update(**TINY)),
                       param_space={"lr": tune.grid_search([1e-3, 1e-4, 1e-5])},
                       tune_config=tune.TuneConfig(metric="lr", mode="max", scheduler=scheduler,
                                                   max_concurrent_trials=1),
                       run_config=tune.RunConfig(storage_path=str(tmp_path), name="asha", verbose=0,
                                                 stop={"training_iteration": 4}))
    results = tuner.fit()
    iterations = {r.config["lr"]: r.metrics["training_iteration"] for r in results}
    assert iterations == {1e-3: 4, 1e-4: 1, 1e-5: 1}


def test_search_space_grid_and_random_keys():
    space = search_space(PPOConfig, [("num_sgd_iter", [5, 10])], [("gamma", [0.9, 0.99])],
                         [("lr", [1e-5, 1e-3])])
    assert space["num_sgd_iter"] == {"grid_search": [5, 10]}
    assert (space["gamma"].lower, space["gamma"].upper) == (0.9, 0.99)
    assert (space["lr"].lower, space["lr"].upper) == (1e-5, 1e-3)
    samples = [space["lr"].sample() for _ in range(200)]
    assert all(1e-5 <= s <= 1e-3 for s in samples)
    assert sum(s < 1e-4 for s in samples) > 60  # log-uniform: half the draws below the geometric middle
