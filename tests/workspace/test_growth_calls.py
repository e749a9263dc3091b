"""A growth's walk through the library, counted (``benchmarks/count_growth_calls.py``):
deterministic, so it is a test where a timing could not be. A ``get_simultaneous`` that grows
its slot makes at most ``MAX_CALLS`` Python calls of the library (issue 28's budget), first
sighting or memoised, with the built-in allocator; every growth a caller meets goes through
the engine's one growth routine."""

from __future__ import annotations

import pytest
from support.helpers import load_benchmark

counter = load_benchmark("count_growth_calls")


@pytest.mark.parametrize(
    "case", ["get_simultaneous, first sighting", "get_simultaneous, after two sightings"]
)
def test_a_get_simultaneous_growth_stays_within_the_call_budget(case):
    calls, _, order = counter.count_calls(counter.growths()[case])
    assert calls <= counter.MAX_CALLS, "\n".join(order)
    assert "interop/_workspace/_engine:_grow" in order  # it did grow
    assert order.count("interop/_workspace/_providers:allocate") == 1  # once


def test_every_growth_a_caller_meets_runs_the_engines_growth_once():
    for name, call in counter.growths().items():
        _, _, order = counter.count_calls(call)
        grows = [step for step in order if step.startswith("interop/_workspace/_engine:_grow")]
        assert len(grows) == 1, (name, order)
