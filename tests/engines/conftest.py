"""Fixtures of the engine tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from volley.engines.backends import InProcessBackend, hosted_in_process


@pytest.fixture
def in_process() -> Iterator[InProcessBackend]:
    """The Ray engine's worker groups built in the test host their actors in this process: a death
    is injected by this backend's ``kill`` or ``crash``, at a known call, without timing."""
    with hosted_in_process() as backend:
        yield backend
