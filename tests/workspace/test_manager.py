"""The torch façade keeps the original's observable behaviour (and adds what issue 3 asks).

Runs on CPU by default; ``FUNCTIONAL_WS_TEST_DEVICE=cuda`` runs it on a GPU. Every test runs
once per allocator (``torch``, ``jax``, a callable: ``tests/support/allocators.py``).
"""

import asyncio
import contextlib
import inspect
import logging
import threading

import numpy as np
import pytest
import torch
from conftest import TEST_DEVICE as DEVICE
from support.helpers import manager
from support.managers import OriginalAlgorithmManager
from support.seams import allocator_of, base_of, slot_buffer

import interop
from interop import WorkspaceLockedError, WorkspaceManager, use_workspace_lane, use_workspace_ubatch
from interop.errors import LaneNotConfiguredError, PersistentKeyLockedError, PersistentMismatchError

F32, BF16, I8, U8 = torch.float32, torch.bfloat16, torch.int8, torch.uint8
pytestmark = pytest.mark.usefixtures("allocator")


def span(view):
    """``[start, end)`` byte addresses of a view."""
    return view.data_ptr(), view.data_ptr() + view.numel() * view.element_size()


# ----- layout, growth, alignment -----


def test_views_are_back_to_back_at_256_byte_offsets_and_absolutely_aligned():
    ws = manager()
    a, b, c = ws.get_simultaneous(((10,), F32), ((3,), I8), ((2, 5), BF16))
    base = base_of(ws)
    assert [v.data_ptr() - base for v in (a, b, c)] == [0, 256, 512]
    assert all(v.data_ptr() % 256 == 0 for v in (a, b, c))
    assert (a.shape, b.shape, c.shape) == ((10,), (3,), (2, 5))
    assert (a.dtype, b.dtype, c.dtype) == (F32, I8, BF16)
    assert ws.state.capacity((0, 0)) == 768  # each view padded to 256, as the original


def test_growth_is_exact_only_for_the_requesting_slot_and_never_shrinks():
    ws = manager(num_ubatches=2)
    ws.get_simultaneous(((1000,), U8))
    with use_workspace_ubatch(1):
        ws.get_simultaneous(((10,), U8))
    assert [s.capacity for s in ws.state.slots] == [1024, 256]
    ws.get_simultaneous(((10,), U8))
    assert ws.state.capacity((0, 0)) == 1024
    ws.get_retained("kv", (1000,), U8)  # a retained span is not padded: exact
    with use_workspace_ubatch(1):
        ws.get_retained("kv", (1000,), U8)
    assert [s.capacity for s in ws.state.slots] == [1024, 1000]
    assert [s.growths for s in ws.state.slots] == [1, 2]


def test_ubatches_policy_grows_every_ubatch_slot_of_the_lane():
    ws = manager(num_ubatches=2, num_lanes=2, growth="ubatches")
    ws.get_simultaneous(((1000,), U8))
    assert [s.capacity for s in ws.state.slots] == [1024, 0, 1024, 0]


def test_growth_releases_then_allocates_inside_alloc_context(allocator, monkeypatch):
    """The original's order for the built-ins: release the old buffer (and empty the cache)
    before entering ``alloc_context()``, then allocate inside it; a callable allocator
    allocates first (inside the context), so a refused result changes nothing."""
    events = []

    @contextlib.contextmanager
    def pool():
        events.append(("enter", slot_buffer(ws) is None))
        yield
        events.append("exit")

    ws = manager(alloc_context=pool)
    real = allocator_of(ws).allocate

    def allocate(*args, **kwargs):
        events.append(("allocate", slot_buffer(ws) is None))
        return real(*args, **kwargs)

    monkeypatch.setattr(allocator_of(ws), "allocate", allocate)
    ws.get_simultaneous(((100,), U8))
    ws.get_simultaneous(((50,), U8))  # fits: no allocation
    ws.get_simultaneous(((300,), U8))
    released_first = allocator != "callable"
    assert events == [
        ("enter", True), ("allocate", True), "exit",
        ("enter", released_first), ("allocate", released_first), "exit",
    ]  # fmt: skip


