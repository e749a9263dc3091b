"""Which slot a call works in (``interop/_context.py``): the ubatch's sources, in order."""

import threading
from unittest import mock

import pytest
import torch

import interop
from interop import current_slot, set_ubatch_provider, use_workspace_lane, use_workspace_ubatch


def test_a_block_beats_a_replaced_dbo_function_which_beats_the_provider(monkeypatch):
    previous = set_ubatch_provider(lambda: 1)
    try:
        assert current_slot() == (1, 0)  # the provider, through dbo_current_ubatch_id
        assert interop.dbo_current_ubatch_id() == 1
        monkeypatch.setattr(interop, "dbo_current_ubatch_id", lambda: 2)
        assert current_slot() == (2, 0)  # a replaced function wins over the provider
        with use_workspace_ubatch(3):
            assert current_slot() == (3, 0)  # a block wins over both
        monkeypatch.undo()
        assert current_slot() == (1, 0)  # the default is back, reading the provider
    finally:
        set_ubatch_provider(previous)
    assert current_slot() == (0, 0)


def test_deleting_a_replaced_dbo_function_gives_the_ubatch_back_to_the_default():
    own = interop.dbo_current_ubatch_id
    try:
        interop.dbo_current_ubatch_id = lambda: 1
        assert current_slot() == (1, 0)
        del interop.dbo_current_ubatch_id
        assert current_slot() == (0, 0)
    finally:
        interop.dbo_current_ubatch_id = own
    previous = set_ubatch_provider(lambda: 1)  # the module's own function reads it again
    try:
        assert current_slot() == (1, 0)
    finally:
        set_ubatch_provider(previous)


def test_an_inner_lane_block_gives_the_outer_blocks_lane_back():
    with use_workspace_lane(2):
        with use_workspace_lane(1):
            assert current_slot() == (0, 1)
        assert current_slot() == (0, 2)
    assert current_slot() == (0, 0)


def test_a_decorated_function_selects_its_slot_in_recursion_and_in_threads_at_once():
    @use_workspace_ubatch(1)
    def deepest(n: int) -> tuple[int, int]:
        return current_slot() if n == 0 else deepest(n - 1)

    assert deepest(2) == (1, 0)
    together = threading.Barrier(2)
    seen, errors = [], []

    @use_workspace_ubatch(1)
    def work() -> None:
        together.wait(timeout=10)
        seen.append(current_slot())
        together.wait(timeout=10)  # both inside the decorated function at once

    def run() -> None:
        try:
            work()
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and seen == [(1, 0), (1, 0)]
    assert current_slot() == (0, 0)


def test_mock_patch_of_the_module_path_selects_the_ubatch_of_every_manager():
    ws = interop.WorkspaceManager("cpu", num_ubatches=2)
    with mock.patch("interop.dbo_current_ubatch_id", return_value=1):
        ws.get_simultaneous(((16,), torch.uint8))
    assert [s.capacity for s in ws.state.slots] == [0, 256]


