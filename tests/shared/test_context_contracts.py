"""The shared parts' contracts that bugs planted in them showed untested (interop/_context.py,
_module_api.py, _locks.py): a Ctrl-C as a selection sets the slot or restores it, a
selection entered twice, a lane just past the last, the re-init warning's old device,
locks renewed after a fork, a slot asked for where it is unknown. Each test fails with its
planted bug."""

import logging
import sys

import pytest

import interop
from functional_ws import LaneNotConfiguredError
from interop import _context, _locks


@pytest.fixture(autouse=True)
def _slot_back_after_each_test():
    """A plant that leaks a selection must fail its own test, not the ones after it."""
    slot, owners = _context.SLOT.set((None, 0)), _context._OWNERS.set((None, None))
    yield
    _context.SLOT.reset(slot)
    _context._OWNERS.reset(owners)


def _interrupt_at(code, call, nth):
    """A profile function raising KeyboardInterrupt as the ``nth`` C call named ``call``
    returns inside ``code``."""
    seen = []
    fired = []

    def interrupt(frame, event, arg):
        if event == "c_return" and frame.f_code is code and getattr(arg, "__name__", "") == call:
            seen.append(1)
            if len(seen) == nth and not fired:
                fired.append(1)
                raise KeyboardInterrupt

    return interrupt, fired


@pytest.mark.parametrize("select", [interop.use_workspace_ubatch, interop.use_workspace_lane])
def test_a_ctrl_c_as_enter_sets_the_slot_itself_leaves_it_as_it_was(select):
    # The suite's "entering" case fires at the first set (_OWNERS.set), before SLOT is set;
    # this fires at the second (SLOT.set), after the slot changed.
    interrupt, fired = _interrupt_at(_context._Selection.__enter__.__code__, "set", 2)
    before = interop.current_slot()
    selection = select(1)  # held: its weak-reference safety net must not be what restores
    sys.setprofile(interrupt)
    try:
        with selection:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    assert fired
    assert interop.current_slot() == before == (0, 0)
    del selection
    assert interop.current_slot() == (0, 0)


def test_a_ctrl_c_while_a_selection_restores_still_reaches_the_caller():
    interrupt, fired = _interrupt_at(_context._Selection._restore.__code__, "set", 1)
    with pytest.raises(KeyboardInterrupt):
        sys.setprofile(interrupt)
        try:
            with interop.use_workspace_ubatch(1):
                pass
        finally:
            sys.setprofile(None)
    assert fired
    assert interop.current_slot() == (0, 0)


def test_a_selection_already_active_cannot_be_entered_again():
    selection = interop.use_workspace_ubatch(1)
    with selection:
        with pytest.raises(RuntimeError, match="already active"):
            selection.__enter__()
        assert interop.current_slot() == (1, 0)
    assert interop.current_slot() == (0, 0)


def test_a_lane_just_past_the_last_is_refused_not_served_the_next_ubatchs_slot():
    ws = interop.WorkspaceManager("cpu", num_ubatches=2, num_lanes=1)
    with interop.use_workspace_ubatch(1):
        assert ws.get_persistent_resource("k", lambda: "ubatch 1's") == "ubatch 1's"
    with (  # lane 1 of ubatch 0: no such lane
        interop.use_workspace_lane(1),
        pytest.raises(LaneNotConfiguredError, match="lane 1 is not configured"),
    ):
        ws.get_persistent_resource("k", lambda: "made")


def test_the_reinit_warning_names_the_previous_managers_device(monkeypatch, caplog):
    monkeypatch.setattr(interop, "_manager", interop.WorkspaceManager("meta"))
    with caplog.at_level(logging.WARNING, logger="interop"):
        interop.init_workspace_manager("cpu")
    assert "initialized on device meta, reinitializing on device cpu" in caplog.text


def test_locks_registered_in_several_calls_are_all_renewed_after_a_fork():
    import threading

    class Owner:
        pass

    owner = Owner()
    owner.a, owner.b = threading.Lock(), threading.Lock()
    _locks.renew_after_fork(owner, "a")
    _locks.renew_after_fork(owner, "b")
    owner.a.acquire()
    owner.b.acquire()
    _locks._renew_all()  # what a forked child runs
    assert not owner.a.locked() and not owner.b.locked()


def test_the_only_slot_lock_is_renewed_after_a_fork():
    held = _context._ONLY_SLOT
    held.acquire()
    try:
        _locks._renew_all()  # what a forked child runs
        assert not _context._ONLY_SLOT.locked()
    finally:
        held.release()


def test_the_slot_inside_a_slot_unknown_block_is_refused_with_its_reason():
    from interop.errors import SlotUnknownError

    with (
        _context.slot_unknown("an XLA thread runs this"),
        pytest.raises(SlotUnknownError, match="an XLA thread runs this"),
    ):
        interop.current_slot()
    assert interop.current_slot() == (0, 0)