@pytest.mark.parametrize("kind", [MemoryError, KeyboardInterrupt])
def test_an_alloc_context_that_fails_to_enter_is_a_failed_allocation(allocator, kind):
    """Entered after the release, a context that raises leaves what a failed allocation
    leaves: the old capacity again, the retained span dropped, the error with a note (a
    callable allocator enters it before anything is released: nothing changes)."""
    fail = [False]

    @contextlib.contextmanager
    def flaky():
        if fail[0]:
            raise kind("pool is full")
        yield

    ws = manager(alloc_context=flaky)
    ws.get_simultaneous(((100,), U8))
    tail, _ = ws.get_retained("kv", (8,), U8)
    tail.fill_(7)
    fail[0] = True
    before, buffer = ws.state, slot_buffer(ws, (0, 0))
    with pytest.raises(kind) as info:
        ws.get_simultaneous(((1000,), U8))
    if allocator == "callable":
        assert ws.state is before and slot_buffer(ws, (0, 0)) is buffer
        assert not getattr(info.value, "__notes__", None)
    else:
        assert "old capacity (256 bytes) was allocated again" in " ".join(info.value.__notes__)
        slot = ws.state.slots[0]
        assert (slot.capacity, slot.retained, slot.growths) == (256, None, 2)
        assert slot_buffer(ws, (0, 0)).numel() == 256  # the state says what exists
    fail[0] = False
    tail, intact = ws.get_retained("kv", (8,), U8)
    assert intact == (allocator == "callable")  # new bytes are never reported intact
    assert not intact or tail.tolist() == [7] * 8
    (view,) = ws.get_simultaneous(((1000,), U8))
    assert ws.state.capacity((0, 0)) == 1024 and view.data_ptr() % 256 == 0


# ----- lock -----


def test_lock_blocks_growth_smaller_requests_reuse_the_base_and_unlock_restores_growth():
    ws = manager()
    (big,) = ws.get_simultaneous(((1024,), F32))
    ws.lock()
    assert ws.is_locked()
    (small,) = ws.get_simultaneous(((16,), F32))
    assert small.data_ptr() == big.data_ptr()
    with pytest.raises(AssertionError, match="Workspace is locked"):
        ws.get_simultaneous(((2048,), F32))
    ws.unlock()
    (bigger,) = ws.get_simultaneous(((2048,), F32))
    assert ws.state.capacity((0, 0)) == 8192 and bigger.shape == (2048,)


def test_locked_error_names_sizes_and_the_callers_line():
    ws = manager()
    ws.get_simultaneous(((1024,), U8))
    ws.lock()
    with pytest.raises(WorkspaceLockedError) as info:
        ws.get_simultaneous(((3 * 1024 * 1024,), U8))
    message = str(info.value)
    assert "requires 3.00 MB" in message and "current size is 0.00 MB" in message
    assert "test_manager.py:" in message and ":test_locked_error_names_sizes" in message
    assert (info.value.required, info.value.current, info.value.slot) == (3 << 20, 1024, (0, 0))
    with pytest.raises(WorkspaceLockedError, match=r"test_manager\.py:\d+:test_locked"):
        ws.get_retained("kv", (2048,), U8)
    with pytest.raises(WorkspaceLockedError, match=r"test_manager\.py:\d+:test_locked"):
        ws.reserve(((4096,), U8))


def test_try_get_simultaneous_returns_none_and_changes_nothing():
    ws = manager()
    ws.get_simultaneous(((64,), U8))
    ws.get_retained("kv", (32,), U8)
    ws.lock()
    before = ws.state
    assert ws.try_get_simultaneous(((4096,), U8)) is None
    assert ws.state is before
    (view,) = ws.try_get_simultaneous(((16,), U8))
    assert view.shape == (16,)


def test_reserve_before_lock_makes_every_slot_fit():
    ws = manager(num_ubatches=2, num_lanes=2)
    ws.reserve_many([[((1024,), BF16), ((8,), F32)], [((4096,), U8)]], slots="all")
    assert {s.capacity for s in ws.state.slots} == {4096}
    ws.lock()
    for ubatch in range(2):
        for lane in range(2):
            with use_workspace_ubatch(ubatch), use_workspace_lane(lane):
                a, b = ws.get_simultaneous(((1024,), BF16), ((8,), F32))
                assert b.data_ptr() - a.data_ptr() == 2048
    ws.unlock()
    ws.reserve(((8192,), U8), slots=[(1, 1)])
    assert [s.capacity for s in ws.state.slots] == [4096, 4096, 4096, 8192]


