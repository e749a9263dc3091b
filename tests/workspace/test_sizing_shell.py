"""Sizing in the shell: ``History.trace()`` of a recording, ``reserve_for`` its worst case."""

import numpy as np
import pytest
import torch

import functional_ws as fws
from interop import WorkspaceManager, use_workspace_lane, use_workspace_ubatch

BF16, I32, F32 = torch.bfloat16, torch.int32, torch.float32


def step(ws, tokens, *, layers=2):
    """A toy model step on both ubatches and two lanes: per layer MoE scratch in lane 0,
    attention scratch in lane 1, a sampler tail and a persistent table."""
    for ubatch in (0, 1):
        with use_workspace_ubatch(ubatch):
            for layer in range(layers):
                ws.get_simultaneous(((tokens, 64), BF16), ((tokens, 2), I32))
                ws.get_persistent(("scales", layer), (4,), F32)
                with use_workspace_lane(1):
                    ws.get_simultaneous(((tokens * 3, 16), F32))
            ws.get_retained(("sampler", 0), (tokens * 8,), F32)


def warmed():
    ws = WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    with ws.recording() as history:
        for tokens in (8, 64, 32):
            step(ws, tokens)
    return ws, history


def test_a_recorded_warm_up_replays_with_no_growth_on_a_manager_reserved_for_it():
    _, history = warmed()
    trace = history.trace()
    fresh = WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    fresh.reserve_for(trace)
    assert fws.replay(fresh.state, trace) == ()
    assert [s.growths for s in fresh.state.slots] == [1, 1, 1, 1]  # one growth each
    with fresh.recording() as again:  # the same run, on the reserved manager: no growth
        for tokens in (8, 64, 32):
            step(fresh, tokens)
    assert [s.growths for s in fresh.state.slots] == [1, 1, 1, 1]
    assert fws.replay(again[0].state, again.trace()) == ()
    fresh.lock()  # its keys claimed, it serves the run locked
    for tokens in (64, 8):
        step(fresh, tokens)


def test_the_trace_holds_each_request_in_its_slot_in_call_order():
    ws = WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    with ws.recording() as history:
        step(ws, 8, layers=1)
    events = list(history.trace())
    assert [(e.kind, e.slot) for e in events[:4]] == [
        ("acquire", (0, 0)),
        ("claim", (0, 0)),
        ("acquire", (0, 1)),
        ("retain", (0, 0)),
    ]
    assert events[0].views == ((1024, "bfloat16"), (64, "int32"))
    assert events[1].key == (torch.Tensor, ("scales", 0))  # as the manager claims it
    assert events[3].key == ("sampler", 0) and events[3].views == ((256, "float32"),)
    assert events[4].slot == (1, 0)
    assert len(events) == 8


def test_replay_of_the_recording_counts_the_growths_it_made():
    ws, history = warmed()
    grown = sum(s.growths for s in ws.state.slots)
    shortfalls = fws.replay(history[0].state, history.trace())
    assert len(shortfalls) == grown == 8
    assert all(s.event.kind in ("acquire", "retain") for s in shortfalls)


def test_requests_refused_for_want_of_room_are_in_the_trace_bad_arguments_are_not():
    ws = WorkspaceManager("cpu")
    ws.get_persistent_resource("old", dict)
    ws.lock()
    with ws.recording() as history:
        with pytest.raises(AssertionError):
            ws.get_simultaneous(((1000,), F32))  # locked, too small
        assert ws.try_get_simultaneous(((2000,), F32)) is None
        with pytest.raises(AssertionError):
            ws.get_retained("kv", (10,), F32)
        with pytest.raises(AssertionError):
            ws.get_persistent_resource("new", dict)
        with pytest.raises(ValueError):
            ws.get_simultaneous(((-1,), F32))  # a malformed request
        with pytest.raises(ValueError):
            ws.get_simultaneous(((3,), np.dtype("float32")))  # a dtype, but not torch's
        ws.get_persistent_resource("old", dict)
    trace = history.trace()
    assert [(e.kind, e.nbytes, e.key) for e in trace] == [
        ("acquire", (4000,), None),
        ("acquire", (8000,), None),
        ("retain", (40,), "kv"),
        ("claim", (), "new"),
        ("claim", (), "old"),
    ]
    found = fws.replay(ws.state, trace)
    # The retain fits the slot as the replay grew it for event 1; "old" was claimed before.
    assert [s.index for s in found] == [0, 1, 3]


