"""Races, re-entrance and recording under threads (issue: faults, races and hostile input,
items 2, 4 and 5).

``intact=True`` must describe the bytes of the view returned, under any interleaving of
public calls from any threads; no call returns a view of a buffer the state no longer
describes; user code (a persistent factory, ``alloc_context()``, a callable allocator) may
wait for other threads that use the manager without deadlock; recordings nest and see
every thread.
"""

import contextlib
import random
import threading

import pytest
import torch
from support.seams import in_slot_buffer

from interop import WorkspaceManager, use_workspace_ubatch

U8 = torch.uint8
TIMEOUT = 20  # seconds: a deadlock shows as a thread still alive after this


class Hooked(tuple):
    """A shape whose iteration runs ``hook`` once: a growth forced into a call."""

    def __new__(cls, dims, hook):
        self = super().__new__(cls, dims)
        self.hook = hook
        return self

    def __iter__(self):
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return super().__iter__()


def test_a_growth_between_memo_lookup_and_state_read_never_serves_the_retired_buffer():
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((1024,), U8))
    ws.get_simultaneous(((512,), U8))  # memoised
    grow = lambda: ws.reserve(((8192,), U8))  # noqa: E731 - the forced interleaving
    (view,) = ws.get_simultaneous((Hooked((512,), grow), U8))
    assert ws.state.capacity((0, 0)) == 8192 and in_slot_buffer(ws, view)
    (again,) = ws.get_simultaneous(((512,), U8))
    assert again.data_ptr() == view.data_ptr()


def test_retained_tail_across_a_forced_growth_is_never_falsely_intact():
    ws = WorkspaceManager("cpu")
    ws.get_retained("warm-up", (1000,), U8)  # a 1000-byte slot
    tail, _ = ws.get_retained("kv", (16,), U8)  # at 768: 1000 - 16 rounded down
    tail.fill_(1)
    assert ws.get_retained("kv", (16,), U8)[1]  # memoised and intact
    # A growth to 1024 bytes keeps the span's offset (768): only the buffer changes.
    grow = lambda: ws.reserve(((1024,), U8))  # noqa: E731
    view, intact = ws.get_retained("kv", Hooked((16,), grow), U8)
    assert not intact and in_slot_buffer(ws, view)  # the tail moved into a new buffer
    view.fill_(2)
    again, intact = ws.get_retained("kv", (16,), U8)
    assert intact and again.data_ptr() == view.data_ptr() and again.tolist() == [2] * 16


def test_a_growth_inside_a_callable_allocator_of_another_slot_is_seen(allocator_barrier=None):
    """A barrier in an allocator: while slot (0, 0) allocates, another thread grows slot
    (1, 0) and reads its tail; both end consistent."""
    reached, release = threading.Event(), threading.Event()

    def pool(nbytes, device):
        if nbytes == 4096:
            reached.set()
            assert release.wait(TIMEOUT)
        return torch.empty((nbytes,), dtype=U8, device=device)

    ws = WorkspaceManager("cpu", num_ubatches=2, allocator=pool)
    results = {}

    def other():
        assert reached.wait(TIMEOUT)
        with use_workspace_ubatch(1):
            ws.get_simultaneous(((2048,), U8))
            tail, _ = ws.get_retained("kv", (8,), U8)
            tail.fill_(5)
            results["other"] = ws.get_retained("kv", (8,), U8)
        release.set()

    thread = threading.Thread(target=other)
    thread.start()
    (view,) = ws.get_simultaneous(((4096,), U8))
    thread.join(TIMEOUT)
    assert not thread.is_alive()
    tail, intact = results["other"]
    assert intact and tail.tolist() == [5] * 8
    assert [s.capacity for s in ws.state.slots] == [4096, 2048] and in_slot_buffer(ws, view)