# ----- lanes and ubatches -----


def test_lanes_do_not_alias_and_the_lane_is_restored_on_exit():
    ws = manager(num_lanes=2)
    (lane0,) = ws.get_simultaneous(((256,), F32))
    with use_workspace_lane(1):
        assert interop.current_slot() == (0, 1)
        (lane1,) = ws.get_simultaneous(((256,), F32))
    assert interop.current_slot() == (0, 0)
    a, b = span(lane0), span(lane1)
    assert a[1] <= b[0] or b[1] <= a[0]
    (again,) = ws.get_simultaneous(((256,), F32))
    assert again.data_ptr() == lane0.data_ptr()


def test_lane_validation():
    with pytest.raises(ValueError, match="non-negative"):
        use_workspace_lane(-1)
    ws = manager(num_lanes=2)
    with use_workspace_lane(2), pytest.raises(RuntimeError, match="is not configured"):
        ws.get_simultaneous(((4,), F32))
    with use_workspace_lane(5), pytest.raises(LaneNotConfiguredError):
        ws.get_persistent("k", (1,), F32)
    with pytest.raises(ValueError, match="at least one"):
        WorkspaceManager(DEVICE, num_lanes=0)


def test_a_selection_decorates_a_function_and_enters_again_as_the_originals_does():
    @use_workspace_lane(1)
    def inner():
        return interop.current_slot()

    @use_workspace_ubatch(1)
    def outer():
        return interop.current_slot(), inner()

    assert outer() == ((1, 0), (1, 1)) and inner() == (0, 1)
    assert interop.current_slot() == (0, 0)
    selection = use_workspace_lane(1)
    for _ in range(2):  # entered again after it exited
        with selection:
            assert interop.current_slot() == (0, 1)
    assert interop.current_slot() == (0, 0)


def test_the_module_lane_variable_reads_and_sets_the_lane_as_vllms_does():
    ws = manager(num_lanes=2)
    assert interop._workspace_lane.get() == 0
    with use_workspace_lane(1):
        assert interop._workspace_lane.get() == 1
    token = interop._workspace_lane.set(1)
    try:
        assert interop.current_slot() == (0, 1)
        ws.get_simultaneous(((64,), U8))
    finally:
        interop._workspace_lane.reset(token)
    assert interop.current_slot() == (0, 0) and [s.capacity for s in ws.state.slots] == [0, 256]


def test_the_module_lane_variable_checks_the_lane_and_resets_only_the_lane():
    ws = manager(num_lanes=2)
    with use_workspace_lane(1):
        (other,) = ws.get_simultaneous(((8,), F32))
    for bad in (-1, True, "x"):
        with pytest.raises(ValueError):  # -1 would index the last lane
            interop._workspace_lane.set(bad)
    assert interop.current_slot() == (0, 0)
    token = interop._workspace_lane.set(1)
    with use_workspace_ubatch(0):
        interop._workspace_lane.reset(token)  # out of order: the ubatch block's stays
        assert interop.current_slot() == (0, 0)
    assert interop.current_slot() == (0, 0)
    (mine,) = ws.get_simultaneous(((8,), F32))
    assert mine.data_ptr() != other.data_ptr()


def test_a_nested_factory_that_loses_to_another_thread_takes_the_winners_resource():
    ws = manager()
    inner_started, b_done = threading.Event(), threading.Event()
    got = {}

    def inner():
        inner_started.set()
        assert b_done.wait(10)
        return "A-inner"

    def outer():
        ws.get_persistent_resource("k", inner)  # loses: B stored "B" meanwhile
        return "A-outer"

    def thread_b():
        assert inner_started.wait(10)
        got["B"] = ws.get_persistent_resource("k", lambda: "B")
        b_done.set()

    b = threading.Thread(target=thread_b)
    b.start()
    got["A"] = ws.get_persistent_resource("k", outer)
    b.join(10)
    assert got == {"A": "B", "B": "B"} and ws.get_persistent_resource("k", dict) == "B"


