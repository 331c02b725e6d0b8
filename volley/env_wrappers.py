"""The wrappers volley puts around an environment, and the environments it brings.

An environment with sb3-contrib's ``action_masks()`` observes its mask (:func:`with_action_masks`);
RLlib's older ``horizon`` truncates episodes (:func:`time_limited`); Karpathy's "Pong from
Pixels" preprocessing (:class:`KarpathyPong`); and CartPole without its velocities
(:class:`StatelessCartPole`), registered as ``StatelessCartPole-v1`` and ``CartPoleNoVel-v1``
when this module is imported (:mod:`volley.envs` imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from volley.errors import ConfigError, EnvError
from volley.spaces import action_layout


class KarpathyPong(gym.Wrapper):
    """Karpathy's "Pong from Pixels" preprocessing of an ALE Pong environment.

    Crop the play field, keep every second pixel of one colour channel (80x80), erase
    the two background colours, set the rest to 1, and observe the difference of
    consecutive frames (so motion is visible). Two actions: 0 is UP, 1 is DOWN.
    """

    UP, DOWN = 2, 3  # ALE Pong's action indices
    BACKGROUND = (144, 109)

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (80 * 80,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._previous: np.ndarray | None = None

    @classmethod
    def preprocess(cls, frame: np.ndarray) -> np.ndarray:
        """210x160x3 uint8 frame -> 6400 float32 of 0 and 1."""
        field = frame[35:195:2, ::2, 0]
        # two comparisons: a fifth of np.isin's time on a frame, a tenth of a Pong step's
        return ((field != cls.BACKGROUND[0]) & (field != cls.BACKGROUND[1])).astype(np.float32).ravel()

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        frame, info = self.env.reset(**kwargs)
        self._previous = self.preprocess(frame)
        return np.zeros(80 * 80, np.float32), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict]:
        frame, reward, terminated, truncated, info = self.env.step(self.DOWN if action else self.UP)
        current = self.preprocess(frame)
        assert self._previous is not None
        difference, self._previous = current - self._previous, current
        return difference, reward, terminated, truncated, info


class StatelessCartPole(gym.ObservationWrapper):
    """CartPole without its velocities: the cart's position and the pole's angle only, so that a
    policy must remember earlier observations to balance (RLlib's ``StatelessCartPole``). With
    ``keep_shape`` the velocities are zeros instead of gone: rl-zoo's ``CartPoleNoVel`` (its
    ``MaskVelocityWrapper``). Registered as ``StatelessCartPole-v1`` and ``CartPoleNoVel-v1``,
    each with a numpy vector of its own (CartPole's, its observations cut)."""

    KEPT = np.array([0, 2])  # x, theta; x_dot and theta_dot (1, 3) are the velocities

    def __init__(self, env: gym.Env, keep_shape: bool = False) -> None:
        super().__init__(env)
        self.cut = _velocity_cut(keep_shape)
        self.observation_space = self.cut(env.observation_space)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return self.cut(observation)


def _velocity_cut(keep_shape: bool) -> Callable[[Any], Any]:
    """CartPole's observations (or a Box of them, or a batch) without the velocities."""
    def cut(obs: Any) -> Any:
        if isinstance(obs, gym.spaces.Box):  # rl-zoo's keeps the space's bounds
            return obs if keep_shape else gym.spaces.Box(cut(obs.low), cut(obs.high), dtype=obs.dtype)
        if keep_shape:
            return np.where([True, False, True, False], obs, obs.dtype.type(0))
        return obs[..., StatelessCartPole.KEPT]
    return cut


def stateless_cartpole(keep_shape: bool = False, **kwargs: Any) -> gym.Env:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return StatelessCartPole(CartPoleEnv(**kwargs), keep_shape)


def stateless_cartpole_vector(num_envs: int, keep_shape: bool = False, **kwargs: Any) -> gym.vector.VectorEnv:
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
    from gymnasium.wrappers.vector import TransformObservation

    env = CartPoleVectorEnv(num_envs=num_envs, **kwargs)
    cut = _velocity_cut(keep_shape)
    return TransformObservation(env, cut, cut(env.observation_space), cut(env.single_observation_space))


for _name, _keep in (("StatelessCartPole-v1", False), ("CartPoleNoVel-v1", True)):
    if _name not in gym.registry:  # rl-zoo3 registers CartPoleNoVel-v1 too, where it was imported first
        gym.register(_name, entry_point=stateless_cartpole, vector_entry_point="volley.env_wrappers:stateless_cartpole_vector",
                     max_episode_steps=500, reward_threshold=475.0, kwargs={"keep_shape": _keep})


class ActionMasksObservation(gym.ObservationWrapper):
    """sb3-contrib's masking protocol as RLlib's: an environment with an ``action_masks()`` method (what
    MaskablePPO calls) observes ``{key: its mask, "observations": its observation}``, so the mask
    reaches the network where a Dict observation's ``action_mask_key`` does. The mask is read after
    every reset and step, for the observation that comes with it."""

    def __init__(self, env: gym.Env, key: str, name: str) -> None:
        super().__init__(env)
        self.key, self.name = key, name
        self.width = action_layout(env.action_space).mask_width()
        self.observation_space = gym.spaces.Dict({key: gym.spaces.MultiBinary(self.width),
                                                  "observations": env.observation_space})

    def observation(self, observation: Any) -> dict[str, Any]:
        mask = np.asarray(self.env.get_wrapper_attr("action_masks")())
        if mask.shape != (self.width,) or mask.dtype.kind not in "biuf":
            raise EnvError(f"environment '{self.name}'.action_masks() returned {mask.dtype} of shape {mask.shape}: "
                           f"the mask of {self.env.action_space} holds {self.width} True/False (or 1/0) values")
        return {self.key: mask.astype(np.int8), "observations": observation}


def with_action_masks(make: Callable[[], gym.Env], key: str, name: str) -> Callable[[], gym.Env]:
    """``make``, its environment wrapped in :class:`ActionMasksObservation` where it has ``action_masks()``."""
    def made() -> gym.Env:
        env = make()
        return ActionMasksObservation(env, key, name) if env.has_wrapper_attr("action_masks") else env
    return made


def time_limited(make: Callable[[], gym.Env], horizon: int | None, name: str) -> Callable[[], gym.Env]:
    """``make`` with episodes truncated after ``horizon`` steps, as RLlib's older ``horizon`` key did
    (``make`` itself for None). As in RLlib, a horizon past the environment's own time limit is
    refused: the environment would end its episodes first."""
    if horizon is None:
        return make

    def limited() -> gym.Env:
        made = make()
        own = made.spec.max_episode_steps if made.spec is not None else None
        if own is not None and horizon > own:
            raise ConfigError(f"horizon={horizon} is larger than environment '{name}''s own time limit of "
                              f"{own} steps: make horizon <= {own}, or raise the environment's limit")
        return gym.wrappers.TimeLimit(made, horizon)
    return limited
