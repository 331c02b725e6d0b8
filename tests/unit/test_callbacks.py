"""Callbacks and custom metrics, called exactly as RLlib's docs spell them, on the local engine.

The environment's episodes have lengths that differ episode to episode and observations that
count the steps, so each custom metric has a value computed by hand from what volley reports
independently of the callbacks (the episodes' lengths and returns).
"""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest

from volley import (
    CallbackError,
    ConfigError,
    DefaultCallbacks,
    Episode,
    PPOConfig,
    RLlibCallback,
    make_multi_callbacks,
    register_env,
)
from volley.algorithms.ppo import PPO
from volley.callbacks import Hooks, summarize
from volley.run import LATEST, Stop, train_until


class CountingEnv(gym.Env):
    """Observation ``[t, k]``: the step ``t`` of episode ``k`` of this environment, which lasts
    ``2 + (first seed + k) % 6`` steps; reward = action; ``info`` ``{"t": t}``."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict) -> None:
        self.offset, self.k, self.t = 0, -1, 0
        # (episode, step) at which the env of seed 0 raises, once
        self.fail_at = tuple(config["fail_at"]) if "fail_at" in config else None
        self.truncate = config.get("truncate", False)  # episodes end truncated, not terminated

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.k], np.float32)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.offset = seed
        self.k, self.t = self.k + 1, 0
        return self._obs(), {"t": 0}

    def step(self, action):
        self.t += 1
        if self.fail_at == (self.k, self.t) and self.offset == 0:
            self.fail_at = None
            raise RuntimeError("flaky")
        ended = self.t >= 2 + (self.offset + self.k) % 6
        return self._obs(), float(action), ended and not self.truncate, ended and self.truncate, {"t": self.t}


register_env("Counting", CountingEnv)


class CountingCallbacks(DefaultCallbacks):
    """What RLlib's custom-metrics example does, on CountingEnv's known episodes."""

    def on_episode_start(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        assert episode.length == 0 and episode.total_reward == 0
        assert episode.last_observation_for()[0] == 0 and episode.last_info_for() == {"t": 0}
        episode.user_data["t"] = []
        episode.hist_data["t"] = []

    def on_episode_step(self, *, worker, base_env, policies=None, episode, env_index, **kwargs):
        assert episode.length > 0
        t = episode.last_observation_for()[0]
        assert t == episode.length == episode.last_info_for()["t"] == episode.last_raw_obs_for()[0]
        episode.user_data["t"].append(float(t))
        episode.user_data.setdefault("actions", 0)
        episode.user_data["actions"] += int(episode.last_action_for())

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        episode.custom_metrics["t_sum"] = sum(episode.user_data["t"])
        episode.custom_metrics["actions"] = episode.user_data["actions"]
        episode.custom_metrics["last_t"] = episode.last_info_for()["t"]
        episode.hist_data["t"] = episode.user_data["t"]


def counting(**keys) -> PPOConfig:
    return (PPOConfig().environment("Counting").resources(engine="local")
            .rollouts(num_workers=2, num_envs_per_worker=3)
            .training(train_batch_size=120, minibatch_size=60, num_epochs=1, model={"fcnet_hiddens": [8]})
            .callbacks(CountingCallbacks).update(**keys))


def assert_custom_metrics_by_hand(result: dict) -> None:
    """Each custom metric equals its value computed from the episodes' lengths and returns."""
    lengths = np.array(result["hist_stats"]["episode_lengths"])
    returns = np.array(result["hist_stats"]["episode_reward"])
    metrics = result["custom_metrics"]
    t_sums = lengths * (lengths + 1) / 2  # 1 + 2 + ... + L
    assert len(lengths) > 10
    for key, values in (("t_sum", t_sums), ("actions", returns), ("last_t", lengths)):
        assert metrics[f"{key}_mean"] == pytest.approx(values.mean())
        assert (metrics[f"{key}_min"], metrics[f"{key}_max"]) == (values.min(), values.max())
    assert result["hist_stats"]["t"] == [float(t) for n in lengths for t in range(1, n + 1)]
    assert metrics["actions_mean"] == pytest.approx(result["episode_reward_mean"])


