"""Observations as the networks read them: a batch of (possibly Dict or Tuple) observations
flattened to float32 rows, images passed through for the CNN, and the action mask found inside a
Dict observation (RLlib's ``action_mask`` key) and kept out of what the network reads.

Workers call this on every step, before acting in numpy (:mod:`volley.acting`) or in torch (a
custom model, :mod:`volley.modelv2`), so it uses numpy alone.
"""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np

from volley.errors import ConfigError, VolleyError
from volley.spaces import action_layout


def is_image_space(space: gym.Space) -> bool:
    """uint8 boxes of rank 3 (one image) or 4 (stacked images) go to the CNN."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (3, 4)


def flat_size(space: gym.Space) -> int:
    """The width of a flattened observation of ``space`` (Discrete one-hot)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(space.nvec.sum())
    if isinstance(space, gym.spaces.Dict):
        return sum(flat_size(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(flat_size(s) for s in space.spaces)
    raise VolleyError(f"observation space {space} is not supported: volley takes Box, Discrete, "
                      "MultiDiscrete, MultiBinary, and Dict or Tuple of those")


def _flatten_batch(space: gym.Space, obs: object, n: int) -> np.ndarray:
    """Batched observations ``[n, ...]`` of ``space`` as float32 ``[n, flat_size]``."""
    if isinstance(space, gym.spaces.Discrete):
        one_hot = np.zeros((n, int(space.n)), np.float32)
        one_hot[np.arange(n), np.asarray(obs, np.int64).reshape(n) - int(space.start)] = 1.0
        return one_hot
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        return np.asarray(obs, np.float32).reshape(n, -1)
    if isinstance(space, gym.spaces.MultiDiscrete):  # each element one-hot, as RLlib's preprocessor
        offsets = np.cumsum(space.nvec.ravel()) - space.nvec.ravel()
        one_hot = np.zeros((n, int(space.nvec.sum())), np.float32)
        indices = (np.asarray(obs, np.int64).reshape(n, -1) - np.asarray(space.start).ravel()) + offsets
        np.put_along_axis(one_hot, indices, 1.0, 1)
        return one_hot
    if isinstance(space, gym.spaces.Dict):
        assert isinstance(obs, dict)
        return np.concatenate([_flatten_batch(s, obs[k], n) for k, s in space.spaces.items()], axis=1)
    assert isinstance(space, gym.spaces.Tuple) and isinstance(obs, tuple)
    return np.concatenate([_flatten_batch(s, o, n) for s, o in zip(space.spaces, obs, strict=True)],
                          axis=1)


class ObsMask(NamedTuple):
    """Where an observation's action mask sits among its flat columns, and which columns the network
    reads: the others for volley's own networks, all of them for a custom model (which gets the
    mask too, as in RLlib)."""

    mask: slice
    net: slice | np.ndarray


def find_action_mask(obs_space: gym.Space, action_space: gym.Space, key: str) -> ObsMask | None:
    """Where the action mask ``key`` (RLlib's ``action_mask_key``) sits in a Dict observation, or None
    when the observation has none; a ConfigError naming the mask's space if it cannot mask
    ``action_space`` (one entry per logit: :meth:`volley.spaces.ActionLayout.mask_width`)."""
    if not isinstance(obs_space, gym.spaces.Dict) or key not in obs_space.spaces:
        return None
    mask_space = obs_space.spaces[key]
    width = action_layout(action_space).mask_width()
    if not isinstance(mask_space, gym.spaces.Box | gym.spaces.MultiBinary) or mask_space.shape != (width,):
        raise ConfigError(f"observation key {key!r} (the action mask, action_mask_key) is {mask_space}: the mask "
                          f"of {action_space} is a Box or MultiBinary of shape ({width},), one 0/1 entry per "
                          f"{'action' if isinstance(action_space, gym.spaces.Discrete) else 'choice of each part'}")
    start = 0
    for name, subspace in obs_space.spaces.items():
        if name == key:
            break
        start += flat_size(subspace)
    stop, total = start + width, flat_size(obs_space)
    net = slice(stop, total) if start == 0 else slice(0, start) if stop == total else np.r_[0:start, stop:total]
    return ObsMask(slice(start, stop), net)


class ObsPreprocessor:
    """Turns a batch of raw observations into the array the network reads.

    Images stay uint8 (the CNN scales them); everything else becomes a flat float32
    vector: Discrete one-hot (MultiDiscrete each element one-hot), Dict and Tuple concatenated in
    key order. An action mask in a
    Dict observation (``mask``) stays among the columns, so it travels with the batch (to the
    learner, into DQN's replay as ``next_obs``); ``net_shape`` is what volley's own network reads.
    """

    def __init__(self, space: gym.Space, mask: ObsMask | None = None) -> None:
        self.space = space
        self.is_image = is_image_space(space)
        self.shape: tuple[int, ...] = space.shape if self.is_image else (flat_size(space),)  # type: ignore[assignment]
        self.mask = mask
        width = 0 if mask is None else mask.mask.stop - mask.mask.start
        self.net_shape = self.shape if mask is None else (self.shape[0] - width,)

    def __call__(self, obs: object, n: int) -> np.ndarray:
        if self.is_image:
            return np.asarray(obs)
        return _flatten_batch(self.space, obs, n)

    def transform(self, observation: object) -> np.ndarray:
        """One observation as the network reads it (RLlib's ``Preprocessor.transform``)."""
        return np.asarray(observation) if self.is_image else self(observation, 1)[0]

    @property
    def size(self) -> int:
        """How many numbers an observation becomes (RLlib's ``Preprocessor.size``)."""
        return int(np.prod(self.shape))

