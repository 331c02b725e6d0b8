"""Shared fixtures. Ray takes seconds to start, so each test module that needs it shares one."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """An embedded Ray cluster with an explicit CPU count, shut down after the module."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()
