"""Shared fixtures. Ray takes seconds to start, so each test module that needs it shares one."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """A new embedded Ray cluster (never one recorded by `ray start`) with 2 CPUs, started and
    shut down as volley's Ray engine does it."""
    import ray

    from volley.engines import ray_boot
    from volley.engines.ray_engine import shutdown_ray

    ray_boot.init(ray_boot.cluster_kwargs(None, 2, "ERROR") | {"log_to_driver": False})
    yield ray
    shutdown_ray()
