"""Starting the embedded Ray cluster: quickly, and in a thread while the driver imports torch.

``volley train`` on the Ray engine spends about 1 s importing torch and the algorithm and
about 1.5 s in ``ray.init`` (2 to 3 s before :func:`init` and :data:`QUICK_CONNECT` took out
two of Ray's one-second naps), most of it waiting for the cluster's processes (GCS, raylet,
dashboard, agents) to come up. The two overlap: as soon as the command line says
that a run starts an embedded cluster, :func:`begin` calls ``ray.init`` in a thread, and
:func:`~volley.engines.ray_engine.init_ray` later takes that cluster (:func:`take`) instead
of starting one. A cluster nobody takes (the config turned out to want none, or it was
rejected) is shut down by :func:`abandon`.

This module imports only the standard library (``ray`` is imported in the thread), so
calling it costs the driver nothing. The thread lives until the cluster is shut down: Ray
starts its node processes with ``PR_SET_PDEATHSIG``, which fires when the *thread* that
started them ends, not the process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any

from volley.engines import ray_reaper

# A cluster's processes connect to each other's Unix sockets, retrying while a socket is not
# yet there; Ray waits 1 s between tries (10 tries). At start the raylet races its own object
# store for that socket, lost it in about half of the starts here, and so registered a second
# late. 20 ms between 500 tries keeps Ray's 10 s of patience and loses 20 ms instead.
QUICK_CONNECT = {"raylet_client_connect_timeout_milliseconds": 20, "raylet_client_num_connect_attempts": 500}


def cluster_kwargs(ray_address: str | None, num_cpus: int | None, log_level: str) -> dict[str, Any]:
    """``ray.init``'s arguments for a run: join ``ray_address``, or start a cluster of ``num_cpus``
    ("local" starts a new one even when another cluster on this machine is recorded)."""
    kwargs: dict[str, Any] = {"address": ray_address or "local", "include_dashboard": False,
                              "logging_level": logging.getLevelName(log_level), "configure_logging": True}
    if ray_address is None:
        kwargs["num_cpus"] = num_cpus
        kwargs["_system_config"] = QUICK_CONNECT
    return kwargs


def init(kwargs: dict[str, Any]) -> None:
    """``ray.init(**kwargs)``, without the idle second Ray's own wait for its raylet can add.

    Starting a cluster, Ray asks the GCS whether the new raylet has registered, and when it
    has not, sleeps a whole second before asking again (``GlobalStateAccessor::GetNode``).
    It first asks 0.1 s after starting the raylet, which here registers about 0.55 s after it
    starts (it waits for its agents), so every start lost about half a second asleep. While
    ``ray.init`` runs, the lookup it makes (``ray._private.services.get_node``) first waits for
    the registration in 20 ms steps, so Ray's first question finds the raylet. Anything
    unexpected in that wait (another Ray's internals) leaves Ray's own wait, unchanged, to
    decide. Ray 2.9 has no such lookup: it waits for the raylet in 0.1 s steps
    (``services.wait_for_node``), and its ``ray.init`` runs as it is.
    """
    import ray
    from ray._private import services

    # ray.init writes its own keys (the session's spilling directory) into the _system_config it
    # is given: a copy keeps QUICK_CONNECT and the caller's kwargs as they were
    kwargs = {key: dict(value) if key == "_system_config" else value for key, value in kwargs.items()}
    lookup = getattr(services, "get_node", None)
    if lookup is None:
        ray.init(**kwargs)
        return

    def get_node(gcs_address: str, node_id: str, *rest: Any) -> Any:
        with contextlib.suppress(Exception):  # Ray's own lookup below still waits and reports
            _await_raylet(gcs_address, node_id)
        return lookup(gcs_address, node_id, *rest)

    services.get_node = get_node
    try:
        ray.init(**kwargs)
    finally:
        services.get_node = lookup


def _await_raylet(gcs_address: str, node_id: str, timeout_s: float = 10.0) -> bool:
    """Whether the GCS at ``gcs_address`` listed the raylet ``node_id`` within ``timeout_s``."""
    from ray._raylet import GcsClient, NodeID  # type: ignore[attr-defined]

    client, wanted = GcsClient(address=gcs_address), NodeID.from_hex(node_id)
    deadline = time.monotonic() + timeout_s
    while wanted not in client.get_all_node_info(timeout=1):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# Notes Ray logs when volley starts its embedded cluster that ask nothing of the user: only a
# main thread can take Ray's SIGTERM handler (volley's run loop installs its own: a checkpoint,
# then exit 143), and token authentication is on (Ray's secure default since 2.59).
CLUSTER_NOTES = {"ray._private.worker": "SIGTERM handler is not set",
                 "ray._private.authentication.authentication_token_setup": "Token authentication is enabled"}


def _drop_note(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(CLUSTER_NOTES.get(record.name, "\0"))


def quiet_cluster_notes() -> None:
    """Drop :data:`CLUSTER_NOTES` from Ray's log (once per process; other messages pass)."""
    for name in CLUSTER_NOTES:
        logger = logging.getLogger(name)
        if _drop_note not in logger.filters:
            logger.addFilter(_drop_note)


class Boot:
    """``ray.init`` in a thread of its own for a run of these config ``settings`` (a preset's
    and the command line's keys); the thread stays until :meth:`release`."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.kwargs: dict[str, Any] = {}
        self.before = ray_reaper.children(os.getpid())  # so the reaper can tell the cluster's processes
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._release = threading.Event()
        threading.Thread(target=self._run, name="volley-ray-start", daemon=True).start()

    def _run(self) -> None:
        try:
            from volley.config import AlgorithmConfig

            self.kwargs = cluster_kwargs(None, self.settings.get("num_cpus"),
                                         self.settings.get("log_level", AlgorithmConfig.log_level))
            quiet_cluster_notes()
            init(self.kwargs)
        except BaseException as exc:  # the main thread sees it in take() and starts Ray itself
            self.error = exc
        finally:
            self._done.set()
        self._release.wait()

    def wait(self) -> Boot:
        self._done.wait()
        return self

    def release(self) -> None:
        """Let the thread end; after ``ray.shutdown()``, or the cluster goes with it."""
        self._release.set()


_pending: Boot | None = None  # begun, not taken yet
_taken: Boot | None = None  # the running cluster's, released by release_taken()


def begin(settings: dict[str, Any]) -> None:
    """Start an embedded cluster for a run of ``settings`` in the background (once; not if Ray
    is up already)."""
    global _pending
    ray = sys.modules.get("ray")  # imported only if something else did already
    if _pending is None and _taken is None and not (ray is not None and ray.is_initialized()):
        _pending = Boot(settings)


def take() -> Boot | None:
    """The background start, finished (its ``error`` set if it failed); None if none was begun."""
    global _pending, _taken
    boot, _pending = _pending, None
    if boot is not None and boot.wait().error is None:
        _taken = boot
    elif boot is not None:
        boot.release()  # nothing started: the thread may end
    return boot


def release_taken() -> None:
    """After ``ray.shutdown()``: end the thread that started the cluster."""
    global _taken
    if _taken is not None:
        _taken.release()
        _taken = None


def abandon() -> None:
    """Shut down a cluster begun in the background that no engine took."""
    boot = take()
    if boot is not None and boot.error is None:
        import ray

        ray.shutdown()
        release_taken()
