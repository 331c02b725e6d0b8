"""RLlib's features that call the user's code, used as RLlib 2.9's example scripts use them
(custom_eval.py, env_rendering_and_recording.py, curriculum_learning.py) and RLlib's older
``horizon`` key (issue 49)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from volley import ConfigError, PPOConfig, TaskSettableEnv, collect_episodes, summarize_episodes


def quick(env="CartPole-v1", engine="local", **evaluation):
    return (PPOConfig().environment(env).resources(engine=engine).debugging(seed=1)
            .rollouts(num_rollout_workers=1, num_envs_per_worker=2)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1).evaluation(**evaluation))


# -- custom_evaluation_function --------------------------------------------------------------


def custom_eval_function(algorithm, eval_workers):
    """custom_eval.py's shape: set something on each environment, play, add a metric of its own."""
    seen = eval_workers.foreach_worker(lambda w: w.foreach_env(lambda env: type(env).__name__))
    metrics = eval_workers.evaluate(num_episodes=3)
    metrics["foo"] = 1
    metrics["envs_seen"] = seen[0]
    metrics["iteration"] = algorithm.iteration
    return metrics


def test_a_custom_evaluation_function_gives_the_evaluation_metrics():
    algo = quick(evaluation_interval=1, custom_evaluation_function=custom_eval_function).build()
    result = algo.train()
    evaluation = result["evaluation"]
    assert evaluation["foo"] == 1 and evaluation["iteration"] == 1
    assert evaluation["envs_seen"] == ["CartPoleVectorEnv"]  # the driver's: a native vector env, as itself
    assert evaluation["episodes_this_iter"] == 3 and len(evaluation["hist_stats"]["episode_lengths"]) == 3
    assert algo.evaluate()["evaluation"]["foo"] == 1  # RLlib's algo.evaluate()["evaluation"]
    algo.stop()


def rllib_custom_eval_function(algorithm, eval_workers):
    """RLlib 2.9's custom_eval.py, with only the imports changed: set each environment, sample
    episodes on the workers, collect and summarise them."""
    eval_workers.foreach_worker(func=lambda w: w.foreach_env(lambda env: env.set_task(4 if w.worker_index == 1
                                                                                      else 6)))
    for _ in range(5):
        eval_workers.foreach_worker(func=lambda w: w.sample(), local_worker=False)
    episodes = collect_episodes(workers=eval_workers, timeout_seconds=99999)
    metrics = summarize_episodes(episodes)
    metrics["foo"] = 1
    return metrics


def test_rllibs_custom_eval_example_runs():
    algo = (quick(Corridor, evaluation_interval=1, evaluation_num_workers=2,
                  custom_evaluation_function=rllib_custom_eval_function)
            .environment(env_config={"start_length": 3}).build())
    evaluation = algo.train()["evaluation"]
    # the driver's evaluation worker (index 0) plays them all, in the corridor set for it
    assert evaluation["hist_stats"]["episode_lengths"] == [6] * 5
    assert evaluation["episode_reward_mean"] == 6.0 and evaluation["foo"] == 1
    algo.stop()


def test_a_custom_evaluation_function_must_return_a_dict():
    algo = quick(custom_evaluation_function=lambda algorithm, workers: 0.5).build()
    with pytest.raises(ConfigError, match=r"custom_evaluation_function <lambda> returned 0.5: it must return a "
                                          r"dict"):
        algo.evaluate()
    algo.stop()


# -- render_env ------------------------------------------------------------------------------


class CustomRenderedEnv(gym.Env):
    """env_rendering_and_recording.py's environment: render() (old style, no render_mode) gives
    the image."""

    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Box(0.0, 999.0, shape=(1,), dtype=np.float32)

    def __init__(self, config):
        self.end_pos, self.max_steps = config.get("corridor_length", 10), config.get("max_steps", 100)

    def reset(self, *, seed=None, options=None):
        self.cur_pos, self.steps = 0.0, 0
        return np.array([self.cur_pos], np.float32), {}

    def step(self, action):
        self.steps += 1
        self.cur_pos = max(self.cur_pos + (1.0 if action == 1 else -1.0), 0.0)
        truncated = self.steps >= self.max_steps
        done = self.cur_pos >= self.end_pos or truncated
        return np.array([self.cur_pos], np.float32), 10.0 if done else -0.1, done, truncated, {}

    def render(self, mode="rgb"):
        return np.full((30, 40, 3), min(int(self.cur_pos) * 20, 255), dtype=np.uint8)


