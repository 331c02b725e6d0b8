"""Callbacks on the Ray engine: the class travels to the worker actors (defined in this test
file, it goes by value), their episode hooks run there, and the driver reports what the local
engine reports from the same episodes. A hook that raises in an actor ends the run naming it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from volley import CallbackError, ConfigError, DefaultCallbacks, PPOConfig
from volley.run import LATEST, Stop, train_until


class PoleAngles(DefaultCallbacks):
    """RLlib's custom_metrics_and_callbacks example, plus the episode's length and worker."""

    def on_episode_start(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        episode.user_data["pole_angles"] = []
        episode.hist_data["pole_angles"] = []

    def on_episode_step(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        episode.user_data["pole_angles"].append(abs(float(episode.last_observation_for()[2])))

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        episode.custom_metrics["pole_angle"] = np.mean(episode.user_data["pole_angles"])
        episode.custom_metrics["length"] = episode.length
        episode.custom_metrics["worker"] = worker.worker_index
        episode.hist_data["pole_angles"] = episode.user_data["pole_angles"]


def cartpole(engine: str, **keys) -> PPOConfig:
    return (PPOConfig().environment("CartPole-v1").resources(engine=engine)
            .rollouts(num_workers=2, num_envs_per_worker=2)
            .training(train_batch_size=256, minibatch_size=128, num_epochs=1).callbacks(PoleAngles)
            .debugging(seed=5).update(**keys))


def test_ray_workers_run_the_episode_hooks_and_report_what_the_local_engine_does(ray_session):
    results = {}
    for engine in ("local", "ray"):
        with cartpole(engine).build() as algo:
            results[engine] = algo.train()
    local, remote = results["local"], results["ray"]
    assert remote["custom_metrics"] == local["custom_metrics"]
    assert remote["hist_stats"] == local["hist_stats"]
    metrics = remote["custom_metrics"]
    assert metrics["length_mean"] == pytest.approx(remote["episode_len_mean"])
    assert (metrics["worker_min"], metrics["worker_max"]) == (0, 1)  # both actors' episodes
    angles = remote["hist_stats"]["pole_angles"]
    assert len(angles) == sum(remote["hist_stats"]["episode_lengths"]) and max(angles) < 0.25


def test_ray_evaluation_workers_report_their_episodes_custom_metrics(ray_session):
    config = cartpole("ray", num_workers=1).evaluation(evaluation_interval=1, evaluation_num_workers=1,
                                                        evaluation_duration=4)
    with config.build() as algo:
        evaluation = algo.train()["evaluation"]
    assert evaluation["episodes_this_iter"] == 4
    assert evaluation["custom_metrics"]["length_mean"] == pytest.approx(evaluation["episode_len_mean"])


class FailsOnWorker1(PoleAngles):
    def on_episode_end(self, *, worker, **kwargs):
        if worker.worker_index == 1:
            raise RuntimeError("worker 1 says no")


def test_a_hook_that_raises_in_a_ray_worker_ends_the_run_naming_it(ray_session, tmp_path):
    with cartpole("ray").callbacks(FailsOnWorker1).build() as algo, pytest.raises(CallbackError) as raised:
        train_until(algo, Stop(iterations=2), tmp_path, tensorboard=False)
    assert str(raised.value) == ("FailsOnWorker1.on_episode_end raised RuntimeError in rollout worker 1: "
                                 "worker 1 says no")
    assert (tmp_path / LATEST / "volley_checkpoint.json").exists()


class Locked(PoleAngles):
    lock = threading.Lock()  # cannot be pickled: the class cannot go to the workers


def test_a_callbacks_class_that_cannot_be_pickled_is_one_line_naming_it(ray_session):
    with pytest.raises(ConfigError) as refused:
        cartpole("ray").callbacks(Locked).build()
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"callbacks class '{__name__}:Locked' cannot be sent "
                                                      "to the Ray workers: pickling it failed with TypeError: ")
    with cartpole("local", num_workers=0).callbacks(Locked).build() as algo:  # in process, no pickling
        assert algo.train()["custom_metrics"]["worker_max"] == 0