def test_an_unhashable_persistent_key_is_a_type_error_as_in_the_original():
    ws, original = manager(), OriginalAlgorithmManager()
    for target in (ws, original):
        with pytest.raises(TypeError):
            target.get_persistent_resource(["x"], dict)
        with pytest.raises(TypeError):
            target.get_persistent(["x"], (2,), F32)


def test_ubatch_provider_is_used_outside_ubatch_blocks():
    ws = manager(num_ubatches=2)
    previous = interop.set_ubatch_provider(lambda: 1)
    try:
        ws.get_simultaneous(((64,), U8))
        with use_workspace_ubatch(0):
            assert interop.current_slot() == (0, 0)
    finally:
        interop.set_ubatch_provider(previous)
    assert [s.capacity for s in ws.state.slots] == [0, 256]


def test_get_retained_under_a_ubatch_provider_works_in_the_providers_ubatch():
    ws = manager(num_ubatches=2)
    ws.get_simultaneous(((1024,), U8))
    for _ in range(3):  # memoised in slot (0, 0)
        ws.get_retained("k", (16,), F32)
    previous = interop.set_ubatch_provider(lambda: 1)
    try:
        view, intact = ws.get_retained("k", (16,), F32)
    finally:
        interop.set_ubatch_provider(previous)
    assert not intact  # slot (1, 0) never retained "k"
    buffer = slot_buffer(ws, (1, 0))
    assert buffer.data_ptr() <= view.data_ptr() < buffer.data_ptr() + buffer.numel()


def test_reserve_grows_the_current_lanes_slots_by_default():
    ws = manager(num_ubatches=2, num_lanes=2)
    with use_workspace_lane(1):
        ws.reserve(((1000,), U8))
    assert [s.capacity for s in ws.state.slots] == [0, 1024, 0, 1024]


def test_two_threads_in_different_lanes_never_get_overlapping_memory():
    ws = manager(num_lanes=2)
    seen = {0: [], 1: []}
    errors = []
    start = threading.Barrier(2)

    def work(lane):
        try:
            with use_workspace_lane(lane):
                start.wait()
                for i in range(200):
                    views = ws.get_simultaneous(((64 + (i % 7) * 64,), F32), ((16,), I8))
                    views[0].fill_(lane)
                    seen[lane].append([span(v) for v in views])
                    assert views[0].eq(lane).all()
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(lane,)) for lane in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for a in seen[0][-1]:
        for b in seen[1][-1]:
            assert a[1] <= b[0] or b[1] <= a[0]
    assert ws.state.slots[0].capacity == ws.state.slots[1].capacity  # no lost update


def test_asyncio_tasks_see_their_own_lane():
    ws = manager(num_lanes=3)

    async def task(lane):
        with use_workspace_lane(lane):
            await asyncio.sleep(0)
            (view,) = ws.get_simultaneous(((32,), F32))
            await asyncio.sleep(0)
            return interop.current_slot(), view.data_ptr()

    async def main():
        return await asyncio.gather(*(task(lane) for lane in (0, 1, 2)))

    results = asyncio.run(main())
    assert [slot for slot, _ in results] == [(0, 0), (0, 1), (0, 2)]
    assert len({ptr for _, ptr in results}) == 3


# ----- the retained span -----


def test_retained_span_lies_at_the_end_and_reports_intact_as_the_original():
    ws = manager()
    ws.get_simultaneous(((1000,), U8))
    view, intact = ws.get_retained("kv", (25,), F32)
    assert not intact and view.data_ptr() - base_of(ws) == 768  # round_down(1000 - 100, 256)
    view.copy_(torch.arange(25, dtype=F32))
    again, intact = ws.get_retained("kv", (25,), F32)
    assert intact and again.data_ptr() == view.data_ptr() and again[24].item() == 24
    ws.get_simultaneous(((768,), U8))  # up to the span's start: no overlap
    assert ws.get_retained("kv", (25,), F32)[1]
    ws.get_simultaneous(((769,), U8))  # reaches into it
    assert not ws.get_retained("kv", (25,), F32)[1]
    assert not ws.get_retained("other", (25,), F32)[1]  # another key takes the span over
    assert not ws.get_retained("kv", (25,), F32)[1]
    ws.get_simultaneous(((5000,), U8))  # reallocation
    assert not ws.get_retained("kv", (25,), F32)[1]