def test_render_env_records_the_evaluation_episodes_in_the_run_directory(tmp_path):
    imageio = pytest.importorskip("imageio.v2")
    config = (quick(evaluation_interval=1, evaluation_duration=2,
                    evaluation_config=PPOConfig.overrides(render_env=True))
              .environment(CustomRenderedEnv, env_config={"corridor_length": 3, "max_steps": 12}))
    algo = config.build()
    algo.results_dir = tmp_path
    result = algo.train()
    video = Path(result["evaluation"]["video"])
    assert video.parent == tmp_path / "videos" and video.name.startswith("evaluation_000001")
    frames = imageio.mimread(video)
    assert len(frames) == result["evaluation"]["timesteps_this_iter"]  # a frame per evaluation step
    assert frames[0].shape[:2] == (30, 40)
    algo.stop()


# -- env_task_fn and TaskSettableEnv ---------------------------------------------------------


class Corridor(TaskSettableEnv):
    """curriculum_learning.py's idea: the task is the episode's length, set between iterations."""

    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)

    def __init__(self, config):
        self.length = config.get("start_length", 3)

    def get_task(self):
        return self.length

    def set_task(self, task):
        self.length = task

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.steps += 1
        return np.zeros(1, np.float32), 1.0, self.steps >= self.length, False, {}


def curriculum_fn(train_results, task_settable_env, env_ctx):
    """Longer corridors as training goes on; env_ctx is RLlib's EnvContext (env_config and where)."""
    assert env_ctx["start_length"] == 3 and env_ctx.vector_index in (0, 1)
    return 3 + 2 * train_results["training_iteration"]


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_env_task_fn_sets_each_environments_task_after_every_iteration(engine, request):
    if engine == "ray":
        request.getfixturevalue("ray_session")
    config = quick(Corridor, engine).environment(env_config={"start_length": 3}, env_task_fn=curriculum_fn)
    algo = config.build()
    first = algo.train()
    assert set(first["episode_lengths_this_iter"]) == {3}
    algo.train()  # episodes started before the change run to the longer end: 5
    third = algo.train()
    assert set(third["episode_lengths_this_iter"]) == {7}  # the task set after iteration 2
    assert algo.workers.call("foreach_env", lambda env: env.get_task()) == [[9, 9]]
    algo.stop()


class FirstFindsGold(TaskSettableEnv):
    """One-step episodes; only the first few after a task is set pay 1 (FrozenLake's rare goal)."""

    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)

    def __init__(self, config):
        self.task, self.paid = 1, 0

    def get_task(self):
        return self.task

    def set_task(self, task):
        self.task, self.paid = task, 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.paid += 1
        return np.zeros(1, np.float32), float(self.paid <= 5), True, False, {}


def log10_curriculum_fn(train_results, task_settable_env, env_ctx):
    """curriculum_learning.py's curriculum_fn, as it is: the task grows with log10 of the mean return."""
    return max(min(int(np.log10(train_results["episode_reward_mean"]) + 2.1), 5), 1)


def test_env_task_fn_reads_the_mean_over_the_whole_iteration_as_rllibs():
    """RLlib averages all of an iteration's episodes when there are metrics_num_episodes_for_smoothing
    (100) or more, not the last 100: here 5 paid among 200, none among the last 100, so the script's
    log10 of the mean is -1.6, not log10(0) (OverflowError in int())."""
    config = (quick(FirstFindsGold).rollouts(num_rollout_workers=0, num_envs_per_worker=1)
              .training(train_batch_size=400, minibatch_size=100)  # rows, autoreset steps among them
              .environment(env_task_fn=log10_curriculum_fn))
    with config.build() as algo:
        result = algo.train()
    assert result["episodes_this_iter"] == 200 and result["episode_reward_mean"] == 5 / 200
    assert result["hist_stats"]["episode_reward"] == [1.0] * 5 + [0.0] * 195


