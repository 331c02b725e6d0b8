"""IMPALA and APPO: config checks, the stream of fragments on the local and Ray engines (policy lag,
weights travelling with requests, the first fragments as the local engine's), a killed worker
replaced with its fragments dropped, checkpoints and resume.

The Ray engine's stream with its actors in this process (``in_process``) shows what does not
depend on timing exactly: the version of the weights each fragment acted with, the fragments a dead
worker held, the restart limit."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from volley import APPO, IMPALA, Algorithm, APPOConfig, ConfigError, IMPALAConfig
from volley.algorithms.impala.learner import MinibatchBuffer
from volley.catalog import build_policy
from volley.checkpoint import read_checkpoint
from volley.engines import StreamSpec, make_streaming_group
from volley.errors import WorkerError
from volley.rollout.advantages import vtrace_columns
from volley.rollout.batch import Batch
from volley.rollout.fragments import BatchBuilder, Fragment
from volley.rollout.worker import SampleResult
from volley.run import LATEST, Stop, train_until


@pytest.mark.parametrize(("update", "message"), [
    ({"broadcast_interval": 0}, r"config key 'broadcast_interval' must be > 0, got 0"),
    ({"max_requests_in_flight_per_sampler_worker": 0},
     r"config key 'max_requests_in_flight_per_sampler_worker' must be > 0, got 0"),
    ({"max_requests_in_flight_per_env_runner": -1},
     r"config key 'max_requests_in_flight_per_sampler_worker' must be > 0, got -1"),
    ({"learner_queue_size": 0}, r"config key 'learner_queue_size' must be > 0, got 0"),
    ({"vtrace_clip_rho_threshold": 0.0}, r"config key 'vtrace_clip_rho_threshold' must be > 0, got 0.0"),
    ({"vtrace_clip_pg_rho_threshold": -1.0}, r"config key 'vtrace_clip_pg_rho_threshold' must be > 0, got -1.0"),
    ({"replay_proportion": -0.5}, r"config key 'replay_proportion' must be >= 0, got -0.5"),
    ({"entropy_coeff_schedule": [[100, 0.01], [0, 0.0]]}, r"'entropy_coeff_schedule' must be a number or \[\[timestep, value\]"),
    ({"batch_mode": "complete_episodes"}, r"batch_mode must be 'truncate_episodes', got 'complete_episodes'"),
    ({"engine": "mpi"}, r"engine='mpi' cannot host that .+; use engine='ray', or 'local'"),
])
def test_config_errors_name_the_value(update, message):
    with pytest.raises(ConfigError, match=message) as caught:
        IMPALAConfig().update(**update).validate()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("update", "message"), [
    ({"target_network_update_freq": 0}, r"'target_network_update_freq' must be > 0, got 0"),
    ({"tau": 1.5}, r"'tau' must be in \(0, 1\], got 1.5"),
    ({"learner_queue_size": -2}, r"'learner_queue_size' must be > 0, got -2"),
])
def test_appo_config_errors_name_the_value(update, message):
    with pytest.raises(ConfigError, match=message):
        APPOConfig().update(**update).validate()


def test_cli_refuses_the_mpi_engine_in_one_line():
    out = subprocess.run([sys.executable, "-m", "volley", "train", "--algo", "appo", "--engine", "mpi"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "volley train: error: appo streams fragments from workers that never wait for the learner, and "
        "engine='mpi' cannot host that (its ranks meet in collective calls); use engine='ray', or 'local'"]


def test_rllib_spellings_reach_the_keys():
    config = (APPOConfig().env_runners(max_requests_in_flight_per_env_runner=1)
              .training(num_sgd_iter=3, max_sample_requests_in_flight_per_worker=1, circular_buffer_num_batches=4,
                        train_batch_size_per_learner=750, opt_type="rmsprop", vtrace_drop_last_ts=False))
    assert (config.max_requests_in_flight_per_sampler_worker, config.num_epochs, config.minibatch_buffer_size,
            config.train_batch_size, config.opt_type) == (1, 3, 4, 750, "rmsprop")
    with pytest.raises(ConfigError, match=r"RLlib's minibatch_size=128 is not supported by volley: IMPALA and APPO"):
        IMPALAConfig().training(minibatch_size=128)


# -- the parts: train batches with replay, the minibatch buffer --------------------------------------------


def fragment(steps: int, tag: float) -> Fragment:
    batch = Batch({"obs": np.full((steps, 1), tag, np.float32)})
    return Fragment(0, SampleResult(batch, np.zeros(0), np.zeros(0), None, steps), 0, 0.0, 0.0)


def test_batches_hold_at_least_train_batch_size_steps_and_replay_p_per_new_fragment():
    builder = BatchBuilder(steps=25, replay_proportion=0.5, replay_slots=2, rng=np.random.default_rng(0))
    batches = []
    for tag in range(12):
        builder.add(fragment(10, tag))
        if builder.ready():
            batches.append(builder.take())
    assert len(batches) == 6 and all(len(b.batch) == 30 for b in batches)
    assert sum(b.num_replayed for b in batches) == 6  # 0.5 a new fragment
    for b in batches:
        tags = b.batch["obs"][::10, 0].tolist()  # one tag per 10-row fragment: the new ones, then the replayed
        new, replayed = tags[:len(b.fragments)], tags[len(b.fragments):]
        # a replayed fragment is one of the replay_slots = 2 new ones before the newest
        assert all(max(0, new[-1] - 2) <= t <= new[-1] - 1 for t in replayed), (new, replayed)
        assert all(not f.result.batch for f in b.fragments)  # their rows moved into the train batch


def test_the_minibatch_buffer_trains_each_batch_num_epochs_times_in_turn():
    stream = iter("ABCDEF")
    buffer = MinibatchBuffer(size=2, uses=2)
    assert [buffer.next(lambda: next(stream)) for _ in range(8)] == list("ABABCDCD")  # type: ignore[arg-type]


# -- the stream on each engine ---------------------------------------------------------------------------


def config(engine: str = "ray", cls: type[IMPALAConfig] = IMPALAConfig, **training) -> IMPALAConfig:
    return (cls().environment("CartPole-v1")
            .resources(engine=engine).rollouts(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=10)
            .training(train_batch_size=35, model={"fcnet_hiddens": [16]}, **training)
            .reporting(min_time_s_per_iteration=0.3).debugging(seed=7))


def test_local_engine_reports_the_lag_of_broadcast_interval():
    """Serially, a fragment acts with the weights published last: every broadcast_interval = 3 updates,
    so the updates after a publish train on fragments 0, 1 and 2 updates old."""
    # bounded in steps, not seconds: a slow machine still takes at least 6 updates (each of ~38 steps)
    algo = config("local", broadcast_interval=3).reporting(min_sample_timesteps_per_iteration=300).build()
    try:
        result = algo.train()
        updates = result["num_updates"]
        assert updates >= 6 and result["learner_updates"] == updates
        # two fragments a batch: each has 2 x 10 steps, less the reset step after an episode end
        expected = [k % 3 for k in range(updates) for _ in range(2)]
        assert result["policy_lags_this_iter"] == expected
        assert result["policy_lag_max"] == 2
        assert result["policy_lag_mean"] == pytest.approx(np.mean(expected))
        assert result["num_dropped_fragments"] == 0 and 0 < result["learner_idle_fraction"] < 1
    finally:
        algo.stop()


def test_replayed_fragments_join_the_new_ones_without_counting_as_samples():
    algo = config("local", replay_proportion=1.0, replay_buffer_num_slots=4).build()
    try:
        result = algo.train()
        fragments = len(result["policy_lags_this_iter"])  # the new ones
        assert result["num_replayed_fragments"] in (fragments - 1, fragments)  # 1:1, from the 2nd fragment on
        # replayed steps are not sampled steps: at most each new fragment's 2 x 10 (reset steps are not)
        assert fragments * 10 * 2 * 0.8 < result["timesteps_this_iter"] <= fragments * 10 * 2
    finally:
        algo.stop()


def test_filter_statistics_are_merged_from_every_fragment_and_published_with_the_weights():
    algo = config("local", broadcast_interval=2).update(observation_filter="MeanStdFilter").build()
    try:
        fragments = sum(len(algo.train()["policy_lags_this_iter"]) for _ in range(2))
        assert algo.obs_filter.stats.count == fragments * 10 * 2  # every step of every fragment, once
        for stream in algo.workers.streams:  # what was published last, and what it saw since
            assert 0 < stream.worker.obs_filter.stats.count <= algo.obs_filter.stats.count
    finally:
        algo.stop()


def head_bias_weights(bias: float) -> np.ndarray:
    """Weights of the CartPole network whose policy ignores the observation: π(right) = sigmoid(bias)."""
    env = gym.make("CartPole-v1")
    _, policy = build_policy(env.observation_space, env.action_space, config().model, "actor_critic", [])
    state = {key: torch.zeros_like(value) for key, value in policy.state_dict().items()}
    state["pi_head.bias"] = torch.tensor([0.0, bias])
    policy.load_state_dict(state)
    return policy.get_flat_weights()


def acted_bias(batch: Batch) -> float:
    """The head bias the behaviour log-probabilities of a fragment's steps were computed with."""
    steps = ~batch["bootstrap"]
    p = np.exp(batch["logp"][steps])
    p_right = np.where(batch["actions"][steps] == 1, p, 1 - p)
    assert np.ptp(p_right) < 1e-5  # one policy acted throughout the fragment
    return float(np.log(p_right[0] / (1 - p_right[0])))


