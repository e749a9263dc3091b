"""Run the shipped state machine against the pure core, in several configurations."""

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

import functional_ws as fws
from functional_ws.testing import Transitions, WorkspaceMachine


class TestSlotPolicy(WorkspaceMachine.TestCase):
    pass


class UbatchesMachine(WorkspaceMachine):
    growth = "ubatches"
    num_ubatches = 3
    num_lanes = 1


class TestUbatchesPolicy(UbatchesMachine.TestCase):
    pass


class SmallAlignmentMachine(WorkspaceMachine):
    alignment = 16
    num_ubatches = 1


class TestSmallAlignment(SmallAlignmentMachine.TestCase):
    pass


def _off_by_one_acquire(state, slot, *specs):
    state, layout = fws.acquire(state, slot, *specs)
    shifted = tuple(o + 1 if i else o for i, o in enumerate(layout.offsets))
    return state, type(layout)(**{**layout.__dict__, "offsets": shifted})


def _forgetful_retain(state, slot, key, spec):
    """Reports intact whenever the key matches, even after a request clobbered the span."""
    previous = state.slots[state.index(slot)].retained
    state, span, intact = fws.retain(state, slot, key, spec)
    return (
        state,
        span,
        intact or (previous is None and False) or (previous is not None and previous[0] == key),
    )


def _grows_when_locked(state, slot, *specs):
    was_locked = state.locked
    state, layout = fws.acquire(fws.unlock(state), slot, *specs)
    return (fws.lock(state) if was_locked else state), layout


@pytest.mark.parametrize(
    ("bug", "symptom"),
    [
        pytest.param({"acquire": _off_by_one_acquire}, "is not aligned", id="off-by-one-offset"),
        pytest.param({"retain": _forgetful_retain}, "intact", id="intact-lie"),
        pytest.param({"acquire": _grows_when_locked}, "expected WorkspaceLockedError",
                     id="growth-while-locked"),
    ],
)  # fmt: skip
def test_machine_finds_planted_bugs(bug, symptom):
    class Broken(WorkspaceMachine):
        transitions = Transitions(**bug)

    with pytest.raises(AssertionError, match=symptom):
        run_state_machine_as_test(Broken, settings=settings(report_multiple_bugs=False))