@pytest.mark.parametrize(
    ("method", "call"),
    [("__enter__", "set"), ("_restore", "get"), ("_restore", "set")],
    ids=["entering", "leaving, reading", "leaving, restored"],
)
@pytest.mark.parametrize("select", [interop.use_workspace_ubatch, interop.use_workspace_lane])
def test_a_ctrl_c_as_a_selection_sets_or_reads_the_slot_leaves_it_as_it_was(select, method, call):
    # Python raises a pending KeyboardInterrupt as a C call returns: right after __enter__
    # set the slot, the with block was never entered and no __exit__ put it back; the
    # thread stayed in ubatch 1 (another thread's buffer) for good. One Ctrl-C each.
    import sys

    from interop import _context

    code = getattr(_context._Selection, method).__code__
    fired = []

    def interrupt(frame, event, arg):
        if (
            not fired
            and event == "c_return"
            and frame.f_code is code
            and getattr(arg, "__name__", "") == call
        ):
            fired.append(call)
            raise KeyboardInterrupt

    before = interop.current_slot()
    sys.setprofile(interrupt)
    try:
        with select(1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    assert fired == [call]
    assert interop.current_slot() == before == (0, 0)


def test_a_ctrl_c_leaving_one_selection_keeps_the_other_part_selected_meanwhile():
    import sys

    from interop import _context

    code = _context._Selection._restore.__code__
    fired = []

    def interrupt(frame, event, arg):
        called = getattr(arg, "__name__", "")
        if not fired and event == "c_return" and frame.f_code is code and called == "set":
            fired.append(1)
            raise KeyboardInterrupt

    ubatch, lane = interop.use_workspace_ubatch(1), interop.use_workspace_lane(1)
    ubatch.__enter__()
    lane.__enter__()  # interleaved: the lane block outlives the ubatch block
    sys.setprofile(interrupt)
    try:
        ubatch.__exit__(None, None, None)
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    try:
        assert fired and interop.current_slot() == (0, 1)  # the lane kept
    finally:
        lane.__exit__(None, None, None)
    assert interop.current_slot() == (0, 0)


@pytest.mark.parametrize("form", ["ubatch", "lane", "decorator"])
def test_a_ctrl_c_as_exit_is_called_still_puts_the_slot_back_when_the_block_is_gone(form):
    """CPython delivers a pending signal as a function starts, before __exit__'s first
    line: the selection outlived its block for good, and requests outside any block went
    to its slot (219 of 9,654 real interrupts in a tight loop). One Ctrl-C at that point."""
    import sys

    from interop import _context

    code = _context._Selection.__exit__.__code__
    fired = []

    def interrupt(frame, event, arg):
        if not fired and event == "call" and frame.f_code is code:
            fired.append(1)
            raise KeyboardInterrupt

    def body():
        sys.setprofile(interrupt)

    before = _context.SLOT.get()
    try:
        if form == "decorator":
            interop.use_workspace_ubatch(1)(body)()
        else:
            select = (
                interop.use_workspace_ubatch if form == "ubatch" else interop.use_workspace_lane
            )
            with select(1):
                body()
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    assert fired and _context.SLOT.get() == before == (None, 0)
    with use_workspace_ubatch(1), interop.use_workspace_lane(1):  # and blocks work as ever
        assert current_slot() == (1, 1)
    assert _context.SLOT.get() == (None, 0)


def test_a_held_selection_that_dies_later_puts_back_only_the_slot_its_block_set():
    """Held in a variable, an interrupted selection dies later: inside a later block of the
    same value (or in another context) the slot is that block's, not its to put back."""
    import contextvars
    import sys

    from interop import _context

    code = _context._Selection.__exit__.__code__

    def interrupted(selection):
        fired = []

        def interrupt(frame, event, arg):
            if not fired and event == "call" and frame.f_code is code:
                fired.append(1)
                raise KeyboardInterrupt

        try:
            with selection:
                sys.setprofile(interrupt)
        except KeyboardInterrupt:
            pass
        finally:
            sys.setprofile(None)
        assert fired

    held = interop.use_workspace_ubatch(1)
    interrupted(held)
    assert _context.SLOT.get() == (1, 0)  # held: its block's end is not known yet
    _context.SLOT.set((None, 0))
    with use_workspace_ubatch(1):
        del held  # dies inside a later block that set ubatch 1 itself
        assert current_slot() == (1, 0)
    assert _context.SLOT.get() == (None, 0)

    kept = []

    def in_another_context():
        kept.append(interop.use_workspace_ubatch(2))
        interrupted(kept[-1])

    contextvars.copy_context().run(in_another_context)
    with use_workspace_ubatch(2):
        kept.clear()  # dies here, in this context, in a block of the same value
        assert current_slot() == (2, 0)
    assert _context.SLOT.get() == (None, 0)


def _lane_in_ubatch(body):
    with use_workspace_ubatch(1), interop.use_workspace_lane(2):
        body()


def _ubatch_in_lane(body):
    with interop.use_workspace_lane(2), use_workspace_ubatch(1):
        body()


def _decorated_lane_in_ubatch(body):
    with use_workspace_ubatch(1):
        interop.use_workspace_lane(3)(body)()


@pytest.mark.parametrize("blocks", [_lane_in_ubatch, _ubatch_in_lane, _decorated_lane_in_ubatch])
def test_an_interrupted_inner_block_is_put_back_after_its_outer_block_of_the_other_part(blocks):
    """The traceback keeps the inner __exit__'s frame (and the selection) alive while the
    outer block exits normally and writes a new slot tuple: the inner part stayed set when
    the put-back asked for the very tuple the inner block set (review)."""
    import sys

    from interop import _context

    code = _context._Selection.__exit__.__code__
    fired = []

    def interrupt(frame, event, arg):
        if not fired and event == "call" and frame.f_code is code:
            fired.append(1)
            sys.setprofile(None)
            raise KeyboardInterrupt

    try:
        blocks(lambda: sys.setprofile(interrupt))
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    assert fired and _context.SLOT.get() == (None, 0)
