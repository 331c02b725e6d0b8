"""Environments: Gymnasium ids, ALE Atari, MuJoCo and user-registered creators, as vectors.

Every worker steps its environments as one Gymnasium ``VectorEnv`` in
``NEXT_STEP`` autoreset mode. Where an environment has a native vector
implementation it is used: CartPole's numpy vector env, and for ALE pixels ale-py's
C++ ``AtariVectorEnv``, several times faster than stepping single environments.
Every other vector is a :class:`~volley.guarded_env.GuardedVectorEnv` of
:class:`~volley.guarded_env.GuardedEnv` s, so a failing environment can be named by its index and
replaced alone. The wrappers volley adds (an action mask, a time limit) and the environments it
brings (Karpathy's Pong, CartPole without velocities) live in :mod:`volley.env_wrappers`.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

from volley.callbacks import EnvContext
from volley.env_wrappers import KarpathyPong, time_limited, with_action_masks
from volley.errors import ConfigError, EnvError, VolleyError, did_you_mean
from volley.guarded_env import GuardedVectorEnv
from volley.named import ENVIRONMENTS
from volley.spaces import action_layout

EnvCreator = Callable[[dict], gym.Env]


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


VectorOf = Callable[[Callable[[], gym.Env], int], GuardedVectorEnv]  # (make, num_envs) -> the vector


def make_vector_env(env: str, num_envs: int, *, env_config: dict | None = None,
                    creator: EnvCreator | None = None, atari_preprocessing: str = "deepmind",
                    render_mode: str | None = None, vectorize_mode: str = "auto",
                    action_mask_key: str = "action_mask", horizon: int | None = None,
                    dim: int = 84, vector: VectorOf = GuardedVectorEnv) -> gym.vector.VectorEnv:
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
    ``vector`` holds the copies of an environment that is not a native vector: in this process by
    default; the Ray engine's ``RemoteVectorEnv`` puts each in an actor (``remote_worker_envs``), and
    then a native vector is not taken.
    """
    env_config = copy.copy(env_config) if env_config is not None else {}  # an EnvContext stays one
    creator = creator or registered_creator(env)
    if creator is not None and vectorize_mode == "vector_entry_point":
        raise ConfigError(f"vectorize_mode='vector_entry_point' but environment '{env}' is made by a "
                          "creator function, which has no vector of its own; use 'sync'")
    for reason, asked in ((f"horizon={horizon}", horizon is not None),
                          ("remote_worker_envs=True", vector is not GuardedVectorEnv)):
        if asked and vectorize_mode == "vector_entry_point":
            raise ConfigError(f"{reason} needs vectorize_mode 'sync' or 'auto': it applies to each environment, "
                              "and a native vector has none of its own")
        vectorize_mode = "sync" if asked else vectorize_mode
    if creator is not None:
        return vector(time_limited(with_action_masks(_checked_creator(env, creator, env_config),
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
                return vector(time_limited(lambda: KarpathyPong(gym.make(env, **render, **env_config)),
                                           horizon, env), num_envs)
            if vector is not GuardedVectorEnv:
                raise ConfigError(f"remote_worker_envs=True with {env}: ale-py's vector Atari steps its "
                                  "environments in threads of its own; leave remote_worker_envs off")
            if horizon is not None:
                raise ConfigError(f"horizon={horizon} with {env}: ale-py's vector Atari has a limit of its own, "
                                  "env_config={'max_num_frames_per_episode': frames} (4 frames per step)")
            return _atari_vector_env(env, num_envs, atari_preprocessing, env_config, dim)
        if spec.vector_entry_point is None and vectorize_mode == "vector_entry_point":
            raise ConfigError(f"vectorize_mode='vector_entry_point' but environment '{env}' has no vector "
                              "entry point; use 'sync'")
        if spec.vector_entry_point is None or vectorize_mode == "sync":
            return vector(time_limited(with_action_masks(lambda: gym.make(env, **render, **env_config),
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
