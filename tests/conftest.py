"""Shared test configuration: Hypothesis profiles.

``ci`` (the default, used by ``make test``): derandomized, a fixed budget, so runs on a noisy
2-core machine are reproducible. ``dev``: deeper, random; ``HYPOTHESIS_PROFILE=dev pytest``.
The ``allocator`` fixture runs a test once per workspace allocator.
"""

import os

import pytest
from _allocators import ALLOCATORS, CHOSEN
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=1000, stateful_step_count=80, deadline=None, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(params=list(ALLOCATORS))
def allocator(request, monkeypatch):
    """Run the test once per allocator (``tests/_allocators.py``); yields its id."""
    monkeypatch.setitem(CHOSEN, "allocator", ALLOCATORS[request.param])
    return request.param
