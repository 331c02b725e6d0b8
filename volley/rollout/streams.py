"""Each environment's own random stream, from which a worker draws its actions: a run is a
function of its config and seed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class EnvStreams:
    """One numpy generator per environment, seeded from (seed, global env index).

    Values are drawn ``BLOCK`` at a time per environment and handed out one step's row at a
    time: a block holds exactly the values as many single draws would have returned (numpy
    fills an array value by value from the same stream), so acting stays a function of the
    seed, and a step costs one indexing instead of a Python loop over the environments
    (4 µs for 16 of them). Each kind of draw (Gumbel noise for categorical actions, normals for
    Gaussian ones, of one width) has its own block, so a composite action space that draws both
    every step refills each only once in ``BLOCK`` steps.

    A custom action distribution draws in torch instead: ``torch_state`` is the state of the one
    torch generator the worker's environments share for it, seeded from (seed, the first env
    index) and carried from draw to draw (:func:`volley.distributions.worker_generator`).
    """

    BLOCK = 256

    def __init__(self, seed: int, env_indices: list[int]) -> None:
        self.generators = [np.random.default_rng([seed, i]) for i in env_indices]
        self._blocks: dict[tuple[str, int], list] = {}  # kind and width -> [block [N, BLOCK, width], next step]
        self.torch_seed = int(np.random.SeedSequence([seed, env_indices[0], 1]).generate_state(1)[0])
        self.torch_state: Any = None

    def _draw(self, kind: tuple[str, int], fill: Callable[[np.random.Generator], np.ndarray]) -> np.ndarray:
        """One step's draws ``[N, width]``; a new block of this kind when its last one is used up."""
        block = self._blocks.get(kind)
        if block is None or block[1] == self.BLOCK:
            block = self._blocks[kind] = [np.stack([fill(g) for g in self.generators]), 0]
        block[1] += 1
        return block[0][:, block[1] - 1]

    def gumbel(self, n: int) -> np.ndarray:
        return self._draw(("gumbel", n), lambda g: g.gumbel(size=(self.BLOCK, n)))

    def normal(self, dim: int) -> np.ndarray:
        """float32: the float64 draws rounded once a block (numpy's float32 draws are other values)."""
        return self._draw(("normal", dim), lambda g: g.standard_normal((self.BLOCK, dim)).astype(np.float32))
