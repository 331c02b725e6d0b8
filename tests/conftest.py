"""Shared fixtures. Ray takes seconds to start, so each test module that needs it shares one."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """A new embedded Ray cluster (never one recorded by `ray start`) with 2 CPUs."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()
