"""Evaluation videos (one frame per episode step, headless) and the driver's environment."""

from __future__ import annotations

import re

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest
from PIL import Image, ImageSequence
from test_cli import volley

from volley import PPOConfig, register_env
from volley.envs import SingleEnv
from volley.errors import ConfigError
from volley.learner.base import EVAL_SEED_OFFSET
from volley.video import FrameRecorder, _observation_image, write_video


def untrained_checkpoint(tmp_path, env: str) -> str:
    config = PPOConfig().update(env=env, engine="local", num_workers=0, num_envs_per_worker=1)
    with config.build() as algo:
        return algo.save(tmp_path / "checkpoint")


def episode_steps(stdout: str, episodes: int) -> int:
    """Total steps from the printed mean length (exact to 0.1 for one or two episodes)."""
    mean = float(re.search(r"length (\S+)", stdout).group(1))
    return round(mean * episodes)


@pytest.mark.parametrize(("env", "episodes", "size"), [
    ("CartPole-v1", 2, (400, 600)),  # pygame, offscreen
    ("Humanoid-v5", 1, (480, 480)),  # MuJoCo through EGL (Mesa draws on the CPU without a GPU)
])
def test_mp4_renders_headless_one_frame_per_episode_step(tmp_path, env, episodes, size):
    checkpoint = untrained_checkpoint(tmp_path, env)
    video = tmp_path / "episodes.mp4"
    out = volley("evaluate", checkpoint, "--episodes", str(episodes), "--video", str(video))
    assert out.returncode == 0, out.stderr
    frames = imageio.mimread(video, memtest=False)
    assert len(frames) == episode_steps(out.stdout, episodes) > 2
    assert f"video of {len(frames)} frames written" in out.stdout
    assert frames[0].shape[:2] == size
    assert frames[0].std() > 5  # a drawn scene, not a blank image
    assert out.stderr.strip() == ""


def test_a_multi_agent_run_is_recorded_one_frame_per_environment_step(tmp_path):
    config = PPOConfig().environment("MultiAgentCartPole", env_config={"num_agents": 2}).update(
        engine="local", num_workers=0)
    with config.build() as algo:
        checkpoint = algo.save(tmp_path / "checkpoint")
    video = tmp_path / "episodes.mp4"
    out = volley("evaluate", checkpoint, "--episodes", "2", "--video", str(video))
    assert out.returncode == 0, out.stderr
    frames = imageio.mimread(video, memtest=False)
    assert len(frames) == episode_steps(out.stdout, 2) > 2
    assert frames[0].shape == (400, 600, 3)  # agent 0's CartPole
    assert out.stderr.strip() == ""


def test_gif_lasts_one_frame_time_per_episode_step(tmp_path):
    # GIF writers merge identical consecutive frames into one longer frame, so the
    # playing time, not the frame count, is what must match the episode.
    config = PPOConfig().update(env="CartPole-v1", engine="local", num_workers=0)
    with config.build() as algo:
        recorder = FrameRecorder(algo.driver_worker(), config.env)
        stats = algo.evaluate(1, before_step=recorder)
    assert len(recorder.frames) == stats["episode_len_mean"]
    write_video(recorder.frames, tmp_path / "episode.gif", recorder.fps)
    with Image.open(tmp_path / "episode.gif") as gif:
        durations = [frame.info["duration"] for frame in ImageSequence.Iterator(gif)]
    assert recorder.fps == 50  # CartPole's render_fps: 20 ms a frame
    assert sum(durations) == 20 * stats["episode_len_mean"]


def test_driver_env_is_the_one_evaluate_plays(tmp_path):
    """Stepping ``algo.env`` by hand with compute_single_action replays evaluate()'s episode."""
    config = PPOConfig().update(env="CartPole-v1", engine="local", num_workers=0, seed=4,
                                create_env_on_driver=True)
    with config.build() as algo:
        env = algo.env
        assert isinstance(env, SingleEnv)
        assert env.observation_space == algo.observation_space
        obs, _ = env.reset(seed=config.seed + EVAL_SEED_OFFSET)
        total, steps, done = 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(algo.compute_single_action(obs))
            total, steps, done = total + reward, steps + 1, terminated or truncated
        stats = algo.evaluate(1)
    assert (stats["episode_reward_mean"], stats["episode_len_mean"]) == (total, steps)


def test_driver_env_needs_the_option_where_workers_sample():
    """As RLlib's local worker: the driver has an environment when it samples (num_workers=0),
    else only with create_env_on_driver."""
    config = PPOConfig().update(env="CartPole-v1", engine="local", num_workers=1)
    with config.build() as algo, pytest.raises(ConfigError, match="create_env_on_driver=True"):
        _ = algo.env


def test_pong_renders_its_screen_and_pixels_fall_back_to_the_observation():
    config = PPOConfig().update(env="ALE/Pong-ram-v5", engine="local", num_workers=0,
                                create_env_on_driver=True)
    with config.build() as algo:
        obs, _ = algo.env.reset(seed=0)
        algo.env.step(algo.compute_single_action(obs))
        assert algo.env.render().shape == (210, 160, 3)
    config = PPOConfig().update(env="ALE/Pong-v5", engine="local", num_workers=0)
    with config.build() as algo:  # ale-py's vector Atari cannot render: the newest 84x84 frame
        recorder = FrameRecorder(algo.driver_worker(), config.env)

        def grab() -> None:
            recorder()
            if len(recorder.frames) == 3:
                raise Enough

        with pytest.raises(Enough):
            algo.evaluate(1, before_step=grab)
    assert recorder.failure is None
    assert [frame.shape for frame in recorder.frames] == [(84, 84, 3)] * 3


class Enough(Exception):
    """Ends a (long) Pong episode once the test has its frames."""


def test_observation_image_takes_the_newest_frame_of_a_stack():
    stack = np.stack([np.full((4, 5), i, np.uint8) for i in range(4)])  # [stack, H, W]
    image = _observation_image(stack)
    assert image.shape == (4, 5, 3) and (image == 3).all()
    assert _observation_image(np.zeros(4, np.float32)) is None


@pytest.mark.parametrize(("env", "mujoco_gl", "reason"), [
    ("plain-cartpole", None, "no rgb_array render and its observations Box"),
    ("Humanoid-v5", "glfw", "MuJoCo renders headless with MUJOCO_GL=egl"),  # glfw needs a display
])
def test_unrenderable_env_ends_recording_with_a_one_line_reason(monkeypatch, env, mujoco_gl, reason):
    register_env("plain-cartpole", lambda _: gym.make("CartPole-v1"))  # made without render_mode
    if mujoco_gl is not None:
        monkeypatch.setenv("MUJOCO_GL", mujoco_gl)
    config = PPOConfig().update(env=env, engine="local", num_workers=0, num_envs_per_worker=1)
    with config.build() as algo:
        recorder = FrameRecorder(algo.driver_worker(), env)
        stats = algo.evaluate(1, before_step=recorder)
    assert stats["episodes_this_iter"] == 1  # evaluation went on without frames
    assert recorder.frames == []
    assert reason in recorder.failure and "\n" not in recorder.failure