@pytest.mark.parametrize(
    "keys",
    [(np.float32(2**24), 2**24 + 1, 2**24), (np.int64(1), 1, (1, 2)), (("kv", 1), ("kv", 1))],
    ids=["non-transitive", "numpy-then-tuple", "equal-tuples"],
)
def test_get_retained_remembers_the_latest_of_equal_keys_as_the_original(keys):
    """Four rounds, so that the memo serves the later ones: the façade kept the first of two
    equal keys (a False answered True; comparing np.int64(1) with a tuple raised)."""

    def answers(ws):
        out = []
        for _ in range(4):
            for key in keys:
                try:
                    out.append(ws.get_retained(key, (25,), F32)[1])
                except ValueError as err:
                    out.append(type(err).__name__)
        return out

    expected = answers(OriginalAlgorithmManager())
    assert answers(manager()) == expected and False in expected


def test_the_retained_memo_serves_an_equal_plain_key_made_anew(monkeypatch):
    """A key rebuilt every call (``("kv", layer)``) is one key: after two sightings the
    memo serves it without the slow path, as it serves the very same object."""
    ws = manager()
    slow = []
    original = WorkspaceManager._retain
    monkeypatch.setattr(
        WorkspaceManager, "_retain", lambda self, *a: slow.append(a) or original(self, *a)
    )
    answers = [ws.get_retained(("kv", int("3")), (25,), F32)[1] for _ in range(6)]
    assert answers == [False, True, True, True, True, True] and len(slow) == 2


#: A script of requests to one slot, zero-byte retained spans among them: (call, args).
ZERO_BYTE_SCRIPT = (
    ("retain", ("kv", (0, 4), F32)),  # the slot has no buffer yet
    ("retain", ("kv", (0, 4), F32)),  # the same key at the same offset (0): intact
    ("retain", ("kv", (0,), BF16)),  # zero bytes again, another spelling: same span
    ("retain", ("other", (0,), F32)),  # another key takes the span over
    ("retain", ("kv", (0,), F32)),
    ("acquire", ((0,), U8)),  # zero bytes reach nothing
    ("retain", ("kv", (0,), F32)),
    ("acquire", ((8,), U8)),  # grows: the span is dropped
    ("retain", ("kv", (0,), F32)),  # now at the end of a 256-byte buffer
    ("acquire", ((256,), U8)),  # up to the span, not past it
    ("retain", ("kv", (0,), F32)),
    ("retain", ("kv", (16,), U8)),  # bytes now: starts at 0, a new span
)


def test_a_zero_byte_retained_span_on_a_slot_without_a_buffer_is_an_empty_view():
    """vLLM 0.34.0 asks the missing buffer for its size (``AttributeError``); served here as
    ``get_simultaneous`` serves zero bytes: an empty view of the request's shape and dtype
    on the device, and no buffer allocated. ``intact`` follows the original's rule for any
    span (same key and start, nothing since reached into it, no growth), the span of a
    slot without a buffer starting at 0: the flags equal the original's algorithm's
    (:class:`OriginalAlgorithmManager`, which serves that request the same way)."""
    ws = manager(num_ubatches=2)
    view, intact = ws.get_retained("kv", (0, 4), F32)
    assert view.shape == (0, 4) and view.dtype == F32 and view.device.type == DEVICE.type
    assert not intact and slot_buffer(ws) is None and ws.state.capacity((0, 0)) == 0
    ws.lock()  # zero bytes need no growth: served while locked too, in the other slot
    with use_workspace_ubatch(1):
        view, intact = ws.get_retained("kv", (0,), BF16)
        assert view.shape == (0,) and view.dtype == BF16 and not intact
        assert ws.get_retained("kv", (0,), BF16)[1] and slot_buffer(ws, (1, 0)) is None