def test_custom_metrics_are_the_means_computed_by_hand_from_the_episodes():
    with counting().build() as algo:
        for _ in range(3):
            result = algo.train()
    assert_custom_metrics_by_hand(result)
    assert result["env_runners"]["custom_metrics"] is result["custom_metrics"]  # RLlib 2.10+'s place
    assert result["env_runners"]["hist_stats"]["t"] == result["hist_stats"]["t"]


def test_the_window_is_episode_reward_means_own_and_rllibs():
    """RLlib's Algorithm._compile_iteration_results: an iteration of at least
    metrics_num_episodes_for_smoothing episodes is summarised whole (not its last 7); a shorter one
    is topped up with the latest episodes of earlier iterations, oldest first."""
    with counting(metrics_num_episodes_for_smoothing=7).build() as algo:
        for _ in range(2):
            result = algo.train()
    assert result["episodes_this_iter"] > 7
    assert result["hist_stats"]["episode_lengths"] == result["episode_lengths_this_iter"]
    lengths = np.array(result["hist_stats"]["episode_lengths"])
    assert result["custom_metrics"]["last_t_mean"] == pytest.approx(lengths.mean()) == result["episode_len_mean"]
    assert result["episode_reward_mean"] == pytest.approx(np.mean(result["episode_returns_this_iter"]))
    with counting(metrics_num_episodes_for_smoothing=10_000).build() as algo:
        first, second = algo.train(), algo.train()
    both = first["episode_lengths_this_iter"] + second["episode_lengths_this_iter"]
    assert second["hist_stats"]["episode_lengths"] == both
    assert second["custom_metrics"]["last_t_mean"] == pytest.approx(np.mean(both))


def test_evaluation_reports_its_own_episodes_custom_metrics():
    with counting().evaluation(evaluation_interval=1, evaluation_duration=5).build() as algo:
        result = algo.train()
    evaluation = result["evaluation"]
    lengths = np.array(evaluation["hist_stats"]["episode_lengths"])
    assert len(lengths) == 5 and evaluation["episodes_this_iter"] == 5
    assert evaluation["custom_metrics"]["last_t_mean"] == pytest.approx(lengths.mean())
    assert evaluation["env_runners"]["custom_metrics"]["t_sum_max"] == (lengths * (lengths + 1) / 2).max()


def test_keep_per_episode_custom_metrics_keeps_the_values():
    with counting().reporting(keep_per_episode_custom_metrics=True).build() as algo:
        result = algo.train()
    assert result["custom_metrics"]["last_t"] == result["hist_stats"]["episode_lengths"]


class TrainResult(RLlibCallback):  # RLlib's newer name of the same class
    def on_train_result(self, *, algorithm, result, **kwargs):
        result["callback_ok"] = True
        result["iteration_squared"] = np.int64(algorithm.iteration) ** 2


def test_on_train_result_adds_keys_to_the_result_and_the_progress_file(tmp_path):
    config = counting().callbacks([CountingCallbacks, TrainResult])  # RLlib 2.x takes a list too
    with config.build() as algo:
        train_until(algo, Stop(iterations=2), tmp_path, tensorboard=False)
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [(r["callback_ok"], r["iteration_squared"]) for r in rows] == [(True, 1), (True, 4)]
    assert rows[-1]["custom_metrics"]["last_t_mean"] == pytest.approx(rows[-1]["episode_len_mean"])
    assert "env_runners" not in rows[-1]  # the views are not logged: each number once


