"""Shared fixtures, and Hypothesis made reproducible.

Ray takes seconds to start, so each test module that needs it shares one.

Property tests draw the same examples on every run (``derandomize``): a red CI is a fault in
the code, never an unlucky draw (issue 45: a fresh clone once drew ``'\\ud800'``). To explore
new examples locally, run with ``HYPOTHESIS_PROFILE=explore``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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
