"""Engines run a group of rollout workers: in this process, as Ray actors, or as MPI ranks."""

from __future__ import annotations

from volley.config import AlgorithmConfig
from volley.engines.base import WorkerGroup
from volley.envs import EnvCreator
from volley.rollout.worker import Postprocess


def make_worker_group(config: AlgorithmConfig, postprocess: Postprocess,
                      env_creator: EnvCreator | None) -> WorkerGroup:
    """The worker group for ``config.engine``; ``num_workers=0`` always samples in-process."""
    if config.engine == "mpi":
        from volley.engines.mpi_engine import MPIWorkerGroup
        return MPIWorkerGroup(config, postprocess, env_creator)
    if config.engine == "local" or config.resolved_num_workers == 0:
        from volley.engines.local import LocalWorkerGroup
        return LocalWorkerGroup(config, postprocess, env_creator)
    from volley.engines.ray_engine import RayWorkerGroup
    return RayWorkerGroup(config, postprocess, env_creator)


__all__ = ["WorkerGroup", "make_worker_group"]
