"""A watchdog that ends what is left of an embedded Ray cluster once its driver is gone.

Ray starts its node processes (GCS, raylet, dashboard, monitors) with
``PR_SET_PDEATHSIG``, so they die with the driver, and the workers die with the
raylet. The raylet's agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) are
its children, not the driver's: after a ``kill -9`` of the driver they notice the
raylet's death, then try to report it to the GCS, which is dead too, and wait out
that call's 60 s timeout (about 180 MB between them, for every crashed run).

:func:`watch` starts this file as a small process (the standard library only) that
learns the cluster's process tree while the driver lives and, when the driver's end of
its stdin closes (the driver exited, or :func:`release` after ``ray.shutdown()``),
kills whatever of that tree is still running. Linux only, where Ray relies on
``PR_SET_PDEATHSIG``; elsewhere Ray starts its own reaper.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

PROC = Path("/proc")
POLL_S = 1.0  # how often the watchdog looks for new processes in the cluster's tree

_watchdog: subprocess.Popen | None = None


def _stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time)`` of ``pid`` from ``/proc/PID/stat``; None once it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
    return int(fields[1]), int(fields[19])


def _processes() -> dict[int, tuple[int, int]]:
    """Every process's ``(parent pid, start time)``."""
    found = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``."""
    return {child for child, (parent, _) in _processes().items() if parent == pid}


def watch(roots: set[int]) -> None:
    """Start the watchdog over ``roots`` (the processes ``ray.init`` started) and their descendants."""
    global _watchdog
    release()
    if roots and PROC.is_dir():
        _watchdog = subprocess.Popen([sys.executable, "-I", __file__, *map(str, sorted(roots))],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)


def release() -> None:
    """Close the watchdog's stdin: it kills what is left of the cluster and exits."""
    global _watchdog
    if _watchdog is None:
        return
    assert _watchdog.stdin is not None
    _watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):  # it only has kills to send
        _watchdog.wait(timeout=10)
    _watchdog = None


def _descendants(roots: set[int]) -> dict[int, int]:
    """``roots`` and every process below them, with their start times."""
    processes = _processes()
    found = {pid: processes[pid][1] for pid in roots if pid in processes}
    frontier = set(found)
    while frontier:
        frontier = {pid for pid, (parent, _) in processes.items() if parent in frontier} - set(found)
        found.update({pid: processes[pid][1] for pid in frontier})
    return found


def _serve(roots: set[int]) -> None:
    """Track the tree below ``roots`` until stdin closes, then SIGKILL what is still running
    (a process counts as the same only with the same start time: pids are reused)."""
    # A Ctrl-C or SIGTERM to the driver's process group is for the driver, which shuts Ray down
    # itself and then closes our stdin; a watchdog that died of it could not cover a later kill -9.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    tracked: dict[int, int] = {}
    while True:
        tracked = {pid: start for pid, start in tracked.items() if (_stat(pid) or (0, -1))[1] == start}
        tracked.update(_descendants(roots))
        readable, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if readable and not os.read(sys.stdin.fileno(), 1):
            break
    for pid, start in tracked.items():
        if (_stat(pid) or (0, -1))[1] == start:
            with contextlib.suppress(OSError):  # it ended meanwhile
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    _serve({int(arg) for arg in sys.argv[1:]})
