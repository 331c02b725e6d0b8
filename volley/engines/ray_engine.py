"""The Ray engine: one actor per rollout worker, on this machine or any Ray cluster.

Ray starts an embedded local cluster unless ``ray_address`` names one to join
(``ray start --head`` prints it). Actors are placed with the ``SPREAD`` strategy so
a multi-node cluster shares the sampling, and arrays sent to all workers (the
weights) are put into the object store once per call. Inside a placement group (a
Ray Tune trial's) Ray is already up and the actors go into that group instead.

Every Ray call goes through :class:`RayBackend`, the Ray side of
:class:`~volley.engines.backends.ActorBackend`; inside
:func:`~volley.engines.backends.hosted_in_process` the same groups host their actors in this
process instead (the fault tests). A worker whose actor dies (killed, its process gone, its node
removed) is replaced by a new actor (:mod:`volley.engines.actor_manager`: ``restart_failed_workers``, at
most ``max_worker_restarts`` times a run, environments seeded afresh). The replacement
needs no state of its own: the weights and the filter statistics travel with every
sample call. Its share of the iteration is sampled again
(``on_worker_failure="resample"``) or left out (``"use_others"``).

A cluster this process starts is watched by :mod:`volley.engines.ray_reaper`: Ray's
node processes die with the driver by themselves, its agents would not (for a minute or
more after a ``kill -9``).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from volley.config import AlgorithmConfig
from volley.engines import ray_boot, ray_reaper
from volley.engines.actor_manager import ActorManager, ManagedWorkers, RestartPolicy, first_line
from volley.engines.backends import (
    ActorBackend,
    ActorDied,
    CallFailed,
    CallTimeout,
    in_process_host,
)
from volley.engines.base import WorkerGroup, WorkerRecipe
from volley.errors import ConfigError


def ship_by_value(user_object: Any) -> None:
    """Send the module of a user's object (an environment creator, a model or callbacks class) to
    the workers by value unless it is installed.

    An object defined in a script, a test file or a notebook helper module is not importable by
    Ray's worker processes; pickling its module by value makes ``register_env`` and
    ``ModelCatalog.register_custom_model`` work there without any setup.
    """
    module = sys.modules.get(getattr(user_object, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module.__name__ == "__main__":
        return
    installed = any(part in Path(path).parts for part in ("site-packages", "dist-packages"))
    if not installed and not module.__name__.startswith("volley"):
        ray.cloudpickle.register_pickle_by_value(module)


def ship_recipe(recipe: WorkerRecipe) -> None:
    """Make the user's code a recipe holds (environment creator, custom model and action distribution
    classes, callbacks classes) reach Ray's workers; a ConfigError naming it if it cannot be pickled (a lock or an open
    file among a class's attributes), before any actor starts."""
    spec = recipe.network_spec
    assert spec is not None  # resolved with the recipe
    specs = [spec] if recipe.setup is None else list(recipe.setup.networks.values())
    shipped: list[tuple[str, Any]] = [("environment creator", recipe.env_creator),
               *[(what, cls) for s in specs for what, cls in (("custom model", s.model_class),
                                                              ("custom action dist", s.action_dist_class))]]
    if recipe.setup is not None:  # a multi-agent run's mapping and observation functions and hand-written policies
        policy_map = recipe.setup.policy_map
        shipped += [("policy_mapping_fn", policy_map.mapping_fn), ("observation_fn", recipe.setup.observation_fn),
                    *[("policy class", e.policy_class) for e in policy_map.entries.values()]]
    for what, user_object in shipped:
        if user_object is None:
            continue
        ship_by_value(user_object)
        try:
            ray.cloudpickle.dumps(user_object)
        except Exception as exc:
            name = getattr(user_object, "__qualname__", repr(user_object))
            raise ConfigError(f"{what} {name} cannot be pickled for the Ray workers: {type(exc).__name__}: "
                              f"{exc}; define it at module level without unpicklable attributes, or use "
                              "engine='local'") from None
    callbacks = recipe.callbacks_class
    if callbacks is None:
        return
    classes = [callbacks]
    while classes:
        cls = classes.pop()
        ship_by_value(cls)
        classes += vars(cls).get("callback_classes", [])
    try:
        ray.cloudpickle.dumps(callbacks)
    except Exception as exc:
        raise ConfigError(f"callbacks class '{callbacks.__module__}:{callbacks.__qualname__}' cannot be sent "
                          f"to the Ray workers: pickling it failed with {type(exc).__name__}: {exc}; make "
                          "what cannot be pickled (a lock, an open file, a client) in __init__, not in the "
                          "class or the module it reads") from None


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
    """Start or join a Ray cluster unless Ray is already up; True if this call started it.

    A cluster :mod:`~volley.engines.ray_boot` began in the background for this run is taken
    as it is; one begun with other arguments is shut down and started again."""
    kwargs = ray_boot.cluster_kwargs(config.ray_address, config.num_cpus, config.log_level)
    boot = ray_boot.take()
    if boot is not None and boot.error is None:
        if boot.kwargs == kwargs:
            ray_reaper.watch(ray_reaper.children(os.getpid()) - boot.before)
            return True
        ray.shutdown()
        ray_boot.release_taken()
    if ray.is_initialized():
        return False
    if config.ray_address is not None:
        probe_ray_address(config.ray_address)
    before = ray_reaper.children(os.getpid()) if config.ray_address is None else set()
    if config.ray_address is None:
        ray_boot.quiet_cluster_notes()
    try:
        ray_boot.init(kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        hint = ("; if it was started by `ray start` with token authentication (the default "
                "since Ray 2.59), set RAY_AUTH_MODE=token before importing ray"
                if config.ray_address and "RAY_AUTH_MODE" not in os.environ else "")
        raise ConfigError(f"could not reach the Ray cluster at ray_address="
                          f"{config.ray_address!r}: {exc}{hint}") from None
    if config.ray_address is None:  # the processes of the cluster this call started
        ray_reaper.watch(ray_reaper.children(os.getpid()) - before)
    return True


def shutdown_ray() -> None:
    """Shut down the cluster :func:`init_ray` started, and its reaper.

    The autoscaler's monitor is killed first. ``ray.shutdown()`` stops the GCS before the
    monitor, whose SIGTERM handler then tries to report its end to that GCS until Ray's
    one-second grace runs out: 1.0 s of the 1.4 s a shutdown took here. The monitor keeps
    no state that an embedded cluster needs after its end."""
    node = ray._private.worker._global_node
    for monitor in getattr(node, "all_processes", {}).get("monitor", []):
        monitor.process.kill()
        monitor.process.wait()
    ray.shutdown()
    ray_reaper.release()
    ray_boot.release_taken()


def as_trial(config: AlgorithmConfig) -> AlgorithmConfig:
    """``config`` as a Ray Tune trial runs it: ``num_workers="auto"`` is 0 (every CPU per trial
    would leave room for one trial), the learner's threads are ``num_cpus_for_driver`` or 1 (the
    CPUs its bundle holds, not every core of a node other trials share); no MPI."""
    if config.engine == "mpi":
        raise ConfigError("engine='mpi' cannot run inside a Tune trial; use 'ray' or 'local'")
    return config.copy(copy_frozen=False).update(
        num_workers=0 if config.num_workers == "auto" else config.num_workers,
        num_cpus_for_driver=config.num_cpus_for_driver or 1)


def trial_resources(config: AlgorithmConfig) -> Any:
    """What a Tune trial of ``config`` (as :func:`as_trial` made it) reserves, as Tune's
    ``PlacementGroupFactory``: one bundle for the trial (its learner's CPUs), one per Ray
    rollout worker; the trial's workers are then placed inside it (:func:`placement`)."""
    from ray.tune import PlacementGroupFactory

    # evaluation workers are Ray actors of the trial too (RLlib's request counts them as well)
    remote = config.plan().num_workers + config.evaluation_num_workers if config.engine == "ray" else 0
    return PlacementGroupFactory([{"CPU": float(config.num_cpus_for_driver or 1)}]
                                 + [{"CPU": config.num_cpus_per_worker}] * remote)


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


class ActorHost:
    """The Ray actor: builds the hosted object inside it, so a failing constructor returns its exception.

    (An exception in an actor's own ``__init__`` reaches the driver only as text.)
    """

    def build(self, make: Callable[..., Any], *args: Any) -> None:
        self.hosted = make(*args)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.hosted, method)(*args)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