class Everything(DefaultCallbacks):
    """Counts every hook call on this instance (the local engine's workers are in this process)."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}
        self.trajectory_errors: list[str] = []
        self.sampled_advantages: list[np.ndarray] = []
        self.learned: list = []

    def count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def on_algorithm_init(self, *, algorithm, **kwargs):
        self.count("on_algorithm_init")

    def on_sub_environment_created(self, *, worker, sub_environment, env_context, env_index=None, **kwargs):
        assert isinstance(sub_environment, CountingEnv) and env_context.vector_index == env_index
        self.count("on_sub_environment_created")

    def on_episode_created(self, *, worker, base_env, policies, env_index, episode, **kwargs):
        assert isinstance(episode, Episode) and len(base_env.get_sub_environments()) == worker.num_envs
        self.count("on_episode_created")

    def on_postprocess_trajectory(self, *, worker, episode, agent_id, policy_id, policies,
                                  postprocessed_batch, original_batches, **kwargs):
        self.count("on_postprocess_trajectory")
        t = postprocessed_batch["obs"][:, 0]  # one episode's rows: its steps, consecutive
        if not (np.all(np.diff(t) == 1) and np.all(postprocessed_batch["obs"][:, 1] == postprocessed_batch["obs"][0, 1])):
            self.trajectory_errors.append(f"not one episode: {postprocessed_batch['obs'].tolist()}")
        if episode.last_done_for() and t[-1] != episode.length - 1:
            self.trajectory_errors.append(f"ended episode of {episode.length} steps ends at t={t[-1]}")
        postprocessed_batch["advantages"] = np.full(len(t), float(episode.episode_id % 1000), np.float32)
        postprocessed_batch["episode_t"] = t.astype(np.int64)

    def on_sample_end(self, *, worker, samples, **kwargs):
        self.count("on_sample_end")
        self.sampled_advantages.append(samples["advantages"].copy())
        assert samples.count == len(samples)
        assert np.array_equal(samples["episode_t"], samples["obs"][:, 0])

    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        result["sum_actions_in_train_batch"] = np.sum(train_batch["actions"])
        self.learned.append(train_batch)

    def on_evaluate_start(self, *, algorithm, **kwargs):
        self.count("on_evaluate_start")

    def on_evaluate_end(self, *, algorithm, evaluation_metrics, **kwargs):
        evaluation_metrics["evaluated_by_callback"] = 1

    def on_checkpoint_loaded(self, *, algorithm, **kwargs):
        self.count("on_checkpoint_loaded")


def test_every_hook_is_called_where_rllib_calls_it(tmp_path):
    config = counting(num_workers=0).callbacks(Everything)
    with config.build() as algo:
        driver, worker = algo.callbacks, algo.workers.workers[0].hooks.callbacks
        assert driver is not worker  # each worker builds its own instance, as RLlib's do
        assert driver.calls == {"on_algorithm_init": 1} and worker.calls == {"on_sub_environment_created": 3}
        batch = algo.sample()
        assert worker.calls["on_sample_end"] == 1 and not worker.trajectory_errors
        assert worker.calls["on_postprocess_trajectory"] >= 6  # at least one trajectory per env
        assert np.array_equal(batch["advantages"], worker.sampled_advantages[0])  # written back
        assert np.array_equal(batch["episode_t"], batch["obs"][:, 0])  # a column a hook added
        result = algo.train()
        assert not worker.trajectory_errors
        learner = result["learner_custom_metrics"]  # averaged over the batches learned on since the last
        assert len(driver.learned) == 2  # result: the one sample() returned, and train()'s
        assert learner["sum_actions_in_train_batch"] == np.mean([b["actions"].sum() for b in driver.learned])
        assert result["info"]["learner"]["default_policy"]["custom_metrics"] == learner
        assert algo.evaluate(2)["evaluated_by_callback"] == 1 and driver.calls["on_evaluate_start"] == 1
        path = algo.save(tmp_path / "checkpoint")
    restored = PPO.from_checkpoint(path)
    try:
        assert restored.config.callbacks_class == config.callbacks_class
        assert restored.callbacks.calls == {"on_algorithm_init": 1, "on_checkpoint_loaded": 1}
    finally:
        restored.stop()


def test_a_hook_nobody_overrides_is_never_called():
    class Nothing(DefaultCallbacks):
        pass

    class TrainOnly(DefaultCallbacks):
        def on_train_result(self, *, algorithm, result, **kwargs):
            pass

    for cls in (Nothing, TrainOnly, make_multi_callbacks([Nothing, TrainOnly])):
        with counting(num_workers=0).callbacks(cls).build() as algo:
            worker = algo.workers.workers[0]
            assert worker.episodes is None  # the step loop follows no episodes
            assert not worker.hooks.uses("on_sample_end", "on_episode_step", "on_sub_environment_created")
    assert not Hooks(Nothing()).uses("on_episode_step") and Hooks(CountingCallbacks()).uses("on_episode_step")


class First(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.user_data["order"] = ["first"]
        episode.custom_metrics["first"] = 1.0


class Second(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["second_after_first"] = float(episode.user_data["order"] == ["first"])


def test_make_multi_callbacks_runs_each_class_in_order_and_survives_a_checkpoint(tmp_path):
    config = counting(num_workers=0).callbacks(make_multi_callbacks([First, Second]))
    assert config.callbacks_class == [f"{__name__}:First", f"{__name__}:Second"]
    with config.build() as algo:
        result = algo.train()
        path = algo.save(tmp_path / "checkpoint")
    assert result["custom_metrics"]["second_after_first_mean"] == 1.0 and "first_min" in result["custom_metrics"]
    restored = PPO.from_checkpoint(path)
    try:
        assert restored.train()["custom_metrics"]["second_after_first_min"] == 1.0
    finally:
        restored.stop()


class Broken(DefaultCallbacks):
    def on_episode_step(self, *, episode, **kwargs):
        if episode.length == 3:
            episode.user_data["x"] = 1 / 0


def test_a_hook_that_raises_ends_the_run_naming_hook_worker_and_exception_with_a_checkpoint(tmp_path):
    with counting().callbacks(Broken).build() as algo, pytest.raises(CallbackError) as raised:
        train_until(algo, Stop(iterations=3), tmp_path, tensorboard=False)
    assert str(raised.value) == ("Broken.on_episode_step raised ZeroDivisionError in rollout worker 0: "
                                 "division by zero")
    assert (tmp_path / LATEST / "volley_checkpoint.json").exists()  # the final checkpoint


def test_a_driver_hook_that_raises_is_named_without_a_worker():
    class BadResult(DefaultCallbacks):
        def on_train_result(self, *, result, **kwargs):
            result["missing"] += 1

    with counting(num_workers=0).callbacks(BadResult).build() as algo, pytest.raises(CallbackError) as raised:
        algo.train()
    assert str(raised.value) == "BadResult.on_train_result raised KeyError: 'missing'"


def test_a_hook_that_raises_in_on_algorithm_init_stops_the_build():
    class BadInit(DefaultCallbacks):
        def on_algorithm_init(self, *, algorithm, **kwargs):
            raise ValueError("no")

    with pytest.raises(CallbackError, match=r"^.*BadInit.on_algorithm_init raised ValueError: no$"):
        counting(num_workers=0).callbacks(BadInit).build()


def test_an_unknown_or_wrong_callbacks_class_is_one_line_naming_it():
    config = PPOConfig.from_dict({**counting().to_dict(), "callbacks_class": "my_project.hooks:MyCallbacks"})
    with pytest.raises(ConfigError) as missing:
        config.build()
    message = str(missing.value)
    assert "\n" not in message and "'my_project.hooks:MyCallbacks' is not in this process" in message
    assert "config.callbacks(MyCallbacks)" in message
    with pytest.raises(ConfigError, match=r"takes a subclass of DefaultCallbacks .* got <class 'dict'>"):
        PPOConfig().callbacks(dict)


def test_an_environment_that_fails_drops_its_episode_and_keeps_the_metrics_aligned():
    class Created(CountingCallbacks):
        made = 0

        def on_sub_environment_created(self, **kwargs):
            type(self).made += 1

    config = counting(num_workers=0, env_config={"fail_at": [1, 2]}).callbacks(Created)
    with config.build() as algo:
        for _ in range(2):
            result = algo.train()
    assert result["num_env_errors"] == 1 and Created.made == 3 + 1  # made again once
    assert_custom_metrics_by_hand(result)


def test_a_native_vector_env_has_no_sub_environments_and_empty_infos():
    seen = []

    class Native(DefaultCallbacks):
        def on_sub_environment_created(self, *, sub_environment, env_index=None, **kwargs):
            seen.append((type(sub_environment).__name__, env_index))

        def on_episode_end(self, *, base_env, episode, **kwargs):
            assert base_env.get_sub_environments() == [] and episode.last_info_for() == {}
            episode.custom_metrics["pole_angle"] = abs(episode.last_observation_for()[2])

    config = (PPOConfig().environment("CartPole-v1").resources(engine="local").callbacks(Native)
              .training(train_batch_size=256, minibatch_size=128))
    with config.build() as algo:
        result = algo.train()
    assert seen == [("CartPoleVectorEnv", None)]
    assert 0 < result["custom_metrics"]["pole_angle_max"] < 0.25  # CartPole ends beyond 0.2095 rad


def test_summarize_leaves_nan_out_as_rllib_does():
    records = [({"a": 1.0, "b": math.nan}, {"h": [1, 2]}), ({"a": 3.0, "b": math.nan}, {"h": [np.float32(3)]}),
               ({"a": math.nan}, {})]
    metrics, hist = summarize(records)
    assert (metrics["a_mean"], metrics["a_min"], metrics["a_max"]) == (2.0, 1.0, 3.0)
    assert all(math.isnan(metrics[f"b_{s}"]) for s in ("mean", "min", "max"))
    assert hist == {"h": [1, 2, 3.0]} and type(hist["h"][2]) is float
    assert summarize(records, keep_per_episode=True)[0] == {"a": [1.0, 3.0], "b": []}
    with pytest.raises(CallbackError, match=r"^custom metric 'a' is 'high': episode.custom_metrics holds numbers"):
        summarize([({"a": "high"}, {})])



class Trajectories(DefaultCallbacks):
    """Records each trajectory IMPALA's workers hand ``on_postprocess_trajectory``."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []
        self.ended = 0

    def on_postprocess_trajectory(self, *, worker, episode, postprocessed_batch, **kwargs):
        obs, bootstrap = postprocessed_batch["obs"], postprocessed_batch["bootstrap"]
        if not (np.all(np.diff(obs[:, 0]) == 1) and np.all(obs[:, 1] == obs[0, 1])):
            self.errors.append(f"not one episode: {obs.tolist()}")
        if episode.last_done_for():
            self.ended += 1
            if not (bootstrap[-1] and obs[-1, 0] == episode.length and bootstrap.sum() == 1):
                self.errors.append(f"ended episode of {episode.length} steps: {obs.tolist()} {bootstrap.tolist()}")