def test_threaded_hammer_intact_is_never_a_lie():
    """Each thread owns an ubatch slot and checks its tail; one thread keeps reserving
    (every slot grows). A true ``intact`` must always show the pattern last written."""
    ws = WorkspaceManager("cpu", num_ubatches=3)
    rounds, errors = 400, []

    def owner(ubatch):
        rng, last = random.Random(ubatch), None
        with use_workspace_ubatch(ubatch):
            for i in range(rounds):
                tail, intact = ws.get_retained("tail", (32,), U8)
                if intact and tail.tolist() != [last] * 32:
                    errors.append(f"ubatch {ubatch} round {i}: intact but {tail.tolist()[:4]}")
                last = i % 251
                tail.fill_(last)
                if rng.random() < 0.3:  # sometimes a request that reaches into the tail
                    ws.get_simultaneous(((rng.choice([64, 10**4]),), U8))

    def reserver():
        for size in range(4096, 4096 + 40 * 512, 512):
            ws.reserve(((size,), U8))

    threads = [threading.Thread(target=owner, args=(u,)) for u in range(3)]
    threads.append(threading.Thread(target=reserver))
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 3)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def _run_in_thread(target):
    done = threading.Event()
    box = {}

    def run():
        try:
            box["value"] = target()
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, box


@pytest.mark.parametrize("first_call", ["get_retained", "get_persistent", "growing"])
def test_a_factory_may_wait_for_another_threads_slow_path_call(first_call):
    ws = WorkspaceManager("cpu")
    calls = {
        "get_retained": lambda: ws.get_retained("kv", (64,), U8)[1],
        "get_persistent": lambda: ws.get_persistent("w", (4,), torch.float32).shape,
        "growing": lambda: ws.get_simultaneous(((10**5,), U8))[0].shape,
    }

    def factory():
        _thread, done, _ = _run_in_thread(calls[first_call])
        assert done.wait(TIMEOUT), "the other thread's call never finished: a deadlock"
        return "made"

    _thread, done, box = _run_in_thread(lambda: ws.get_persistent_resource("k", factory))
    assert done.wait(TIMEOUT * 2) and box.get("value") == "made"
    assert ws.get_persistent_resource("k", factory) == "made"


def test_a_lock_taken_while_a_factory_runs_keeps_what_it_made():
    """The original checks the lock once, before the factory: the call it let in returns
    the resource, and later locked calls get the same one."""
    ws = WorkspaceManager("cpu")
    started, release = threading.Event(), threading.Event()
    made = object()

    def factory():
        started.set()
        assert release.wait(TIMEOUT)
        return made

    _thread, done, box = _run_in_thread(lambda: ws.get_persistent_resource("handle", factory))
    assert started.wait(TIMEOUT)
    ws.lock()  # warm-up ends on another thread meanwhile
    release.set()
    assert done.wait(TIMEOUT) and box.get("value") is made
    assert ws.get_persistent_resource("handle", factory) is made
    with pytest.raises(AssertionError, match="was not allocated during warmup"):
        ws.get_persistent_resource("another", factory)  # a new key is refused as before


def test_alloc_context_and_allocator_may_wait_for_other_threads():
    waited = []

    @contextlib.contextmanager
    def pool():
        _thread, done, _ = _run_in_thread(lambda: ws.get_persistent("p", (4,), torch.float32))
        waited.append(done.wait(TIMEOUT))
        yield

    def allocator(nbytes, device):
        _thread, done, _ = _run_in_thread(lambda: ws.get_persistent_resource("r", dict))
        waited.append(done.wait(TIMEOUT))
        return torch.empty((nbytes,), dtype=U8, device=device)

    ws = WorkspaceManager("cpu", alloc_context=pool, allocator=allocator)
    _thread, done, box = _run_in_thread(lambda: ws.get_simultaneous(((1000,), U8)))
    assert done.wait(TIMEOUT * 3) and len(waited) >= 2 and all(waited)
    assert box["value"][0].numel() == 1000