def one_fragment_a_batch(engine: str):
    spec = StreamSpec(max_requests_in_flight=2, train_batch_size=1, learner_queue_size=1, replay_proportion=0.0,
                      replay_slots=1)
    return make_streaming_group(config(engine), vtrace_columns, None, spec)


def test_fragments_carry_the_version_of_the_weights_they_acted_with(in_process):
    """Weights whose version the behaviour log-probabilities a worker recorded give away: every
    fragment's version is that of the weights it acted with, never one the learner had not published
    when it took the fragment. (The in-process actors run the oldest request first, so both workers
    supply fragments in turn, as two equally fast Ray workers would.)"""
    group = one_fragment_a_batch("ray")
    try:
        group.start(head_bias_weights(0.0), None, 0)
        versions: dict[int, set[int]] = {0: set(), 1: set()}
        for version in range(1, 40):
            train_batch = group.next_batch()
            (fragment_,) = train_batch.fragments
            assert round(acted_bias(train_batch.batch) / 0.05) == fragment_.weight_version
            assert 0 <= fragment_.weight_version <= version - 1
            versions[fragment_.worker_index].add(fragment_.weight_version)
            group.publish(head_bias_weights(0.05 * version), None, version)
        assert all(len(seen) > 5 for seen in versions.values())  # both workers took new weights often
        assert group.num_dropped_fragments == 0 and group.num_restarts == 0
    finally:
        group.stop()