def test_impala_trajectories_end_on_the_bootstrap_row_of_a_truncated_episode():
    """V-trace's workers add a row holding a truncated episode's final observation: the episode's
    trajectory ends on it (and a running one on the row after the fragment)."""
    from volley import IMPALAConfig
    config = (IMPALAConfig().environment("Counting", env_config={"truncate": True}).resources(engine="local")
              .rollouts(num_workers=1, num_envs_per_worker=3, rollout_fragment_length=10)
              .training(train_batch_size=30, model={"fcnet_hiddens": [8]}).callbacks(Trajectories))
    with config.build() as algo:
        algo.train()
        hooks = algo.workers.workers[0].hooks.callbacks
        assert hooks.ended > 5 and not hooks.errors


def test_a_list_of_callbacks_classes_with_a_bad_element_is_named_whole():
    with pytest.raises(ConfigError, match=r"got 1 in \(1, 2\)$"):
        PPOConfig().update(callbacks_class=(1, 2))


class BatchBuilderCallbacks(DefaultCallbacks):
    """custom_metrics_and_callbacks.py's on_episode_end, which reads RLlib's sample collector."""

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        if worker.config.batch_mode == "truncate_episodes":
            assert episode.batch_builder.policy_collectors["default_policy"].batches[-1]["dones"][-1]


def test_rllibs_episode_internals_are_refused_in_one_line_saying_what_to_use():
    with counting().callbacks(BatchBuilderCallbacks).build() as algo, \
            pytest.raises(CallbackError, match=r"^BatchBuilderCallbacks.on_episode_end raised AttributeError in "
                                               r"rollout worker 0: RLlib's Episode.batch_builder has no counterpart "
                                               r"in volley: RLlib's collector .* \(episode.last_done_for\(\) is True\)"):
        algo.train()
