"""Fixtures of the multi-agent tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str:
    """The engine a test is parametrized with (``indirect``); Ray's cluster (2 CPUs) is the module's."""
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param