def test_env_task_fn_names_an_environment_without_tasks():
    algo = quick().environment(env_task_fn=curriculum_fn).build()
    with pytest.raises(ConfigError, match=r"env_task_fn is set but the environment .* has no set_task\(\)"):
        algo.train()
    algo.stop()


# -- horizon ----------------------------------------------------------------------------------


def test_horizon_truncates_episodes_as_rllib_did():
    algo = quick().rollouts(horizon=10).build()
    result = algo.train()
    lengths = result["episode_lengths_this_iter"]
    assert max(lengths) == 10 and len(lengths) >= 64 // 10 - 1  # CartPole's random policy lasts ~20 steps
    algo.stop()
    config = PPOConfig.from_dict({**quick().to_dict(), "horizon": 7})
    assert config.horizon == 7


def test_a_horizon_past_the_environments_own_limit_is_refused():
    with pytest.raises(ConfigError, match=r"horizon=600 is larger than environment 'CartPole-v1''s own time limit "
                                          r"of 500 steps"):
        quick().rollouts(horizon=600).build()


# -- Atari model={"dim": 42} -------------------------------------------------------------------


def test_atari_frames_are_42x42_with_rllibs_dim_key():
    pytest.importorskip("ale_py")
    config = (PPOConfig().environment("ALE/Pong-v5").resources(engine="local").debugging(seed=0)
              .rollouts(num_rollout_workers=1, num_envs_per_worker=2)
              .training(model={"dim": 42, "vf_share_layers": True}, train_batch_size=64, minibatch_size=32,
                        num_epochs=1))
    algo = config.build()
    assert algo.observation_space.shape == (4, 42, 42)  # 4 grayscale 42x42 frames, RLlib's layout
    conv = algo.policy.pi_body.convs[0].weight  # the Nature CNN's first layer, on 42x42 frames
    before = conv.detach().clone()
    result = algo.train()
    assert result["timesteps_total"] == 64
    assert not np.allclose(before.numpy(), conv.detach().numpy())
    algo.stop()


def test_a_dim_too_small_for_the_cnn_is_named():
    with pytest.raises(ConfigError, match=r"model.dim=20 is too small for the Nature CNN's three conv layers: use 36"):
        PPOConfig().environment("ALE/Pong-v5").training(model={"dim": 20}).validate()


def test_env_task_fn_and_custom_evaluation_function_reach_a_tune_trial(ray_session, tmp_path):
    """Both functions travel to the trial's process; its sampling stays in that process (that they
    reach Ray workers from there is test_env_task_fn_sets_each_environments_task_after_every_iteration's
    [ray] case), so the trial starts no actor of its own beside Tune's."""
    from ray import tune

    from volley.tune import RunConfig, trainable

    config = (quick(Corridor, "local", evaluation_interval=1, custom_evaluation_function=custom_eval_function)
              .environment(env_config={"start_length": 3}, env_task_fn=curriculum_fn))
    tuner = tune.Tuner(trainable(config), run_config=RunConfig(
        storage_path=str(tmp_path), name="curriculum", verbose=0, stop={"training_iteration": 3}))
    (result,) = tuner.fit()
    assert result.error is None
    assert result.metrics["evaluation"]["foo"] == 1
    assert set(result.metrics["episode_lengths_this_iter"]) == {7}  # the task set after iteration 2


# -- RLlib's own classes on Ray workers ---------------------------------------------------------


def test_rllibs_own_model_and_callbacks_classes_run_on_ray_workers(ray_session):
    pytest.importorskip("ray.rllib.models.torch.torch_modelv2", reason="ray[rllib] is not installed")
    from rllib_classes import LengthCallbacks, RLlibModel

    config = quick(engine="ray").training(model={"custom_model": RLlibModel, "fcnet_hiddens": [16]})
    algo = config.callbacks(LengthCallbacks).build()
    result = algo.train()
    while result["episodes_total"] < 3:
        result = algo.train()
    assert result["num_workers"] == 1
    assert result["custom_metrics"]["length_seen_mean"] == pytest.approx(result["episode_len_mean"])
    algo.stop()