def test_zero_byte_retained_spans_report_intact_as_the_original():
    ws, original = manager(), OriginalAlgorithmManager()
    ours, theirs = [], []
    for call, args in ZERO_BYTE_SCRIPT:
        if call == "acquire":
            ws.get_simultaneous(args)
            original.get_simultaneous(args)
        else:
            ours.append(ws.get_retained(*args)[1])
            theirs.append(original.get_retained(*args)[1])
    assert ours == theirs == [False, True, True, False, False, True, False, True, False]


# ----- persistent resources -----


def test_persistent_resources_are_lazy_per_slot_and_the_same_object_on_repeat():
    ws = manager(num_lanes=2)
    calls = []

    def factory():
        calls.append(1)
        return object()

    first = ws.get_persistent_resource("r", factory)
    assert ws.get_persistent_resource("r", factory) is first and len(calls) == 1
    with use_workspace_lane(1):
        other = ws.get_persistent_resource("r", factory)
    assert other is not first and len(calls) == 2


@pytest.mark.parametrize("make", [manager, OriginalAlgorithmManager], ids=["ours", "original"])
def test_a_factory_asking_for_its_own_key_keeps_its_own_resource_as_the_original(make):
    ws = make()
    inner = []

    def outer():
        inner.append(ws.get_persistent_resource("k", lambda: "inner"))
        ws.get_persistent_resource("other", lambda: "o")  # another key: kept as made
        return "outer"

    assert ws.get_persistent_resource("k", outer) == "outer"  # the outer call assigns last
    assert inner == ["inner"] and ws.get_persistent_resource("k", lambda: "x") == "outer"
    assert ws.get_persistent_resource("other", lambda: "x") == "o"


def test_locked_persistent_rules_per_slot():
    ws = manager(num_lanes=2)
    made = ws.get_persistent_resource("r", dict)
    ws.lock()
    assert ws.get_persistent_resource("r", dict) is made
    with pytest.raises(AssertionError, match="was not allocated during warmup"):
        ws.get_persistent_resource("new", dict)
    with use_workspace_lane(1), pytest.raises(PersistentKeyLockedError):
        ws.get_persistent_resource("r", dict)


def test_a_raising_factory_leaves_no_claimed_key():
    ws = manager()

    def broken():
        raise KeyError("no")

    with pytest.raises(KeyError):
        ws.get_persistent_resource("r", broken)
    assert ws.state.slots[0].persistent_keys == frozenset()
    assert ws.get_persistent_resource("r", lambda: 7) == 7


def test_get_persistent_keeps_contents_zero_inits_once_and_rejects_changes():
    ws = manager()
    scales = ws.get_persistent("scales", (4,), F32, zero_init=True)
    assert scales.tolist() == [0.0] * 4
    scales.fill_(2.0)
    for _ in range(3):
        for view in ws.get_simultaneous(((1024,), F32), ((64,), U8)):
            view.fill_(7)
    again = ws.get_persistent("scales", (4,), F32, zero_init=True)
    assert again is scales and again.tolist() == [2.0] * 4
    with pytest.raises(ValueError, match="requested shape"):
        ws.get_persistent("scales", (5,), F32)
    with pytest.raises(PersistentMismatchError, match="requested shape"):
        ws.get_persistent("scales", (4,), BF16)
    assert ws.get_persistent_resource((torch.Tensor, "scales"), list) is scales


# ----- dims on the hot path -----


@pytest.mark.parametrize("dim", [True, 1.0], ids=["bool", "float"])
def test_memoised_request_does_not_let_equal_bool_or_float_dims_through(dim):
    ws = manager()
    ws.get_simultaneous(((1,), F32))
    ws.get_simultaneous(((1,), F32))  # memoised now
    assert ((dim,), F32) == ((1,), F32)
    with pytest.raises(ValueError, match="shape"):
        ws.get_simultaneous(((dim,), F32))
    ws.get_retained("kv", (1,), F32)
    ws.get_retained("kv", (1,), F32)
    with pytest.raises(ValueError, match="shape"):
        ws.get_retained("kv", (dim,), F32)
    ws.get_persistent("p", (1,), F32)
    with pytest.raises(ValueError, match="shape"):
        ws.get_persistent("p", (dim,), F32)


