"""Engines run a group of rollout workers: in this process, as Ray actors, or as MPI ranks.

The driver resolves the run's sizes here, once (:meth:`~volley.config.AlgorithmConfig.plan`;
the MPI engine imposes one worker per rank), and every worker is built from those numbers.

The names load on first use (PEP 562), as ``volley``'s do: importing a torch-free module of
this package (:mod:`~volley.engines.ray_boot`, :mod:`~volley.engines.ray_reaper`) costs nothing,
so ``volley train`` can start Ray's cluster before it imports torch.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from volley.config import AlgorithmConfig
    from volley.engines.base import (
        AsyncSpec,
        AsyncWorkerGroup,
        Replica,
        StreamingWorkerGroup,
        StreamSpec,
        WorkerGroup,
    )
    from volley.envs import EnvCreator
    from volley.policies import PolicySetup
    from volley.rollout.worker import Postprocess


def __getattr__(name: str) -> Any:
    if name not in ("AsyncSpec", "AsyncWorkerGroup", "Replica", "StreamSpec", "StreamingWorkerGroup", "WorkerGroup"):
        raise AttributeError(f"module 'volley.engines' has no attribute {name!r}")
    return getattr(importlib.import_module("volley.engines.base"), name)


def as_placed(config: AlgorithmConfig) -> AlgorithmConfig:
    """``config`` as this process runs it: in a Ray placement group (a Tune trial, as a function
    trainable that builds ``PPO(config=...)`` itself), as the trial reserved it (``num_workers="auto"``
    is 0: :func:`~volley.engines.ray_engine.as_trial`), so it fits the bundles that
    ``default_resource_request`` asked for, as RLlib's algorithm fits its own request."""
    if "ray" not in sys.modules or config.engine == "mpi":
        return config
    import ray

    if not ray.is_initialized() or ray.util.get_current_placement_group() is None:
        return config
    from volley.engines.ray_engine import as_trial
    return as_trial(config)


def make_worker_group(config: AlgorithmConfig, postprocess: Postprocess, env_creator: EnvCreator | None,
                      seed_offset: int = 0, reserved_cpus: float = 0.0, setup: PolicySetup | None = None
                      ) -> WorkerGroup:
    """The worker group for ``config.engine``; ``num_workers=0`` always samples in-process.

    ``seed_offset`` shifts the global environment indices (evaluation workers use their own);
    ``reserved_cpus`` are Ray CPUs this run's other workers hold already; ``setup``, a multi-agent
    run's policies (its workers are multi-agent ones).
    """
    from volley.engines.base import WorkerRecipe

    if config.engine == "mpi":
        from volley.engines.mpi_engine import make_mpi_group
        return make_mpi_group(config, postprocess, env_creator, setup)
    recipe = WorkerRecipe(config, config.plan(), postprocess, env_creator, seed_offset, setup=setup)
    if recipe.plan.num_workers == 0 and config.remote_worker_envs:
        from volley.engines.ray_envs import RemoteEnvsGroup
        return RemoteEnvsGroup(recipe)
    if recipe.plan.num_workers == 0 or config.engine == "local":
        from volley.engines.local import LocalWorkerGroup
        return LocalWorkerGroup(recipe)
    from volley.engines.ray_engine import RayWorkerGroup
    return RayWorkerGroup(recipe, reserved_cpus)


def make_async_worker_group(config: AlgorithmConfig, postprocess: Postprocess,
                            env_creator: EnvCreator | None, spec: AsyncSpec) -> AsyncWorkerGroup:
    """A parameter server, replay shards and acting workers as Ray actors (the one engine that
    hosts them; an asynchronous algorithm's config refuses the others)."""
    from volley.engines.async_actors import RayAsyncWorkerGroup
    from volley.engines.base import WorkerRecipe
    return RayAsyncWorkerGroup(WorkerRecipe(config, config.plan(), postprocess, env_creator), spec)


def make_streaming_group(config: AlgorithmConfig, postprocess: Postprocess, env_creator: EnvCreator | None,
                         spec: StreamSpec, setup: PolicySetup | None = None) -> StreamingWorkerGroup:
    """A stream of fragments (IMPALA, APPO): Ray actors and a feeder thread, or on the local engine
    (and with ``num_workers=0``) the same workers called serially in this process; ``setup``, a
    multi-agent run's policies (its workers are multi-agent ones)."""
    from volley.engines.base import WorkerRecipe

    recipe = WorkerRecipe(config, config.plan(), postprocess, env_creator, setup=setup)
    if recipe.plan.num_workers == 0 or config.engine == "local":
        from volley.engines.local import LocalStreamingGroup
        return LocalStreamingGroup(recipe, spec)
    from volley.engines.streaming import RayStreamingGroup
    return RayStreamingGroup(recipe, spec)


__all__ = ["AsyncSpec", "as_placed", "AsyncWorkerGroup", "Replica", "StreamSpec", "StreamingWorkerGroup", "WorkerGroup",
           "make_async_worker_group", "make_streaming_group", "make_worker_group"]
