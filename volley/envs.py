"""Environments: Gymnasium ids, ALE Atari, MuJoCo and user-registered creators, as vectors.

Every worker steps its environments as one Gymnasium ``VectorEnv`` in
``NEXT_STEP`` autoreset mode. Where an environment has a native vector
implementation it is used: CartPole's numpy vector env, and for ALE pixels ale-py's
C++ ``AtariVectorEnv``, several times faster than stepping single environments.
Every other vector is a :class:`GuardedVectorEnv` of :class:`GuardedEnv` s, so a failing
environment can be named by its index and replaced alone.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import re
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

from volley.callbacks import EnvContext
from volley.errors import ConfigError, EnvError, VolleyError, did_you_mean
from volley.named import ENVIRONMENTS
from volley.spaces import action_layout

EnvCreator = Callable[[dict], gym.Env]

ERROR_INFO = "volley_env_error"  # set in the info of a GuardedEnv whose step or reset raised


def register_env(name: str, creator: EnvCreator) -> None:
    """Make ``config.environment(env=name)`` build environments with ``creator(env_config)``.

    The creator travels to Ray workers with the worker's arguments, so it works
    there without registering again. It must return a ``gymnasium.Env``.
    """
    if not callable(creator):
        raise EnvError(f"register_env('{name}', ...) needs a callable creator, got {creator!r}")
    ENVIRONMENTS.register(name, creator)


def registered_creator(name: str) -> EnvCreator | None:
    """The creator registered under ``name``, or the environment class or function a config was
    given as ``env`` (named by ``volley.named.env_name``); None if neither."""
    return ENVIRONMENTS.find(name)


def _load_ale() -> bool:
    """Register ale-py's ids and our ``ALE/<Game>-ram-v5`` aliases; False without ale-py."""
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    for env_id in [k for k in gym.registry if k.startswith("ALE/") and k.endswith("-v5")]:
        ram_id = env_id[:-3] + "-ram-v5"
        if "-ram" not in env_id and ram_id not in gym.registry:
            spec = gym.registry[env_id]
            gym.register(ram_id, entry_point=spec.entry_point,
                         kwargs={**spec.kwargs, "obs_type": "ram"},
                         max_episode_steps=spec.max_episode_steps)
    return True


def check_env_id(env: str) -> None:
    """Raise an EnvError naming ``env`` (and close ids) unless it can be built."""
    if registered_creator(env) is not None:
        return
    if env not in gym.registry and ENVIRONMENTS.is_given_name(env):
        raise EnvError(ENVIRONMENTS.missing(env))
    if env.startswith("ALE/") and not _load_ale():
        raise EnvError(f"environment '{env}' needs ale-py: pip install 'volley-rl[atari]'")
    if env not in gym.registry:
        _load_ale()
        known = list(gym.registry) + list(ENVIRONMENTS.registered)
        raise EnvError(f"unknown environment id '{env}'{did_you_mean(env, known)}")
    if "mujoco" in str(gym.registry[env].entry_point):
        try:
            import mujoco  # noqa: F401
        except ImportError:
            raise EnvError(f"environment '{env}' needs MuJoCo: pip install 'volley-rl[mujoco]'") from None