def test_each_ray_workers_first_fragment_is_the_local_engines(ray_session):
    """Same seed, same weights: worker i's first fragment is the same on Ray (arriving in any order) as
    in the local engine's serial stream."""
    firsts: dict[str, dict[int, Batch]] = {}
    for engine in ("local", "ray"):
        group = one_fragment_a_batch(engine)
        try:
            group.start(head_bias_weights(0.3), None, 0)
            firsts[engine] = {}
            while len(firsts[engine]) < 2:
                train_batch = group.next_batch()
                firsts[engine].setdefault(train_batch.fragments[0].worker_index, train_batch.batch)
        finally:
            group.stop()
    for worker in (0, 1):
        local, ray = firsts["local"][worker], firsts["ray"][worker]
        assert set(local) == set(ray)
        for key in local:
            np.testing.assert_array_equal(local[key], ray[key], err_msg=key)


def small(cls: type[IMPALAConfig] = IMPALAConfig, **training) -> IMPALAConfig:
    return config("ray", cls, **training)


def test_ray_results_report_how_stale_and_busy_the_stream_was(ray_session):
    algo = small(APPOConfig, broadcast_interval=2, max_requests_in_flight_per_sampler_worker=2).build()
    try:
        results = [algo.train() for _ in range(2)]
        last = results[-1]
        lags = last["policy_lags_this_iter"]
        assert last["policy_lag_mean"] == pytest.approx(np.mean(lags)) and last["policy_lag_max"] == max(lags)
        assert min(lags) >= 0 and len(lags) >= last["num_updates"]
        assert 0 <= last["learner_idle_fraction"] < 1 and 0 <= last["worker_idle_fraction"] < 1
        assert last["learner_updates"] == sum(r["num_updates"] for r in results)
        assert last["num_target_updates"] == last["learner_updates"] // 2  # every 2 x 1 x 1 updates
        assert last["timesteps_total"] > 0 and np.isfinite(last["policy_loss"])
        assert last["num_worker_restarts"] == last["num_dropped_fragments"] == 0
    finally:
        algo.stop()