def test_numpy_int_dims_and_torch_size_are_served():
    np = pytest.importorskip("numpy")
    ws = manager()
    for _ in range(2):
        (a,) = ws.get_simultaneous(((np.int64(3), 2), F32))
        (b,) = ws.get_simultaneous((torch.Size([3, 2]), F32))
    assert a.shape == b.shape == (3, 2)


# ----- state, stats, plans, debug log -----


def test_state_is_read_only_and_matches_the_core():
    ws = manager()
    ws.get_simultaneous(((100,), F32))
    with pytest.raises(AttributeError):
        ws.state = None
    assert ws.state.capacity((0, 0)) == 512 and ws.state.slots[0].high_water == 512


def test_stats_report_capacity_high_water_and_growths():
    ws = manager(num_ubatches=2)
    ws.get_simultaneous(((100,), U8))
    ws.get_simultaneous(((300,), U8))
    stats = ws.stats()
    assert [(s.slot, s.capacity, s.high_water, s.growths) for s in stats.slots] == [
        ((0, 0), 512, 512, 2),
        ((1, 0), 0, 0, 0),
    ]
    assert stats.capacity == 512 and stats.pinned_bytes == 0 and not stats.locked
    assert "slot (0, 0): capacity 512 B" in str(stats)
    assert {s.allocator for s in stats.slots} == {ws.allocator}
    assert f"allocator {ws.allocator}" in str(stats)


def test_plans_round_trip_and_lock(tmp_path):
    warm = manager(num_ubatches=2)
    warm.get_simultaneous(((1000,), F32))
    with use_workspace_ubatch(1):
        warm.get_simultaneous(((10,), F32))
    warm.lock()
    path = tmp_path / "plan.json"
    warm.save_plan(path)
    fresh = manager(num_ubatches=2)
    fresh.load_plan(path)
    assert fresh.is_locked()
    assert [s.capacity for s in fresh.state.slots] == [4096, 256]
    fresh.get_simultaneous(((1000,), F32))  # fits without growth
    with pytest.raises(ValueError, match="num_ubatches=2"):
        manager().load_plan(path)


def test_debug_log_reports_lock_unlock_and_growth(monkeypatch, caplog):
    monkeypatch.setenv("FUNCTIONAL_WS_DEBUG", "1")
    caplog.set_level(logging.INFO, logger="interop")
    ws = manager()
    ws.get_simultaneous(((2 << 20,), U8))
    ws.lock()
    ws.unlock()
    text = caplog.text
    assert "Resized workspace from 'test_manager.py:" in text and "-> 2.00 MB" in text
    assert "Workspace locked" in text and "Workspace unlocked" in text
    monkeypatch.delenv("FUNCTIONAL_WS_DEBUG")
    monkeypatch.setenv("VLLM_DEBUG_WORKSPACE", "1")
    caplog.clear()
    ws.lock()
    assert "Workspace locked" in caplog.text


@pytest.mark.parametrize("value", ["1", "2", "-1", " 1 ", "true", "Yes", "on"])
def test_the_debug_variable_reads_as_vllm_reads_it(value, monkeypatch, caplog):
    """vLLM reads ``VLLM_DEBUG_WORKSPACE`` as ``bool(int(v))``: any non-zero int is on."""
    monkeypatch.delenv("FUNCTIONAL_WS_DEBUG", raising=False)
    monkeypatch.setenv("VLLM_DEBUG_WORKSPACE", value)
    caplog.set_level(logging.DEBUG, logger="interop")
    manager().lock()
    assert "Workspace locked" in caplog.text


@pytest.mark.parametrize("value", ["0", "false", "", "no"])
def test_the_debug_variable_off(value, monkeypatch, caplog):
    monkeypatch.delenv("FUNCTIONAL_WS_DEBUG", raising=False)
    monkeypatch.setenv("VLLM_DEBUG_WORKSPACE", value)
    caplog.set_level(logging.DEBUG, logger="interop")
    manager().lock()
    assert caplog.text == ""