REMOTE_HOST: Any = ray.remote(ActorHost)


class RayBackend(ActorBackend):
    """Actors are Ray actors (:class:`ActorHost`), references Ray's object references."""

    def open(self, config: AlgorithmConfig) -> bool:
        return init_ray(config)

    def close(self) -> None:
        shutdown_ray()

    def placement(self, config: AlgorithmConfig, num_workers: int, reserved_cpus: float = 0.0) -> Any:
        return placement(config, num_workers, reserved_cpus)

    def ship(self, recipe: WorkerRecipe) -> None:
        ship_recipe(recipe)

    def spawn(self, make: Callable[..., Any], args: tuple[Any, ...], num_cpus: float,
              where: Any = None) -> tuple[Any, ray.ObjectRef]:
        options: dict[str, Any] = {"num_cpus": num_cpus}
        if where is not None:
            options["scheduling_strategy"] = where
        actor = REMOTE_HOST.options(**options).remote()
        return actor, actor.build.remote(make, *args)

    def call(self, actor: Any, method: str, *args: Any) -> ray.ObjectRef:
        return actor.call.remote(method, *args)

    def wait(self, refs: list[Any], num_returns: int, timeout: float | None) -> list[Any]:
        done, _ = ray.wait(refs, num_returns=num_returns, timeout=timeout)
        return done

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.RayTaskError as exc:
            raise CallFailed(exc.cause) from exc
        except ray.exceptions.RayActorError as exc:
            raise ActorDied(first_line(exc)) from exc
        except ray.exceptions.GetTimeoutError as exc:
            raise CallTimeout(first_line(exc)) from exc

    def put(self, value: Any) -> Any:
        return ray.put(value)

    def kill(self, actor: Any) -> None:
        ray.kill(actor)

    def node_ids(self, actors: list[Any]) -> list[str]:
        return ray.get([actor.node_id.remote() for actor in actors])

    def num_cpus(self) -> float:
        return float(ray.cluster_resources().get("CPU", 0.0))