class ArenaFull(Exception):
    """A pool's own out-of-memory error: no torch or Python type, no telling message."""


def _pool(nbytes, device):
    if nbytes > 1 << 20:
        raise ArenaFull(f"the arena cannot fit {nbytes} bytes")
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


class _Swallow:
    """An ``alloc_context`` whose ``__exit__`` swallows what happens inside it."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


@pytest.mark.parametrize(
    "options",
    [
        {"allocator": _pool},
        {"allocator": _pool, "alloc_context": _Swallow},
        {"alloc_context": _Swallow},
    ],
    ids=["the pool's own error", "suppressed by alloc_context", "torch's, suppressed"],
)
def test_a_request_whose_allocation_failed_is_in_the_trace(options):
    ws = WorkspaceManager("cpu", **options)
    with ws.recording() as history:
        ws.get_simultaneous(((1000,), torch.uint8))
        try:  # (torch's allocator, suppressed, serves it: the growth happened)
            ws.get_simultaneous(((4 << 20,), torch.uint8))
        except Exception as err:
            assert type(err).__name__ in ("ArenaFull", "AllocationSuppressedError")
    trace = history.trace()
    assert [e.nbytes for e in trace] == [(1000,), (4 << 20,)]
    assert fws.worst_case(trace, like=ws.state).slots[0].capacity == 4 << 20


def test_calls_refused_for_their_arguments_are_not_in_the_trace():
    ws = WorkspaceManager("cpu")
    ws.get_persistent("p", (4,), F32)
    with ws.recording() as history:
        with pytest.raises(ValueError, match="requested shape"):
            ws.get_persistent("p", (5,), F32)  # the key holds another shape
        with use_workspace_lane(3), pytest.raises(RuntimeError, match="is not configured"):
            ws.get_simultaneous(((8,), F32))
        with pytest.raises(ValueError):
            ws.get_retained(["unhashable"], (8,), F32)
        with pytest.raises(TypeError, match="factory must be a callable"):
            ws.get_persistent_resource("k", 42)
    assert len(history) == 5 and len(history.trace()) == 0


def test_spellings_are_recorded_as_the_manager_serves_them():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_simultaneous(([2, 3], F32), (torch.Size([4]), I32))
        ws.get_retained(key="k", shape=[5], dtype=BF16)
    assert [e.views for e in history.trace()] == [
        ((24, "float32"), (16, "int32")),
        ((10, "bfloat16"),),
    ]


def test_a_call_inside_another_is_recorded_once():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_persistent("t", (4,), F32)  # calls get_persistent_resource
    assert [e.key for e in history.trace()] == [(torch.Tensor, "t")]


def test_a_trace_read_back_from_json_replays_as_the_one_written():
    ws, history = warmed()
    ws.lock()
    trace = history.trace()
    back = fws.Trace.from_json(trace.to_json())
    assert back != trace  # torch.Tensor went by repr
    assert fws.replay(ws.state, back) == fws.replay(ws.state, trace) == ()
    ws2 = WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    ws2.reserve_for(back)
    assert ws2.state == fws.apply_plan(ws2.state, fws.worst_case(trace, like=ws2.state))[0]


# ----- reserve_for -----


def test_reserve_for_changes_nothing_but_capacities_and_growth_counts():
    ws = WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((10,), F32))
    ws.get_persistent_resource("k", dict)
    with use_workspace_ubatch(1):
        ws.get_retained("tail", (4096,), torch.uint8)  # slot (1, 0) is large: it stays
    before = ws.state
    trace = fws.Trace().acquire((0, 0), ((5000,), torch.uint8)).acquire((1, 0), ((64,), F32))
    ws.reserve_for(trace)
    changes = {(c.slot, c.field) for c in fws.diff(before, ws.state)}
    assert changes == {((0, 0), "capacity"), ((0, 0), "growths")}
    assert ws.state.slots[1] is before.slots[1]  # retained span kept
    assert ws.state.slots[0].persistent_keys == {"k"} and ws.state.capacity((0, 0)) == 5120


def test_reserve_for_takes_the_worst_case_of_several_traces_and_the_growth_policy():
    ws = WorkspaceManager("cpu", num_ubatches=2, growth="ubatches")
    a = fws.Trace().acquire((0, 0), ((1000,), torch.uint8))
    b = fws.Trace().retain((1, 0), "k", ((3000,), torch.uint8))
    ws.reserve_for(a, b)
    assert [s.capacity for s in ws.state.slots] == [3000, 3000]
    assert [s.growths for s in ws.state.slots] == [1, 1]


def test_reserve_for_while_locked_raises_as_reserve_does_and_changes_nothing():
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((100,), F32))
    ws.lock()
    before = ws.state
    ws.reserve_for(fws.Trace().acquire((0, 0), ((10,), F32)))  # fits: nothing to do
    assert ws.state is before
    with pytest.raises(fws.WorkspaceLockedError, match="Workspace is locked"):
        ws.reserve_for(fws.Trace().acquire((0, 0), ((1000,), F32)))
    assert ws.state is before


def test_reserve_for_above_the_devices_memory_is_refused_before_anything_changes():
    ws = WorkspaceManager("cpu")
    before = ws.state
    huge = fws.Trace().acquire((0, 0), ((2**62,), torch.uint8))
    with pytest.raises(fws.CapacityLimitError):
        ws.reserve_for(huge)
    assert ws.state is before


BAD = [
    ("not-a-trace", ("trace",), fws.TraceTypeError, ["traces[0]", "'trace'"]),
    ("second-not-a-trace", (fws.Trace(), 3), fws.TraceTypeError, ["traces[1]", "3"]),
    ("no-trace", (), fws.InvalidTraceError, ["at least one trace"]),
    ("other-config", (fws.Trace().claim((0, 1), "k"),), fws.TraceMismatchError,
     ["traces[0]", "slot (0, 1)", "num_lanes >= 2"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "error", "fragments"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_reserve_for_refuses_bad_input_naming_it_and_changes_nothing(args, error, fragments):
    ws = WorkspaceManager("cpu")
    before = ws.state
    with pytest.raises(error) as info:
        ws.reserve_for(*args)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert ws.state is before


def test_a_recording_sees_reserve_for():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.reserve_for(fws.Trace().acquire((0, 0), ((10,), F32)))
    assert history[1].call.startswith("reserve_for(") and history[1].event is None
    assert len(history.trace()) == 0


def test_requests_a_persistent_factory_makes_are_in_the_trace():
    """A factory may call the manager: its requests are the run's, and sizing must see
    them (a reservation from a trace without them was too small)."""
    ws = WorkspaceManager("cpu")

    def build_table():
        (scratch,) = ws.get_simultaneous(((1 << 20,), torch.uint8))
        return scratch.sum()

    with ws.recording() as history:
        ws.get_simultaneous(((1024,), torch.uint8))
        ws.get_persistent_resource("table", build_table)
        ws.get_persistent("t", (4,), F32)  # still one event: the inner call is its own
    assert [(e.kind, e.nbytes, e.key) for e in history.trace()] == [
        ("acquire", (1024,), None),
        ("acquire", (1 << 20,), None),
        ("claim", (), "table"),
        ("claim", (), (torch.Tensor, "t")),
    ]
    fresh = WorkspaceManager("cpu")
    fresh.reserve_for(history.trace())
    assert fresh.state.capacity((0, 0)) == 1 << 20


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                     "memory: you tried to allocate 17179869184 bytes."),
        "jax",
        "capture",
    ],
    ids=["torch-cpu", "jax", "graph-capture"],
)  # fmt: skip
def test_every_kind_of_out_of_memory_keeps_the_request_in_the_trace(error, monkeypatch):
    import jax

    from interop import errors
    from interop._workspace import _engine

    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((1024,), torch.uint8))
    if error == "jax":
        error = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 16 GiB")
    elif error == "capture":
        error = errors.GrowthDuringCaptureError("the stream is capturing a CUDA graph")

    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr(_engine.Engine, "_install", fails)
    with ws.recording() as history, pytest.raises(type(error)):
        ws.get_simultaneous(((1 << 20,), torch.uint8))
    assert [e.nbytes for e in history.trace()] == [(1 << 20,)]
