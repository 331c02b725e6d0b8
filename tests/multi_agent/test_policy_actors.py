"""A policy's batch of its agents' observations: the plain stack that array spaces take each step
gives exactly the batch gymnasium's ``concatenate`` (the path of ``Dict`` and ``Tuple`` spaces) gives."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from volley.rollout.policy_actors import ARRAY_SPACES, batched


def concatenated(space: gym.Space, raw: list[Any]) -> Any:
    """gymnasium's batch of ``raw``: an empty batch of the space, filled."""
    return gym.vector.utils.concatenate(space, raw, gym.vector.utils.create_empty_array(space, len(raw)))


SPACES = {
    # an environment may observe float64 in a float32 Box (the batch is the space's dtype)
    "box": (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), lambda rng: rng.uniform(-1, 1, 3)),
    "image": (gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), lambda rng: rng.integers(0, 256, (4, 4, 3), np.uint8)),
    "discrete": (gym.spaces.Discrete(5), lambda rng: int(rng.integers(5))),
    "multi_discrete": (gym.spaces.MultiDiscrete([3, 4]), lambda rng: rng.integers(0, 3, 2)),
    "multi_binary": (gym.spaces.MultiBinary(4), lambda rng: rng.integers(0, 2, 4, np.int8)),
}


@pytest.mark.parametrize("name", SPACES)
def test_the_stack_of_an_array_space_is_gymnasiums_batch(name: str):
    space, draw = SPACES[name]
    assert isinstance(space, ARRAY_SPACES)
    rng = np.random.default_rng(0)
    raw = [draw(rng) for _ in range(5)]
    fast, general = batched(space, raw), concatenated(space, raw)
    assert fast.dtype == general.dtype == space.dtype
    assert fast.shape == general.shape == (5, *space.shape)
    np.testing.assert_array_equal(fast, general)


def test_a_dict_space_takes_gymnasiums_path():
    space = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (2,), np.int8),
                             "action_mask": gym.spaces.MultiBinary(3)})
    raw = [space.sample() for _ in range(4)]
    fast, general = batched(space, raw), concatenated(space, raw)
    assert list(fast) == list(general)
    for key in general:
        assert fast[key].dtype == general[key].dtype
        np.testing.assert_array_equal(fast[key], general[key])