def _atari_game(env: str) -> str:
    """``ALE/SpaceInvaders-v5`` -> ``space_invaders`` (the ROM name)."""
    name = env.split("/", 1)[1].rsplit("-", 1)[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


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
        gym.register(_name, entry_point=stateless_cartpole, vector_entry_point="volley.envs:stateless_cartpole_vector",
                     max_episode_steps=500, reward_threshold=475.0, kwargs={"keep_shape": _keep})


def _atari_vector_env(env: str, num_envs: int, preprocessing: str, env_config: dict,
                      dim: int = 84) -> gym.vector.VectorEnv:
    from ale_py.vector_env import AtariVectorEnv

    spec_kwargs = gym.registry[env].kwargs
    kwargs: dict[str, Any] = {
        "repeat_action_probability": spec_kwargs.get("repeat_action_probability", 0.25),
        "full_action_space": spec_kwargs.get("full_action_space", False),
        "frameskip": spec_kwargs.get("frameskip", 4),
        "reward_clipping": False,  # report true game scores; clip in the algorithm if wanted
        "episodic_life": False,
    }
    if preprocessing == "deepmind":
        kwargs.update(img_height=dim, img_width=dim, grayscale=True, stack_num=4, noop_max=30)
    else:
        kwargs.update(img_height=210, img_width=160, grayscale=False, stack_num=1, noop_max=0,
                      maxpool=False, use_fire_reset=False)
    kwargs.update(env_config)
    return AtariVectorEnv(game=_atari_game(env), num_envs=num_envs, **kwargs)


def _checked_creator(name: str, creator: EnvCreator, env_config: dict) -> Callable[[], gym.Env]:
    made_before = itertools.count()

    def make() -> gym.Env:
        context = copy.copy(env_config)
        if isinstance(context, EnvContext):  # RLlib's index of this copy in the worker's vector
            context.vector_index = next(made_before)
        try:
            made = creator(context)
        except VolleyError:
            raise
        except Exception as exc:  # the user's creator: name it, keep the cause for Python users
            raise EnvError(f"the creator registered as '{name}' failed with env_config {env_config!r}: "
                           f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(made, gym.Env):
            shown = repr(made)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise EnvError(f"the creator registered as '{name}' returned {type(made).__name__} "
                           f"{shown}, not a gymnasium.Env")
        return made
    return make


def recreated_seed(seed: int, recreations: int) -> int:
    """The seed of an environment recreated for the ``recreations``-th time: a function of the
    environment's first seed, so a run stays a function of its config, but never that seed."""
    return int(np.random.SeedSequence([seed, recreations]).generate_state(1)[0])


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


class GuardedEnv(gym.Wrapper):
    """One sub-environment of a :class:`GuardedVectorEnv` that keeps its exceptions in.

    An exception escaping from the middle of the vector's step would lose the results of
    the environments stepped before it. Instead the failed call returns a placeholder (a
    sampled observation, reward 0) with ``info[ERROR_INFO]`` set; the vector's info then
    says which index failed, and the worker reads the exception from :attr:`error`,
    calls :meth:`recreate` and resets this index alone (see ``RolloutWorker``).
    """

    def __init__(self, make: Callable[[], gym.Env]) -> None:
        super().__init__(make())
        self.make = make
        self.error: tuple[str, Exception] | None = None  # (method, exception) of the last failure
        self.recreations = 0
        self._first_seed: int | None = None  # the seed of the first reset, from the worker
        self._fresh = True  # not reset since it was made

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        try:
            return self.env.step(action)
        except VolleyError:  # volley's own check of what the environment gave (an action mask): bad input
            raise
        except Exception as exc:
            self.error = ("step", exc)
            return self.observation_space.sample(), 0.0, False, False, {ERROR_INFO: True}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if self._first_seed is None:
            self._first_seed = seed
        elif seed is None and self._fresh:  # a recreated env's first reset: a seed of its own
            seed = recreated_seed(self._first_seed, self.recreations)
        self._fresh = False
        try:
            return self.env.reset(seed=seed, options=options)
        except VolleyError:
            raise
        except Exception as exc:
            self.error = ("reset", exc)
            return self.observation_space.sample(), {ERROR_INFO: True}

    def recreate(self) -> None:
        """Replace the environment with a new one from the same creator."""
        with contextlib.suppress(Exception):  # a broken environment may fail to close too
            self.env.close()
        self.env = self.make()
        self.error = None
        self.recreations += 1
        self._fresh = True


class GuardedVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` :class:`GuardedEnv` s stepped one after another as one vector.

    What Gymnasium's ``SyncVectorEnv`` does in ``NEXT_STEP`` autoreset mode (the step after
    an episode end only resets that environment, reward 0), without the per-step merging
    of every sub-environment's info dict: the only info a worker reads is which
    environment failed (``info[ERROR_INFO]`` and its mask). For one MuJoCo environment
    that merging and its bookkeeping cost about as much as the physics step. Each
    environment's own info of the latest step or reset is in :attr:`sub_infos` (for the
    callbacks' ``episode.last_info_for()``).
    """

    def __init__(self, make: Callable[[], gym.Env], num_envs: int) -> None:
        self.envs = [GuardedEnv(make) for _ in range(num_envs)]
        self.num_envs = num_envs
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = gym.vector.utils.batch_space(first.observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(first.action_space, num_envs)
        self.metadata = {**first.metadata, "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        self.render_mode = first.render_mode
        self._autoreset = np.zeros(num_envs, bool)
        self._last_obs: list[Any] = [None] * num_envs  # what a reset_mask leaves in place
        self.sub_infos: list[dict] = [{} for _ in range(num_envs)]
        self._box = isinstance(first.observation_space, gym.spaces.Box)

    def _stack(self, observations: list[Any]) -> Any:
        if self._box:  # a new array, as np.stack makes, in a fraction of its time
            return np.array(observations)
        out = gym.vector.utils.create_empty_array(self.single_observation_space, self.num_envs)
        return gym.vector.utils.concatenate(self.single_observation_space, observations, cast(Any, out))

    @staticmethod
    def _errors(failed: list[int], num_envs: int) -> dict[str, Any]:
        if not failed:
            return {}
        mask = np.zeros(num_envs, bool)
        mask[failed] = True
        return {ERROR_INFO: mask, "_" + ERROR_INFO: mask}

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict | None = None) -> tuple[Any, dict]:
        """Reset every env (``options={"reset_mask": m}``: only those where ``m`` is True)."""
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i
                                                     for i in range(self.num_envs)]
        mask = (options or {}).get("reset_mask")
        env_options = {k: v for k, v in (options or {}).items() if k != "reset_mask"} or None
        observations, failed, infos = [], [], list(self.sub_infos)
        for i, env in enumerate(self.envs):
            if mask is None or mask[i]:
                obs, info = env.reset(seed=seeds[i], options=env_options)
                self._autoreset[i] = False
                self._last_obs[i] = obs
                infos[i] = info
            else:
                obs, info = self._last_obs[i], {}
            observations.append(obs)
            if ERROR_INFO in info:
                failed.append(i)
        self.sub_infos = infos
        return self._stack(observations), self._errors(failed, self.num_envs)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        rewards = np.zeros(self.num_envs, np.float32)  # what the worker keeps: no conversion a step
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        observations, failed, infos = [], [], []
        for i, env in enumerate(self.envs):
            if self._autoreset[i]:
                obs, info = env.reset()
            else:
                obs, rewards[i], terminated[i], truncated[i], info = env.step(actions[i])
            observations.append(obs)
            infos.append(info)
            if ERROR_INFO in info:
                failed.append(i)
        self._last_obs, self.sub_infos = observations, infos
        self._autoreset = terminated | truncated
        return self._stack(observations), rewards, terminated, truncated, self._errors(failed, self.num_envs)

    def render(self) -> tuple[Any, ...] | None:
        frames = tuple(env.render() for env in self.envs)
        return None if all(frame is None for frame in frames) else frames

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


TaskType = Any  # RLlib's alias for a task: whatever the environment's tasks are (an int, a dict)


class TaskSettableEnv(gym.Env):
    """RLlib's interface of an environment with tasks (curricula, meta-learning): ``env_task_fn``
    calls :meth:`get_task` and :meth:`set_task` on it after every training iteration."""

    def sample_tasks(self, n_tasks: int) -> list[Any]:
        """``n_tasks`` tasks drawn from the environment's distribution of tasks."""
        raise NotImplementedError

    def set_task(self, task: Any) -> None:
        """Make ``task`` the environment's task from its next episode."""
        raise NotImplementedError

    def get_task(self) -> Any:
        raise NotImplementedError


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


def _guarded_vector(make: Callable[[], gym.Env], num_envs: int) -> GuardedVectorEnv:
    return GuardedVectorEnv(make, num_envs)


def guarded_envs(vec: gym.vector.VectorEnv) -> list[GuardedEnv] | None:
    """The sub-environments of a vector ``make_vector_env`` built from GuardedEnvs; None for a
    native vector env, whose sub-environments are not Python objects."""
    return vec.envs if isinstance(vec, GuardedVectorEnv) else None


def make_vector_env(env: str, num_envs: int, *, env_config: dict | None = None,
                    creator: EnvCreator | None = None, atari_preprocessing: str = "deepmind",
                    render_mode: str | None = None, vectorize_mode: str = "auto",
                    action_mask_key: str = "action_mask", horizon: int | None = None,
                    dim: int = 84) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env`` stepped as one vector (autoreset on the step after an end).

    ``creator`` is a registered creator passed along explicitly, because the
    registry of the process that called ``register_env`` is not the worker's.
    ``render_mode`` goes to Gymnasium ids (a creator chooses its own; ale-py's vector
    Atari does not render). ``vectorize_mode`` (the config key): ``"sync"`` steps copies one
    after another, ``"vector_entry_point"`` takes the environment's own vector, ``"auto"``
    the latter where there is one; ALE pixel ids always take ale-py's. An environment with
    sb3-contrib's ``action_masks()`` observes its mask under ``action_mask_key`` (:class:`ActionMasksObservation`).
    ``horizon`` (RLlib's older key) truncates episodes after that many steps (:func:`time_limited`);
    ALE pixel frames are ``dim`` x ``dim`` with the DeepMind preprocessing (RLlib's ``model["dim"]``).
    """
    env_config = copy.copy(env_config) if env_config is not None else {}  # an EnvContext stays one
    creator = creator or registered_creator(env)
    if creator is not None and vectorize_mode == "vector_entry_point":
        raise ConfigError(f"vectorize_mode='vector_entry_point' but environment '{env}' is made by a "
                          "creator function, which has no vector of its own; use 'sync'")
    if horizon is not None:
        if vectorize_mode == "vector_entry_point":
            raise ConfigError(f"horizon={horizon} needs vectorize_mode 'sync' or 'auto': a time limit wraps "
                              "each environment, and a native vector has none of its own")
        vectorize_mode = "sync"
    if creator is not None:
        return _guarded_vector(time_limited(with_action_masks(_checked_creator(env, creator, env_config),
                                                              action_mask_key, env), horizon, env), num_envs)
    check_env_id(env)
    spec = gym.registry[env]
    render: dict[str, Any] = {"render_mode": render_mode} if render_mode is not None else {}
    if env.startswith("ALE/") and isinstance(env_config.get("frameskip"), list):
        # JSON has no tuples (and env_config is JSON): ale-py's stochastic (low, high) frameskip
        env_config["frameskip"] = tuple(env_config["frameskip"])
    try:
        if env.startswith("ALE/") and spec.kwargs.get("obs_type", "rgb") != "ram":
            if atari_preprocessing == "karpathy":
                return _guarded_vector(time_limited(lambda: KarpathyPong(gym.make(env, **render, **env_config)),
                                                    horizon, env), num_envs)
            if horizon is not None:
                raise ConfigError(f"horizon={horizon} with {env}: ale-py's vector Atari has a limit of its own, "
                                  "env_config={'max_num_frames_per_episode': frames} (4 frames per step)")
            return _atari_vector_env(env, num_envs, atari_preprocessing, env_config, dim)
        if spec.vector_entry_point is None and vectorize_mode == "vector_entry_point":
            raise ConfigError(f"vectorize_mode='vector_entry_point' but environment '{env}' has no vector "
                              "entry point; use 'sync'")
        if spec.vector_entry_point is None or vectorize_mode == "sync":
            return _guarded_vector(time_limited(with_action_masks(lambda: gym.make(env, **render, **env_config),
                                                                  action_mask_key, env), horizon, env), num_envs)
        return gym.make_vec(env, num_envs=num_envs, vectorization_mode="vector_entry_point", **render,
                            **env_config)
    except VolleyError:
        raise
    except Exception as exc:  # the environment's own constructor: name it and what it was given
        given = f" with env_config {env_config!r}" if env_config else ""
        raise EnvError(f"environment '{env}' failed to build{given}: {type(exc).__name__}: {exc}") from exc


def env_actions(actions: np.ndarray, space: gym.Space, normalize: bool, clip: bool) -> Any:
    """What the environment receives for the policy's actions ``[N, ...]`` (the flat layout of
    :mod:`volley.spaces`): continuous ones rescaled from [-1, 1] to the space's bounds with
    ``normalize`` (RLlib's normalize_actions), else clipped to them with ``clip``; discrete ones as
    they are (plus the space's ``start``); a Tuple or Dict space's as one structured action per
    environment (:meth:`volley.spaces.ActionLayout.to_env`)."""
    if isinstance(space, gym.spaces.Discrete):
        return actions + space.start if space.start else actions
    if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and space.dtype.kind == "f"):
        return action_layout(space).to_env(actions, normalize, clip)
    if normalize:
        unit = np.clip(actions, -1.0, 1.0)
        return (space.low + (unit + 1.0) * 0.5 * (space.high - space.low)).astype(space.dtype)
    # minimum/maximum: the same as np.clip, a third of its time on a single action
    return np.minimum(np.maximum(actions, space.low), space.high) if clip else actions


def check_normalizable(space: gym.Space, env: str) -> None:
    """A ConfigError unless ``normalize_actions`` can rescale ``space``'s float Boxes (finite bounds)."""
    action_layout(space).check_normalizable(env)


def reset_seeded(vec: gym.vector.VectorEnv, seeds: list[int]) -> Any:
    """Reset with one seed per sub-environment where the vector takes them.

    Native vector envs with a single generator (CartPole's) take the first seed.
    """
    if isinstance(vec, GuardedVectorEnv | gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv):
        return vec.reset(seed=list[int | None](seeds))
    if type(vec).__name__ == "AtariVectorEnv":
        return cast(Any, vec).reset(seed=np.asarray(seeds, np.int64))
    return vec.reset(seed=seeds[0])


class SingleEnv(gym.Env):
    """One environment seen through a vector of one.

    The driver's environment (``algo.env``) is built exactly as the workers' are (same
    wrappers, ale-py's vector Atari included), so its observations fit the policy;
    this view gives it the plain ``reset``/``step`` of a single ``gymnasium.Env`` for
    stepping with ``compute_single_action``.
    """

    def __init__(self, vec: gym.vector.VectorEnv) -> None:
        self.vec = vec
        self.observation_space = vec.single_observation_space
        self.action_space = vec.single_action_space
        self.metadata = vec.metadata
        self.render_mode = vec.render_mode

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info = self.vec.reset(seed=seed, options=options)
        return _first(obs), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, rewards, terminated, truncated, info = self.vec.step(np.asarray([action]))
        return _first(obs), float(rewards[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> Any:
        frames = self.vec.render()
        return None if frames is None else frames[0]


def _first(obs: Any) -> Any:
    """Environment 0's part of a vector observation."""
    if isinstance(obs, dict):
        return {k: _first(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_first(v) for v in obs)
    return obs[0]
