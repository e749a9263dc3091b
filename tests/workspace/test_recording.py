"""Recording (``_recording.py``): every way of calling a method is recorded, once, and no
cycles."""

import gc
import os
import tempfile
import weakref

import pytest
import torch

import functional_ws as fws
from interop import WorkspaceManager
from interop._workspace._recording import RECORDED


def _freed_on_del(make) -> bool:
    gc.disable()
    try:
        ws = make()
        ref = weakref.ref(ws)
        del ws
        return ref() is None
    finally:
        gc.enable()


def test_a_dropped_manager_is_freed_at_once_before_and_after_a_recording():
    def used():
        ws = WorkspaceManager("cpu")
        for _ in range(2):  # the second sight memoises
            ws.get_simultaneous(((1000,), torch.uint8))
            ws.get_retained("kv", (16,), torch.uint8)
        return ws

    def recorded():
        ws = used()
        with ws.recording():
            ws.get_simultaneous(((10,), torch.uint8))
        return ws

    assert _freed_on_del(used)  # nothing holds the manager but its caller
    assert _freed_on_del(recorded)  # the recording's wrappers are gone with it


# ----- recording never changes what a call does (issue 20 #11, #12) -----


class BadRepr(str):
    """A key whose ``repr`` raises (the recording describes every argument)."""

    def __repr__(self):
        raise RuntimeError("no repr for you")

    __hash__ = str.__hash__
    __eq__ = str.__eq__


def test_an_argument_whose_repr_raises_changes_no_result():
    ws = WorkspaceManager("cpu")
    made = []
    with ws.recording() as history:
        resource = ws.get_persistent_resource(BadRepr("w"), lambda: made.append(1) or "made")
        view, intact = ws.get_retained(BadRepr("kv"), (8,), torch.uint8)
    assert resource == "made" and made == [1]  # the key was claimed once, the result kept
    assert view.shape == (8,) and intact is False
    assert ws.get_persistent_resource(BadRepr("w"), lambda: "again") == "made"
    calls = [record.call for record in history[1:]]
    assert calls == [
        "get_persistent_resource(<arguments whose repr raised RuntimeError: no repr for you>)",
        "get_retained(<arguments whose repr raised RuntimeError: no repr for you>)",
    ]
    assert [record.error for record in history[1:]] == [None, None]


def test_a_failed_call_keeps_its_own_error_and_is_recorded():
    ws = WorkspaceManager("cpu")
    ws.lock()
    with ws.recording() as history, pytest.raises(AssertionError, match="Workspace is locked"):
        ws.get_retained(BadRepr("kv"), (8,), torch.uint8)
    (record,) = history[1:]
    assert record.error.startswith("WorkspaceLockedError: ")


def test_a_provider_that_raises_during_the_bookkeeping_changes_no_result():
    import interop

    reads = []

    def provider():
        reads.append(1)
        if len(reads) > 2:  # the recording's start and the call itself read it first
            raise RuntimeError("provider gone")
        return 0

    ws = WorkspaceManager("cpu")
    previous = interop.set_ubatch_provider(provider)
    try:
        with ws.recording() as history:
            (view,) = ws.get_simultaneous(((16,), torch.uint8))
    finally:
        interop.set_ubatch_provider(previous)
    assert view.shape == (16,)
    (record,) = history[1:]
    assert record.slot is None and record.error is None
    assert "1 call" in repr(history)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_an_interrupted_call_is_recorded_as_an_error(interrupt):
    ws = WorkspaceManager("cpu")

    def factory():
        raise interrupt()

    with ws.recording() as history, pytest.raises(interrupt):
        ws.get_persistent_resource("w", factory)
    (record,) = history[1:]
    assert record.error == interrupt.__name__


# ----- every way of calling a method is recorded -----


def test_a_method_bound_before_the_recording_is_recorded():
    ws = WorkspaceManager("cpu")
    scratch, tail, resource = ws.get_simultaneous, ws.get_retained, ws.get_persistent_resource
    persistent, lock = ws.get_persistent, ws.lock  # a layer keeps them from its __init__
    with ws.recording() as history:
        scratch(((256, 1024), torch.float32))
        tail("t", (256,), torch.float32)
        resource("r", dict)
        persistent("p", (4,), torch.float32)
        lock()
    assert [r.call.split("(")[0] for r in history[1:]] == [
        "get_simultaneous",
        "get_retained",
        "get_persistent_resource",
        "get_persistent",
        "lock",
    ]
    trace = history.trace()
    assert [e.kind for e in trace] == ["acquire", "retain", "claim", "claim"]
    fresh = WorkspaceManager("cpu")  # sized from the trace, it serves the run locked
    fresh.reserve_for(trace)
    fresh.lock()
    fresh.get_simultaneous(((256, 1024), torch.float32))
    fresh.get_retained("t", (256,), torch.float32)


def test_a_call_through_the_class_is_recorded():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        WorkspaceManager.get_simultaneous(ws, ((8,), torch.float32))
        WorkspaceManager.try_get_simultaneous(ws, ((8,), torch.float32))
        WorkspaceManager.reserve(ws, ((100,), torch.float32))
    assert [r.call.split("(")[0] for r in history[1:]] == [
        "get_simultaneous",
        "try_get_simultaneous",  # its own get_simultaneous is not recorded twice
        "reserve",
    ]


