"""The Ray engine: one actor per rollout worker, on this machine or any Ray cluster.

Ray starts an embedded local cluster unless ``ray_address`` names one to join
(``ray start --head`` prints it). Actors are placed with the ``SPREAD`` strategy so
a multi-node cluster shares the sampling, and arrays sent to all workers (the
weights) are put into the object store once per call. Inside a placement group (a
Ray Tune trial's) Ray is already up and the actors go into that group instead.

A worker whose actor dies (killed, its process gone, its node removed) is replaced
by a new actor (``restart_failed_workers``, at most ``max_worker_restarts`` times a
run). The replacement needs no state of its own: the weights and the filter
statistics travel with every sample call. Its share of the iteration is sampled
again (``on_worker_failure="resample"``) or left out (``"use_others"``).
"""

from __future__ import annotations

import logging
import os
import socket
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


PROBE_TIMEOUT_S = 5.0


def probe_ray_address(address: str) -> None:
    """Raise a ConfigError naming ``address`` unless something accepts TCP connections there.

    ``ray.init`` keeps retrying an address nobody listens on for about a minute before
    it gives up; one short connection attempt says the same in seconds. ``"auto"`` and
    ``"local"`` name no port, so they are left to Ray.
    """
    if address in ("auto", "local"):
        return
    host, sep, port_text = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # an IPv6 literal: [::1]:6379
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"ray_address={address!r} is not 'auto', 'host:port' or 'ray://host:port'")
    try:
        with socket.create_connection((host, int(port_text)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ConfigError(f"nothing answers at ray_address={address!r} ({exc}); start a cluster "
                          "there with `ray start --head`, or leave ray_address unset to start "
                          "one in this process") from None


def init_ray(config: AlgorithmConfig) -> bool:
    """Start or join a Ray cluster unless Ray is already up; True if this call started it."""
    if ray.is_initialized():
        return False
    if config.ray_address is not None:
        probe_ray_address(config.ray_address)
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


# A replacement worker not running after this long cannot be placed: the cluster lacks its CPUs.
RESTART_TIMEOUT_S = 120.0


def placement(config: AlgorithmConfig, num_workers: int, reserved_cpus: float = 0.0) -> Any:
    """The scheduling strategy for ``num_workers`` worker actors; a ConfigError if they do not fit
    beside the ``reserved_cpus`` that this run's other actors hold.

    In a placement group (a Tune trial reserves one bundle for itself and one per
    worker) the actors must use it: an explicit ``SPREAD`` would place them outside
    and wait for CPUs the trials already hold. Elsewhere, ``SPREAD`` over the cluster.
    """
    group = ray.util.get_current_placement_group()
    if group is None:
        strategy: Any = "SPREAD"
        available, where = ray.cluster_resources().get("CPU", 0.0), "the Ray cluster"
    else:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        held = ray.get_runtime_context().get_assigned_resources().get("CPU", 0.0)
        available = sum(bundle.get("CPU", 0.0) for bundle in group.bundle_specs) - held
        strategy, where = PlacementGroupSchedulingStrategy(group), "this placement group (Tune trial)"
    needed = num_workers * config.num_cpus_per_worker
    if needed > available - reserved_cpus:
        also = f", {reserved_cpus:g} of them held by the training workers" if reserved_cpus else ""
        raise ConfigError(f"num_workers={num_workers} needs {needed:g} CPUs but {where} has "
                          f"{available:g}{also}; lower num_workers or num_cpus_per_worker")
    return strategy


class RayWorkerGroup(WorkerGroup):
    """``num_workers`` Ray actors, each hosting one :class:`RolloutWorker`."""

    def __init__(self, config: AlgorithmConfig, postprocess: Postprocess,
                 env_creator: EnvCreator | None, seed_offset: int = 0, reserved_cpus: float = 0.0) -> None:
        self.started_ray = init_ray(config)
        self.config = config
        self.num_workers = config.resolved_num_workers
        try:
            strategy = placement(config, self.num_workers, reserved_cpus)
        except ConfigError:
            self.stop()
            raise
        ship_by_value(env_creator)
        self._host: Any = ray.remote(num_cpus=config.num_cpus_per_worker)(_WorkerHost)
        self._strategy = strategy
        self._worker_args = (postprocess, env_creator, None, seed_offset)
        self.actors: list[Any] = [self._host.options(scheduling_strategy=strategy).remote()
                                  for _ in range(self.num_workers)]
        for index, ref in enumerate([self._build(i, actor) for i, actor in enumerate(self.actors)]):
            try:
                self._get(index, ref)
            except ray.exceptions.RayActorError as exc:
                raise WorkerError(f"rollout worker {index} died while starting: {_first_line(exc)}") from exc

    def _build(self, index: int, actor: Any) -> ray.ObjectRef:
        return actor.build.remote(RolloutWorker, self.config, index, *self._worker_args)

    def call(self, method: str, *args: Any) -> list[Any]:
        shipped = [ray.put(a) if isinstance(a, np.ndarray) else a for a in args]
        results: dict[int, Any] = {}
        pending = list(range(self.num_workers))
        while pending:
            refs = {index: self.actors[index].call.remote(method, *shipped) for index in pending}
            died: list[tuple[int, Exception]] = []
            for index, ref in refs.items():
                try:
                    results[index] = self._get(index, ref)
                except ray.exceptions.RayActorError as exc:
                    died.append((index, exc))
            for index, cause in died:
                self._replace(index, cause)
            resample = self.config.on_worker_failure == "resample" or not results
            pending = [index for index, _ in died] if resample else []
        return [results[index] for index in sorted(results)]

    def _get(self, index: int, ref: ray.ObjectRef, timeout: float | None = None) -> Any:
        """The result of worker ``index``'s call; its exception as a WorkerError naming it (a
        VolleyError as itself). A dead actor raises ``RayActorError``."""
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, VolleyError):
                raise exc.cause from None
            raise WorkerError(f"rollout worker {index} failed: "
                              f"{type(exc.cause).__name__}: {exc.cause}") from exc

    def _replace(self, index: int, death: Exception) -> None:
        """Start a new actor for worker ``index``, or raise a WorkerError saying why not."""
        died = f"rollout worker {index} died ({_first_line(death)})"
        if not self.config.restart_failed_workers:
            raise WorkerError(f"{died}; restart_failed_workers=False")
        if self.num_restarts >= self.config.max_worker_restarts:
            raise WorkerError(f"{died}; not replaced: max_worker_restarts={self.config.max_worker_restarts} "
                              f"replacements were made already")
        ray.kill(self.actors[index])
        actor = self._host.options(scheduling_strategy=self._strategy).remote()
        try:
            self._get(index, self._build(index, actor), timeout=RESTART_TIMEOUT_S)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as exc:
            ray.kill(actor)
            cpus = ray.cluster_resources().get("CPU", 0.0)
            raise WorkerError(f"{died}; its replacement did not start within {RESTART_TIMEOUT_S:g} s "
                              f"({_first_line(exc)}); the cluster has {cpus:g} CPUs for "
                              f"{self.num_workers} workers") from exc
        self.actors[index] = actor
        self.num_restarts += 1

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


def _first_line(exc: Exception) -> str:
    """Ray's actor errors run over many lines; the first says what happened."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
