"""The Ray engine: one actor per rollout worker, on this machine or any Ray cluster.

Ray starts an embedded local cluster unless ``ray_address`` names one to join
(``ray start --head`` prints it). Actors are placed with the ``SPREAD`` strategy so
a multi-node cluster shares the sampling, and arrays sent to all workers (the
weights) are put into the object store once per call.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import ray

from volley.config import AlgorithmConfig
from volley.engines.base import WorkerGroup
from volley.envs import EnvCreator
from volley.errors import ConfigError, VolleyError, WorkerError
from volley.rollout.worker import Postprocess, RolloutWorker


class _WorkerHost:
    """Builds the worker inside the actor, so a failing constructor returns its exception.

    (An exception in an actor's own ``__init__`` reaches the driver only as text.)
    """

    def build(self, cls: type, *args: Any) -> None:
        self.worker = cls(*args)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.worker, method)(*args)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


def ship_by_value(env_creator: EnvCreator | None) -> None:
    """Send a registered creator's module to the workers by value unless it is installed.

    A creator defined in a script, a test file or a notebook helper module is not
    importable by Ray's worker processes; pickling its module by value makes
    ``register_env`` work there without any setup.
    """
    module = sys.modules.get(getattr(env_creator, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module.__name__ == "__main__":
        return
    installed = any(part in Path(path).parts for part in ("site-packages", "dist-packages"))
    if not installed and not module.__name__.startswith("volley"):
        ray.cloudpickle.register_pickle_by_value(module)


def init_ray(config: AlgorithmConfig) -> bool:
    """Start or join a Ray cluster unless Ray is already up; True if this call started it."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                              "configure_logging": True}
    if config.ray_address is None:
        kwargs["num_cpus"] = config.num_cpus
    try:  # "local" starts a new cluster even when another one on this machine is recorded
        ray.init(address=config.ray_address or "local", **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        hint = ("; if it was started by `ray start` with token authentication (the default "
                "since Ray 2.59), set RAY_AUTH_MODE=token before importing ray"
                if config.ray_address and "RAY_AUTH_MODE" not in os.environ else "")
        raise ConfigError(f"could not reach the Ray cluster at ray_address="
                          f"{config.ray_address!r}: {exc}{hint}") from None
    return True


def missing_cpus(config: AlgorithmConfig, num_workers: int) -> str | None:
    """Why ``num_workers`` actors of ``num_cpus_per_worker`` do not fit the cluster, or None."""
    needed = num_workers * config.num_cpus_per_worker
    available = ray.cluster_resources().get("CPU", 0.0)
    if needed <= available:
        return None
    return (f"num_workers={num_workers} needs {needed:g} CPUs but the Ray cluster has "
            f"{available:g}; lower num_workers or num_cpus_per_worker")


class RayWorkerGroup(WorkerGroup):
    """``num_workers`` Ray actors, each hosting one :class:`RolloutWorker`."""

    def __init__(self, config: AlgorithmConfig, postprocess: Postprocess,
                 env_creator: EnvCreator | None) -> None:
        self.started_ray = init_ray(config)
        self.num_workers = config.resolved_num_workers
        missing = missing_cpus(config, self.num_workers)
        if missing:
            self.stop()
            raise ConfigError(missing)
        ship_by_value(env_creator)
        host: Any = ray.remote(num_cpus=config.num_cpus_per_worker)(_WorkerHost)
        self.actors: list[Any] = [host.options(scheduling_strategy="SPREAD").remote()
                                  for _ in range(self.num_workers)]
        self._wait([actor.build.remote(RolloutWorker, config, i, postprocess, env_creator)
                    for i, actor in enumerate(self.actors)])

    def call(self, method: str, *args: Any) -> list[Any]:
        shipped = [ray.put(a) if isinstance(a, np.ndarray) else a for a in args]
        return self._wait([actor.call.remote(method, *shipped) for actor in self.actors])

    def _wait(self, refs: list[ray.ObjectRef]) -> list[Any]:
        results = []
        for index, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, VolleyError):
                    raise exc.cause from None
                raise WorkerError(f"rollout worker {index} failed: "
                                  f"{type(exc.cause).__name__}: {exc.cause}") from exc
            except ray.exceptions.RayActorError as exc:
                raise WorkerError(f"rollout worker {index} died: {exc}") from exc
        return results

    def node_ids(self) -> list[str]:
        """The Ray node each worker runs on (to check placement)."""
        return ray.get([actor.node_id.remote() for actor in self.actors])

    def stop(self) -> None:
        for actor in getattr(self, "actors", []):
            ray.kill(actor)
        self.actors = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False