def test_every_recorded_method_is_recorded_when_called_through_the_class():
    """Each method :data:`RECORDED` names is recorded once, however it is reached."""
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((10,), torch.uint8))
    path = os.path.join(tempfile.mkdtemp(), "plan.json")
    ws.save_plan(path)
    trace = fws.Trace().acquire((0, 0), ((10,), torch.uint8))
    calls = {
        "get_simultaneous": (((8,), torch.uint8),),
        "try_get_simultaneous": (((8,), torch.uint8),),
        "get_retained": ("k", (8,), torch.uint8),
        "reserve": (((8,), torch.uint8),),
        "reserve_many": ([[((8,), torch.uint8)]],),
        "reserve_for": (trace,),
        "load_plan": (path,),
        "get_persistent_resource": ("r", dict),
        "get_persistent": ("p", (2,), torch.uint8),
        "lock": (),
        "unlock": (),
    }
    assert set(calls) == set(RECORDED)
    with ws.recording() as history:
        for name, args in calls.items():
            getattr(WorkspaceManager, name)(ws, *args)
    assert [r.call.split("(")[0] for r in history[1:]] == list(calls)
    assert all(r.error is None for r in history[1:])


def test_an_override_calling_its_base_runs_once_and_is_recorded_once():
    runs = []

    class Logged(WorkspaceManager):
        def get_simultaneous(self, *specs):
            runs.append(specs)
            return super().get_simultaneous(*specs)

    ws = Logged("cpu")
    with ws.recording() as history:
        ws.get_simultaneous(((8,), torch.float32))
    assert len(runs) == 1
    assert [r.call for r in history[1:]] == ["get_simultaneous(((8,), float32))"]


def test_hits_are_recorded_and_a_manager_not_recording_asks_nothing_on_its_hot_paths():
    """While a recording runs, the hot paths' tables are empty, so each call takes the slow
    path that records it; after it, the hot paths read the memo and tables directly."""
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((1024,), torch.float32))  # room for the span past the request
    for _ in range(3):  # memoised: hits
        ws.get_simultaneous(((8,), torch.float32))
        ws.get_retained("k", (4,), torch.float32)
        ws.get_persistent("p", (2,), torch.float32)
    with ws.recording() as history:
        ws.get_simultaneous(((8,), torch.float32))
        _, intact = ws.get_retained("k", (4,), torch.float32)
        ws.get_persistent("p", (2,), torch.float32)
    assert intact and [e.kind for e in history.trace()] == ["acquire", "retain", "claim"]
    assert ws._acquired_at is ws._memos.acquired_at
    assert ws._retained_at is ws._memos.retained_at
    assert ws._tables is ws._persistent.tables


def test_a_call_text_keeps_the_users_keys_and_names_functions():
    ws = WorkspaceManager("cpu")
    module = torch.nn.Linear(2, 2)

    def make_cache():
        return {}

    with ws.recording() as history:
        ws.get_persistent_resource("torch.compile/cache", make_cache)
        ws.get_persistent_resource(module, dict)
        ws.get_simultaneous((torch.Size([2, 3]), torch.bfloat16))
    assert [r.call for r in history[1:]] == [
        "get_persistent_resource('torch.compile/cache', make_cache)",
        f"get_persistent_resource({module!r}, {dict!r})",
        "get_simultaneous((Size([2, 3]), bfloat16))",
    ]


def test_a_request_on_a_thread_of_unknown_slot_is_traced_in_the_slot_it_was_served_in():
    # XLA runs a torch_call function on its own thread, where the caller's slot is unknown
    # (_context.slot_unknown, as _torch_callback sets it): a one-slot manager serves its only
    # slot, and the trace must say so, or worst_case sizes the workspace without it.
    from interop._context import slot_unknown
    from interop.errors import SlotUnknownError

    ws = WorkspaceManager("cpu")
    with ws.recording() as history, slot_unknown("an XLA thread"):
        ws.get_simultaneous(((1000,), torch.uint8))
        ws.get_retained("tail", (300,), torch.uint8)
    assert [r.slot for r in history[1:]] == [(0, 0), (0, 0)]
    sized = WorkspaceManager("cpu")
    sized.reserve_for(history.trace())
    sized.lock()
    assert sized.state.capacity((0, 0)) == ws.state.capacity((0, 0)) == 1024
    assert fws.replay(sized.state, history.trace()) == ()
    two = WorkspaceManager("cpu", num_ubatches=2)
    with (
        two.recording() as history,
        slot_unknown("an XLA thread"),
        pytest.raises(SlotUnknownError),
    ):
        two.get_simultaneous(((1000,), torch.uint8))
    assert history[1].slot is None and len(history.trace()) == 0  # refused: nothing to size


def test_a_try_get_that_returned_none_reads_as_declined_not_as_served():
    """It showed as a normal call: no outcome, "no differences", not counted refused."""
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((16,), torch.float32))
    ws.lock()
    with ws.recording() as history:
        assert ws.try_get_simultaneous(((100_000,), torch.float32)) is None
        assert ws.try_get_simultaneous(((4,), torch.float32)) is not None
    declined, served = history[1], history[2]
    assert declined.error is None and declined.declined == (
        "returned None: locked, and the slot is too small"
    )
    assert served.declined is None
    assert str(declined).endswith("-> returned None: locked, and the slot is too small")
    assert repr(history) == "History(2 calls after the start in (0, 0), 1 refused)"
    html = history._repr_html_()
    assert "returned None: locked, and the slot is too small" in html
    assert html.count("no differences") == 1  # the served one only
    assert len(history.trace()) == 2  # both were asked for: sizing counts the declined one
