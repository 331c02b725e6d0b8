"""The local engine: workers are ordinary objects in this process, called one after another.

It is the reference the other engines are tested against (same seed, same batches).
"""

from __future__ import annotations

from typing import Any

import torch

from volley.config import AlgorithmConfig
from volley.engines.base import WorkerGroup
from volley.envs import EnvCreator
from volley.rollout.worker import Postprocess, RolloutWorker


class LocalWorkerGroup(WorkerGroup):
    """``num_sampling_workers`` in-process workers (one when ``num_workers=0``)."""

    def __init__(self, config: AlgorithmConfig, postprocess: Postprocess,
                 env_creator: EnvCreator | None, seed_offset: int = 0) -> None:
        self.workers = [RolloutWorker(config, i, postprocess, env_creator, seed_offset=seed_offset)
                        for i in range(config.num_sampling_workers)]
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

    def stop(self) -> None:
        for worker in self.workers:
            worker.env.close()
        self.workers = []
