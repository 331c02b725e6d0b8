"""The local engine: workers are ordinary objects in this process, called one after another.

It is the reference the other engines are tested against (same seed, same batches).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from volley.engines.base import WorkerGroup, WorkerRecipe


class LocalWorkerGroup(WorkerGroup):
    """``plan.num_sampling_workers`` in-process workers (one when ``num_workers=0``)."""

    def __init__(self, recipe: WorkerRecipe) -> None:
        self.plan = recipe.plan
        self.workers = [recipe.build(i) for i in range(recipe.plan.num_sampling_workers)]
        self.num_workers = len(self.workers)

    def call(self, method: str, *args: Any) -> list[Any]:
        # Workers run torch with one thread, as Ray's actors do: a batched forward pass per
        # step is too small to share, and a second thread made Pong sampling 2-10x slower.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return [getattr(worker, method)(*args) for worker in self.workers]
        finally:
            torch.set_num_threads(threads)

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.workers[0].spaces()

    def stop(self) -> None:
        for worker in self.workers:
            worker.env.close()
        self.workers = []