def actor_backend() -> ActorBackend:
    """Ray, unless this runs inside :func:`~volley.engines.backends.hosted_in_process`."""
    return in_process_host() or RayBackend()


class RayWorkerGroup(ManagedWorkers, WorkerGroup):
    """``num_workers`` actors (Ray's, see :func:`actor_backend`), each hosting one :class:`RolloutWorker`."""

    def __init__(self, recipe: WorkerRecipe, reserved_cpus: float = 0.0) -> None:
        """``reserved_cpus``: Ray CPUs this run's other workers hold already (see :func:`placement`)."""
        config = recipe.config
        self.backend = actor_backend()
        self.started_ray = self.backend.open(config)
        self.config, self.plan = config, recipe.plan
        self.num_workers = recipe.plan.num_workers
        try:
            where = self.backend.placement(config, self.num_workers, reserved_cpus)
            self.backend.ship(recipe)
            self.manager = ActorManager("rollout worker", lambda index, slot: (recipe.build, (index, slot)),
                                        self.num_workers, RestartPolicy.of(config), self.backend,
                                        config.num_cpus_per_worker, where)
        except BaseException:
            self.stop()
            raise

    def call(self, method: str, *args: Any) -> list[Any]:
        return self.manager.foreach(method, *args, again=self.config.on_worker_failure == "resample")

    def call_async(self, method: str, *args: Any) -> Callable[[], list[Any]]:
        return self.manager.foreach_async(method, *args, again=self.config.on_worker_failure == "resample")

    def stop(self) -> None:
        if hasattr(self, "manager"):
            self.manager.stop()
        if self.started_ray:
            self.backend.close()
            self.started_ray = False
