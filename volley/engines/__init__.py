"""Engines run a group of rollout workers: in this process, as Ray actors, or as MPI ranks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from volley.config import AlgorithmConfig
from volley.engines.base import AsyncWorkerGroup, WorkerGroup
from volley.envs import EnvCreator
from volley.models import Policy
from volley.rollout.batch import Batch
from volley.rollout.worker import Postprocess

if TYPE_CHECKING:
    from volley.algorithms.apex_dqn import ApexDQNConfig

# worker-side initial priorities: TD errors [B] of a fresh batch by the worker's own network
TDErrors = Callable[[Policy, Batch, AlgorithmConfig], np.ndarray]


def make_worker_group(config: AlgorithmConfig, postprocess: Postprocess, env_creator: EnvCreator | None,
                      seed_offset: int = 0, reserved_cpus: float = 0.0) -> WorkerGroup:
    """The worker group for ``config.engine``; ``num_workers=0`` always samples in-process.

    ``seed_offset`` shifts the global environment indices (evaluation workers use their own);
    ``reserved_cpus`` are Ray CPUs this run's other workers hold already.
    """
    if config.engine == "mpi":
        from volley.engines.mpi_engine import MPIWorkerGroup
        return MPIWorkerGroup(config, postprocess, env_creator)
    if config.engine == "local" or config.resolved_num_workers == 0:
        from volley.engines.local import LocalWorkerGroup
        return LocalWorkerGroup(config, postprocess, env_creator, seed_offset)
    from volley.engines.ray_engine import RayWorkerGroup
    return RayWorkerGroup(config, postprocess, env_creator, seed_offset, reserved_cpus)


def make_async_worker_group(config: ApexDQNConfig, postprocess: Postprocess,
                            env_creator: EnvCreator | None, td_errors: TDErrors | None) -> AsyncWorkerGroup:
    """Ape-X's parameter server, replay shards and acting workers, as Ray actors (the one engine
    that hosts them; ApexDQNConfig.validate refuses the others)."""
    from volley.engines.ray_async import RayAsyncWorkerGroup
    return RayAsyncWorkerGroup(config, postprocess, env_creator, td_errors)


__all__ = ["AsyncWorkerGroup", "WorkerGroup", "make_async_worker_group", "make_worker_group"]