def test_sample_on_ray_workers_acts_with_the_learners_current_weights(ray_session):
    """``algo.sample()`` works on IMPALA's fragment workers as on synchronous ones: every worker's
    batch, acted with the weights the learner has now (not the ones it last broadcast)."""
    algo = small(broadcast_interval=100).build()
    try:
        algo.train()
        algo.policy.set_flat_weights(head_bias_weights(0.7))
        batch = algo.sample()
        assert acted_bias(batch) == pytest.approx(0.7, abs=1e-4)
        assert 2 * 2 * 10 * 0.8 < int((~batch["bootstrap"]).sum()) <= 2 * 2 * 10  # 2 workers x 2 envs x 10 steps
    finally:
        algo.stop()


# -- faults ---------------------------------------------------------------------------------------------


def test_a_killed_worker_is_replaced_and_its_fragments_in_flight_dropped(in_process):
    # the queue cannot fill before the death (two fragments a batch, 16 batches): the feeder tops the
    # victim up to its requests in flight before it runs the next, and it dies as it starts its third
    algo = small(learner_queue_size=16).build()
    try:
        victim = algo.workers.actors[0]
        in_process.crash(victim, after_calls=2)
        result = algo.train()
        assert result["num_worker_restarts"] == 1 and algo.workers.actors[0] is not victim
        # the victim had every request it may hold in flight (the queue never fills): all are dropped
        assert result["num_dropped_fragments"] == algo.config.max_requests_in_flight_per_sampler_worker
        steps, updates = result["timesteps_total"], result["learner_updates"]
        result = algo.train()
        assert result["timesteps_total"] > steps and result["learner_updates"] > updates
    finally:
        algo.stop()


def test_worker_deaths_past_the_limit_stop_the_run_with_a_checkpoint(in_process, tmp_path):
    algo = small().fault_tolerance(restart_failed_workers=False).build()
    try:
        algo.train()
        in_process.kill(algo.workers.actors[1])
        with pytest.raises(WorkerError) as caught:
            train_until(algo, Stop(iterations=1000), tmp_path, tensorboard=False, out=io.StringIO())
        assert re.fullmatch(r"rollout worker 1 died \(.+\); restart_failed_workers=False", str(caught.value))
        _, manifest = read_checkpoint(tmp_path / LATEST)
        assert manifest["state"]["iteration"] == algo.iteration >= 1
    finally:
        algo.stop()


# -- checkpoints ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [IMPALAConfig, APPOConfig])
def test_checkpoint_round_trip_and_resume(cls, tmp_path):
    algo = config("local", cls, **({"use_kl_loss": True} if cls is APPOConfig else {})).build()
    try:
        for _ in range(2):
            algo.train()
        path = algo.save(tmp_path / "ckpt")
        saved = {"weights": algo.policy.get_flat_weights(), "updates": algo.learner_updates,
                 "steps": algo.timesteps_total, "adam": algo.optimizer.state_dict()["state"][0]["exp_avg"].clone()}
        if isinstance(algo, APPO):
            saved |= {"target": algo.target.get_flat_weights(), "kl_coeff": algo.kl_coeff,
                      "target_updates": algo.num_target_updates}
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert type(restored) is (APPO if cls is APPOConfig else IMPALA)
        np.testing.assert_array_equal(restored.policy.get_flat_weights(), saved["weights"])
        assert (restored.learner_updates, restored.timesteps_total) == (saved["updates"], saved["steps"])
        torch.testing.assert_close(restored.optimizer.state_dict()["state"][0]["exp_avg"], saved["adam"])
        if isinstance(restored, APPO):
            np.testing.assert_array_equal(restored.target.get_flat_weights(), saved["target"])
            assert (restored.kl_coeff, restored.num_target_updates) == (saved["kl_coeff"], saved["target_updates"])
        result = restored.train()  # workers start with the restored weights and version
        assert result["learner_updates"] > saved["updates"] and result["timesteps_total"] > saved["steps"]
        assert min(result["policy_lags_this_iter"]) >= 0
    finally:
        restored.stop()
