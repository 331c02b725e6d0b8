"""Shared fixtures, and Hypothesis made reproducible.

Ray takes seconds to start, so each test process shares one (``ray_session``).

Property tests draw the same examples on every run (``derandomize``): a red CI is a fault in
the code, never an unlucky draw (issue 45: a fresh clone once drew ``'\\ud800'``). To explore
new examples locally, run with ``HYPOTHESIS_PROFILE=explore``.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def ray_session():
    """The Ray cluster this test process shares: a new embedded one (never one recorded by `ray
    start`) with 2 CPUs, started as volley's Ray engine starts it, on first use (about 6 s of CPU
    here), and kept to the end rather than one per module. A test that needs Ray down
    (:func:`no_ray`) shuts it down, and the next test that asks for it starts a new one."""
    import ray

    from volley.engines import ray_boot

    if not ray.is_initialized():
        ray_boot.init(ray_boot.cluster_kwargs(None, 2, "ERROR") | {"log_to_driver": False})
    return ray


def stop_ray() -> None:
    """Shut Ray down as volley's engine does, if this process has it up."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        from volley.engines.ray_engine import shutdown_ray

        shutdown_ray()


@pytest.fixture
def no_ray() -> None:
    """Ray is not running in this process: for what volley does when it has to start or find one."""
    stop_ray()


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_ray()


# The folders by how long their tests run, longest first. pytest-xdist (``--maxschedchunk 1`` in
# pyproject.toml) hands each process the next test in this order whenever it is down to two, so the
# long learning runs spread over the processes at the start and the thousands of short unit tests
# fill the gaps at the end. (Without it, xdist sends each process a contiguous quarter of its share
# at once: one process got every learning run and most CLI runs, and ran alone for minutes.)
SLOWEST_FIRST = ("learning", "mpi", "cli", "engines", "multi_agent", "unit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        folder = item.path.parent.name
        return SLOWEST_FIRST.index(folder) if folder in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)