def test_user_code_may_call_the_manager_from_inside_a_call():
    """Re-entrance from the same thread: a factory, alloc_context and an allocator that
    use the manager themselves."""

    @contextlib.contextmanager
    def pool():
        ws.get_persistent_resource("from-context", dict)
        yield

    ws = WorkspaceManager("cpu", alloc_context=pool)
    made = ws.get_persistent_resource("outer", lambda: ws.get_simultaneous(((100,), U8))[0])
    assert made.numel() == 100 and ws.get_persistent_resource("from-context", list) == {}


# ----- recording (item 5) -----


def test_nested_recordings_each_record_everything_in_their_block():
    ws = WorkspaceManager("cpu")
    before = dict(vars(ws))
    with ws.recording() as outer:
        ws.get_simultaneous(((10,), U8))
        with ws.recording() as inner:
            ws.get_simultaneous(((20,), U8))
            ws.lock()
        ws.unlock()
        ws.get_retained("kv", (4,), U8)
    assert [r.call for r in outer][1:] == [
        "get_simultaneous(((10,), uint8))",
        "get_simultaneous(((20,), uint8))",
        "lock()",
        "unlock()",
        "get_retained('kv', (4,), uint8)",
    ]
    assert [r.call for r in inner][1:] == ["get_simultaneous(((20,), uint8))", "lock()"]
    assert vars(ws).keys() == before.keys()  # no attribute patched in or left behind
    assert all(getattr(ws, name) == value for name, value in before.items() if name != "_state")


def test_an_outer_recording_sees_repeats_after_an_inner_one_ends():
    """Memo hits too: an inner recording's end must not send the hot paths back to their
    unrecorded form while the outer one runs."""
    ws = WorkspaceManager("cpu")
    for _ in range(3):  # memoised: a repeat is a hit
        ws.get_simultaneous(((100,), U8))
        ws.get_retained("kv", (4,), U8)
    with ws.recording() as outer:
        with ws.recording():
            pass
        ws.get_simultaneous(((100,), U8))
        ws.get_retained("kv", (4,), U8)
    assert [r.call for r in outer][1:] == [
        "get_simultaneous(((100,), uint8))",
        "get_retained('kv', (4,), uint8)",
    ]


def test_recording_sees_every_call_from_every_thread():
    ws = WorkspaceManager("cpu", num_ubatches=4)
    per_thread = 300

    def work(ubatch):
        with use_workspace_ubatch(ubatch):
            for i in range(per_thread):
                ws.get_simultaneous(((i % 7 + 1,), U8))

    with ws.recording() as history:
        threads = [threading.Thread(target=work, args=(u,)) for u in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
    assert len(history) - 1 == 4 * per_thread  # nothing dropped
    assert sorted({r.slot for r in history[1:]}) == [(u, 0) for u in range(4)]


@pytest.mark.parametrize("method", ["reserve", "reserve_many"])
def test_an_iterable_of_slots_is_read_once_though_the_state_moves(method):
    # A forced interleaving: reading the slots moves the state (as a second thread would),
    # so the first attempt's swap fails and the transition runs again. It must still see
    # every slot, not an exhausted iterator: a slot left short fails after lock().
    ws = WorkspaceManager("cpu", num_ubatches=2)
    reads = []

    def chosen():
        reads.append(len(reads))
        ws.get_simultaneous(((1 << 10,), torch.uint8))  # the state moves mid-transition
        yield (0, 0)
        yield (1, 0)

    request = ((1 << 16,), torch.uint8)
    if method == "reserve":
        ws.reserve(request, slots=chosen())
    else:
        ws.reserve_many([[request]], slots=chosen())
    assert reads == [0]
    assert [s.capacity for s in ws.stats().slots] == [1 << 16, 1 << 16]
    ws.lock()
    with use_workspace_ubatch(1):
        ws.get_simultaneous(request)  # no WorkspaceLockedError: the slot was reserved