def _a_request_on_its_third_line(ws: WorkspaceManager) -> int:
    line = inspect.currentframe().f_lineno  # type: ignore[union-attr]
    ws.get_simultaneous(((4096,), U8))
    return line


def test_a_lock_refusal_names_the_line_that_made_the_request():
    ws = manager()
    ws.lock()
    line = inspect.getsourcelines(_a_request_on_its_third_line)[1] + 2
    with pytest.raises(WorkspaceLockedError) as info:
        _a_request_on_its_third_line(ws)
    assert f"test_manager.py:{line}:_a_request_on_its_third_line" in str(info.value)


def test_debug_log_is_silent_by_default(monkeypatch, caplog):
    for name in ("FUNCTIONAL_WS_DEBUG", "VLLM_DEBUG_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.DEBUG, logger="interop")
    ws = manager()
    ws.get_simultaneous(((64,), U8))
    ws.lock()
    assert caplog.text == ""


def test_a_tail_clobbered_every_step_is_reported_lost_every_step_as_the_original():
    """The memo's replays of an alternating pattern (the tail retained, then a request
    reaching into it) are kept per state pair: the intact flag kept with them must be the
    replay's, not True."""
    ws, original = manager(), OriginalAlgorithmManager()
    for target in (ws, original):
        target.get_simultaneous(((4096,), U8))
    for _ in range(6):
        for target in (ws, original):
            target.get_simultaneous(((4096,), U8))  # reaches into the tail
        ours = ws.get_retained("tail", (64,), F32)[1]
        assert ours is original.get_retained("tail", (64,), F32)[1] is False
    for _ in range(3):  # and one left alone is intact
        assert ws.get_retained("tail", (64,), F32)[1] is True


def test_a_lane_one_past_the_last_is_refused_not_served_from_the_next_ubatch():
    ws = manager(num_ubatches=2, num_lanes=2)
    with use_workspace_ubatch(1):
        theirs = ws.get_persistent_resource("k", object)
        ws.get_persistent("p", (2,), F32)
    with use_workspace_lane(2):
        with pytest.raises(LaneNotConfiguredError):
            ws.get_persistent_resource("k", object)
        with pytest.raises(LaneNotConfiguredError):
            ws.get_persistent("p", (2,), F32)
    with use_workspace_ubatch(1):
        assert ws.get_persistent_resource("k", object) is theirs


def test_a_failed_growth_drops_its_new_buffers_before_allocating_the_old_again(monkeypatch):
    import weakref

    from interop import _device

    ws = WorkspaceManager("cpu", num_ubatches=2, growth="ubatches")
    ws.get_simultaneous(((512,), U8))  # both slots hold 512 B
    real, made, seen = _device.torch_block, [], []

    def torch_block(nbytes, device):
        if len(made) == 1:  # the second slot's new buffer: out of memory
            made.append(None)
            raise MemoryError("planted")
        if len(made) >= 2:  # the old capacity again: the first new buffer is gone by now
            seen.append(made[0]() is None)
        block = real(nbytes, device)
        made.append(weakref.ref(block))
        return block

    monkeypatch.setattr(_device, "torch_block", torch_block)
    with pytest.raises(MemoryError):
        ws.get_simultaneous(((4096,), U8))
    assert seen == [True, True] and [s.capacity for s in ws.state.slots] == [512, 512]


def test_a_failed_growth_allocates_the_old_capacity_again_inside_alloc_context(monkeypatch):
    from interop import _device

    inside = []

    @contextlib.contextmanager
    def pool():
        inside.append(True)
        try:
            yield
        finally:
            inside.pop()

    ws = WorkspaceManager("cpu", alloc_context=pool)
    ws.get_simultaneous(((512,), U8))
    real, calls = _device.torch_block, []

    def torch_block(nbytes, device):
        calls.append((nbytes, bool(inside)))
        if len(calls) == 1:
            raise MemoryError("planted")
        return real(nbytes, device)

    monkeypatch.setattr(_device, "torch_block", torch_block)
    with pytest.raises(MemoryError):
        ws.get_simultaneous(((4096,), U8))
    assert [inside for _, inside in calls] == [True, True]  # the pool's memory both times
    assert ws.state.slots[0].capacity == 512
