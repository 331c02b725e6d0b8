"""Evaluation videos: the frames of the driver's environment while ``evaluate()`` plays.

Frames come from the environment's ``rgb_array`` render (a multi-agent environment's ``render()``:
the whole scene, one frame per environment step). Environments that cannot
render (ale-py's vector Atari behind the default DeepMind preprocessing) give the
image the agent sees instead: the newest frame of its observation. Headless
rendering: CartPole draws with pygame; ALE renders by itself; MuJoCo needs an
OpenGL platform, ``MUJOCO_GL=egl`` (the default set here; Mesa's EGL draws on the CPU
where there is no GPU) or ``MUJOCO_GL=osmesa`` (Debian: ``apt-get install libosmesa6``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from volley.errors import ConfigError, shown
from volley.guarded_env import guarded_envs
from volley.rollout.multi_agent import MultiAgentRolloutWorker
from volley.rollout.worker import RolloutWorker

FORMATS = (".gif", ".mp4")
INSTALL_HINT = "pip install 'volley-rl[video]'"


def check_video_path(path: str) -> Path:
    """The video path, if its format can be written; a ConfigError naming it otherwise."""
    video = Path(path)
    suffix = video.suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"unsupported video extension '{video.suffix or path}': "
                          f"use {' or '.join(FORMATS)}")
    try:
        import imageio  # noqa: F401
        if suffix == ".mp4":
            import imageio_ffmpeg  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"writing '{path}' needs {exc.name}: {INSTALL_HINT}") from None
    if not video.parent.is_dir():
        raise ConfigError(f"no directory '{video.parent}' to write the video '{path}' into")
    return video


class FrameRecorder:
    """Grabs one RGB frame of a worker's environment 0 per call (``before_step`` of evaluate).

    The first frame that cannot be had stops the recording; ``failure`` then says why
    in one line, and evaluation goes on without a video.
    """

    def __init__(self, worker: RolloutWorker | MultiAgentRolloutWorker, env_id: str) -> None:
        os.environ.setdefault("MUJOCO_GL", "egl")  # read when MuJoCo first renders
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws offscreen, no display
        self.worker = worker
        self.env_id = env_id
        # what is drawn: a single-agent worker's vector of environments, or a multi-agent one's first
        self.env = worker.envs[0] if isinstance(worker, MultiAgentRolloutWorker) else worker.env
        self.frames: list[np.ndarray] = []
        self.failure: str | None = None

    @property
    def fps(self) -> float:
        return float(self.env.metadata.get("render_fps") or 30)

    def __call__(self) -> None:
        if self.failure is not None:
            return
        try:
            frame = self._grab()
        except Exception as exc:  # any renderer's failure (pygame, OpenGL, ...) ends recording
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.failure = f"{type(exc).__name__}: {reason}{_render_hint(self.env_id)}"
            self.frames = []
            return
        self.frames.append(frame)

    def _grab(self) -> np.ndarray:
        if isinstance(self.worker, MultiAgentRolloutWorker):
            return _multi_agent_frame(self.env)
        env = self.worker.env
        if env.render_mode == "rgb_array":
            frames = env.render()
            if frames is not None:
                return np.asarray(frames[0], np.uint8)
        guards = guarded_envs(env)
        if guards is not None and guards[0].render_mode is None:  # RLlib's envs: render() gives the image
            image = _observation_image(guards[0].unwrapped.render())
            if image is not None:
                return image
        observations = self.worker.observations
        frame = None if observations is None else _observation_image(observations[0])
        if frame is None:
            raise ValueError(f"it has no rgb_array render and its observations "
                             f"{self.worker.observation_space} are not images")
        return frame


def _multi_agent_frame(env: Any) -> np.ndarray:
    """A multi-agent environment's ``render()`` as HxWx3 uint8: its ``rgb_array`` render, or what an
    environment without a render mode draws by itself (as RLlib's example environments do)."""
    mode = getattr(env, "render_mode", None)
    if mode not in (None, "rgb_array"):
        raise ValueError(f"its render_mode is {mode!r}; a video needs 'rgb_array'")
    frame = env.render()
    image = None if frame is None else _observation_image(np.asarray(frame))
    if image is None:
        raise ValueError(f"its render() gave {shown(frame)}, not an RGB image: make it with render_mode='rgb_array'")
    return image


def _render_hint(env_id: str) -> str:
    """What to install or set when an environment of this kind cannot render."""
    import gymnasium as gym

    entry = str(gym.registry[env_id].entry_point) if env_id in gym.registry else ""
    if "mujoco" in entry:
        return ("; MuJoCo renders headless with MUJOCO_GL=egl (Mesa's libegl1) or "
                "MUJOCO_GL=osmesa (apt-get install libosmesa6)")
    if "classic_control" in entry:
        return f"; classic-control envs draw with pygame: {INSTALL_HINT}"
    return ""


def _observation_image(obs: Any) -> np.ndarray | None:
    """The newest frame of an image observation as HxWx3 uint8, or None if it is no image.

    Handles HxW, HxWxC (C = 1 or 3) and frame stacks CxHxW (the DeepMind layout).
    """
    if not isinstance(obs, np.ndarray) or obs.dtype != np.uint8 or obs.ndim not in (2, 3):
        return None
    if obs.ndim == 3 and obs.shape[-1] not in (1, 3):
        obs = obs[-1]  # [stack, H, W]: the newest frame
    if obs.ndim == 2:
        obs = obs[..., None]
    return np.ascontiguousarray(np.broadcast_to(obs, (*obs.shape[:2], 3)))


def write_video(frames: list[Any], path: Path, fps: float) -> None:
    """Write ``frames`` as an animated GIF (looping) or an H.264 MP4."""
    import imageio.v2 as imageio

    if path.suffix.lower() == ".gif":
        imageio.mimsave(path, frames, format="GIF", duration=1000 / fps, loop=0)
    else:
        # macro_block_size 2: even sizes are all H.264 needs, so frames keep their size
        imageio.mimsave(path, frames, format="FFMPEG", fps=fps, macro_block_size=2)
