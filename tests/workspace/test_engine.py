"""The state engine (``interop/_workspace/_engine.py``): how a growth is carried out.

The built-in allocators grow in the original's order (vLLM 0.33.0's ``_ensure_workspace_size``):
release the old buffer, empty the cache, then enter ``alloc_context()`` and allocate inside
it. In sleep mode vLLM's context is a CuMem pool whose entry unmaps what was freed, so the
old buffer must be gone by then: otherwise it stays mapped beside the new one.
"""

import contextlib
import gc
import json
import logging
import threading
import weakref

import pytest
import torch
from support.seams import in_slot_buffer, memo_of, slot_buffer
from torch.multiprocessing.reductions import StorageWeakRef

import functional_ws as fws
from interop import WorkspaceManager, _locks, use_workspace_ubatch

U8 = torch.uint8


class TrimmingPool:
    """A CPU model of vLLM's sleep-mode pool: at each entry it notes how many bytes of the
    buffers the workspace held before, and holds no more, are still alive (a real pool's
    entry unmaps what was freed; what is still alive stays mapped)."""

    def __init__(self):
        self.ws = None
        self.buffers = []  # (slot index, nbytes, weak reference to the storage)
        self.alive_at_entry = []  # per entry: bytes of retired buffers still alive

    def watch(self, ws):
        for index, buffer in enumerate(ws._current_workspaces):
            if buffer is not None and not any(
                ref.cdata == buffer.untyped_storage()._cdata for _, _, ref in self.buffers
            ):
                storage = buffer.untyped_storage()
                self.buffers.append((index, storage.nbytes(), StorageWeakRef(storage)))

    @contextlib.contextmanager
    def __call__(self):
        installed = {
            b.untyped_storage()._cdata for b in self.ws._current_workspaces if b is not None
        }
        self.alive_at_entry.append(
            sum(n for _, n, ref in self.buffers if not ref.expired() and ref.cdata not in installed)
        )
        yield


def _plan_file(tmp_path, capacities):
    state = fws.initial_state(num_ubatches=2)
    plan = fws.to_dict(state)
    for slot, capacity in zip(plan["slots"], capacities, strict=True):
        slot.update(capacity=capacity, high_water=capacity, growths=1)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


#: Each call that grows: (id, manager options, warm-up, growing call).
GROWING_CALLS = [
    ("get_simultaneous", {}, lambda ws: ws.get_simultaneous(((1 << 20,), U8))),
    ("get_retained", {}, lambda ws: ws.get_retained("kv", (1 << 20,), U8)),
    ("reserve", {}, lambda ws: ws.reserve(((1 << 20,), U8))),
    ("reserve_many", {}, lambda ws: ws.reserve_many([[((1 << 20,), U8)]], slots="all")),
    ("reserve_for", {}, lambda ws: ws.reserve_for(fws.Trace().acquire((1, 0), ((1 << 20,), U8)))),
    ("ubatches", {"growth": "ubatches"}, lambda ws: ws.get_simultaneous(((1 << 20,), U8))),
    ("load_plan", {}, None),  # the plan file is made per test
]


@pytest.mark.parametrize(("options", "grow"), [c[1:] for c in GROWING_CALLS],
                         ids=[c[0] for c in GROWING_CALLS])  # fmt: skip
def test_the_old_buffer_is_gone_when_alloc_context_is_entered(options, grow, tmp_path):
    pool = TrimmingPool()
    ws = pool.ws = WorkspaceManager("cpu", num_ubatches=2, alloc_context=pool, **options)
    for ubatch in (0, 1):
        with use_workspace_ubatch(ubatch):
            ws.get_simultaneous(((4096,), U8))  # no view kept
    pool.watch(ws)
    assert pool.alive_at_entry[-1] == 0  # the first growths: nothing was there
    entries = len(pool.alive_at_entry)
    if grow is None:
        ws.load_plan(_plan_file(tmp_path, [1 << 20, 1 << 20]))
    else:
        grow(ws)
    assert len(pool.alive_at_entry) > entries  # the growth entered the context
    assert pool.alive_at_entry[entries:] == [0] * (len(pool.alive_at_entry) - entries)
    assert min(s.capacity for s in ws.state.slots if s.growths > 1) >= 1 << 20


def test_a_warm_up_keeps_only_the_last_buffer_mapped():
    """vLLM 0.33.0's count: growing one slot 1 -> 4 -> 16 -> 64 MiB leaves 64 MiB mapped
    (entering the pool before the release left 80 MiB: the last old buffer as well)."""
    pool = TrimmingPool()
    ws = pool.ws = WorkspaceManager("cpu", alloc_context=pool)
    for mib in (1, 4, 16, 64):
        ws.get_simultaneous(((mib << 20,), U8))
        pool.watch(ws)
    assert pool.alive_at_entry == [0, 0, 0, 0]
    mapped = sum(n for _, n, ref in pool.buffers if not ref.expired())
    assert mapped == slot_buffer(ws).untyped_storage().nbytes()  # 64 MiB (and alignment)


def test_a_view_kept_across_the_growth_keeps_its_buffer_alive_and_is_reported(caplog):
    pool = TrimmingPool()
    ws = pool.ws = WorkspaceManager("cpu", alloc_context=pool)
    (kept,) = ws.get_simultaneous(((4096,), U8))
    pool.watch(ws)
    ws.get_simultaneous(((1 << 20,), U8))
    assert pool.alive_at_entry[-1] == kept.untyped_storage().nbytes()  # pinned by the view
    assert ws.stats().pinned_bytes == kept.untyped_storage().nbytes()
    assert "still pinned" in caplog.text


@pytest.mark.parametrize(
    "grow", [c[2] for c in GROWING_CALLS[:5]], ids=[c[0] for c in GROWING_CALLS[:5]]
)
def test_a_context_that_raises_on_entry_is_recovered_as_a_failed_allocation(grow):
    raised = []

    @contextlib.contextmanager
    def broken():
        if raised:
            raise RuntimeError("pool gone")
        yield

    ws = WorkspaceManager("cpu", num_ubatches=2, alloc_context=broken, growth="slot")
    for ubatch in (0, 1):
        with use_workspace_ubatch(ubatch):
            ws.get_simultaneous(((4096,), U8))
    raised.append(True)
    before = ws.state
    with pytest.raises(RuntimeError, match="pool gone") as info:
        grow(ws)
    assert "old capacity (4096 bytes) was allocated again" in " ".join(info.value.__notes__)
    for index, (now, then) in enumerate(zip(ws.state.slots, before.slots, strict=True)):
        buffer = ws._current_workspaces[index]
        assert now.capacity == then.capacity == buffer.numel()  # the state says what exists
    raised.clear()
    grow(ws)  # the manager keeps working


def test_a_dropped_manager_is_freed_at_once_after_an_out_of_memory(monkeypatch):
    """The error the growth raises holds no cycle through the manager (issue 20, item 3)."""

    def manager_that_ran_out(call):
        ws = WorkspaceManager("cpu")
        ws.get_simultaneous(((4096,), U8))
        real = ws._allocator.allocate

        def allocate(nbytes, *args, **kwargs):
            if nbytes > 1 << 20:
                raise torch.OutOfMemoryError("pretend the device is full")
            return real(nbytes, *args, **kwargs)

        monkeypatch.setattr(ws._allocator, "allocate", allocate)
        with pytest.raises(torch.OutOfMemoryError):
            call(ws)
        return weakref.ref(ws)

    calls = [
        lambda ws: ws.get_simultaneous(((1 << 21,), U8)),
        lambda ws: ws.get_retained("kv", (1 << 21,), U8),
        lambda ws: ws.reserve(((1 << 21,), U8)),
    ]
    gc.disable()
    try:
        for call in calls:
            assert manager_that_ran_out(call)() is None
    finally:
        gc.enable()


# ----- user code that grows the slot in the middle of a call (issue 20 #1) -----


class GrowOnce:
    """Grows slot (0, 0) of ``ws`` when it is called for the ``after``-th time (user code that
    calls the manager back: a key's ``__hash__``, a context's exit, a log handler)."""

    def __init__(self, after):
        self.ws, self.countdown, self.size = None, after, 1 << 16

    def __call__(self):
        self.countdown -= 1
        if self.countdown == 0:
            self.size *= 2
            self.ws.get_simultaneous(((self.size,), U8))


class GrowingKey(str):
    grow = None

    def __hash__(self):
        GrowingKey.grow()
        return str.__hash__(self)

    __eq__ = str.__eq__


def _alloc_context_exit(grow):
    @contextlib.contextmanager
    def context():
        yield
        grow()

    return {"alloc_context": context}, contextlib.nullcontext()


def _log_handler(grow):
    class Handler(logging.Handler):
        def emit(self, record):
            grow()

    handler = Handler(level=logging.DEBUG)

    @contextlib.contextmanager
    def attached():
        logger = logging.getLogger("interop")
        logger.addHandler(handler)
        previous = logger.level
        logger.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(previous)

    return {}, attached()


def _key_hash(grow):
    GrowingKey.grow = grow
    return {}, contextlib.nullcontext()


WHERE_USER_CODE_GROWS = {
    "alloc_context-exit": _alloc_context_exit,
    "log-handler": _log_handler,
    "key-hash": _key_hash,
}


# (call, where the user code runs, at which of its runs it grows the slot): every run that
# comes once this sequence of calls is under way.
REENTRY = [
    (call, where, after)
    for call in ("get_simultaneous", "get_retained")
    for where, runs in (("alloc_context-exit", 3), ("log-handler", 3), ("key-hash", 8))
    if call == "get_retained" or where != "key-hash"
    for after in range(1, runs + 1)
]


@pytest.mark.parametrize(("call", "where", "after"), REENTRY)
def test_every_call_returns_views_of_the_slots_current_buffer(call, where, after, monkeypatch):
    # Deterministic forms of a race: the slot grows in the middle of a call. Every view a
    # call returns lies in the slot's buffer as it is after the call, and once no view is
    # held nothing is pinned: no memo entry keeps a view of a retired buffer.
    monkeypatch.setenv("VLLM_DEBUG_WORKSPACE", "1")  # growths log (the handler's cue)
    grow = GrowOnce(after)
    options, attached = WHERE_USER_CODE_GROWS[where](grow)
    ws = grow.ws = WorkspaceManager("cpu", **options)
    key = GrowingKey("sampler")
    with attached:
        for n in (64, 64, 1024, 1024, 1024, 4096, 4096, 4096):
            if call == "get_simultaneous":
                views = ws.get_simultaneous(((n,), U8), ((n // 2,), torch.float32))
            else:
                views = [ws.get_retained(key, (n,), U8)[0]]
            assert all(in_slot_buffer(ws, v) for v in views), n
            del views
    GrowingKey.grow = lambda: None
    gc.collect()
    assert ws.stats().pinned_bytes == 0
    assert grow.countdown <= 0  # the user code did grow the slot


def test_a_growth_retires_an_empty_memo_too():
    # A memo with no entry is replaced as well: a call that carved from the old buffer and
    # inserts afterwards finds it dead, and the live memo never holds its entry.
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((64,), U8))
    memo = memo_of(ws)
    assert not memo and not memo.old
    ws.get_simultaneous(((1 << 20,), U8))
    assert memo.dead and memo_of(ws) is not memo
    memo.remember("late", object())
    assert "late" not in memo and "late" not in memo_of(ws)


# ----- user code run when an old buffer goes (issue 20 #5) -----


@pytest.mark.parametrize("call", ["unlock", "get_simultaneous", "stats"])
def test_a_pools_finalizer_may_call_the_manager(call):
    # The block's memory is a NumPy array the pool watches: when the manager lets the old
    # buffer go, the pool's finalizer runs, and it calls the manager. Dropping the buffer
    # under the manager's lock would hang that thread and every other.
    import numpy as np

    ran = []

    def finalizer():
        ran.append(call)
        if call == "get_simultaneous":
            ws.get_simultaneous(((16,), U8))
        else:
            getattr(ws, call)()

    def pool(nbytes, device):
        memory = np.zeros(nbytes + 256, dtype=np.uint8)
        weakref.finalize(memory, finalizer)
        return torch.from_numpy(memory)

    ws = WorkspaceManager("cpu", allocator=pool)
    ws.get_simultaneous(((1024,), U8))
    worker = threading.Thread(target=ws.get_simultaneous, args=(((1 << 16,), U8),))
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "the finalizer's call to the manager hung"
    assert ran == [call]
    assert ws.stats().slots[0].capacity == 1 << 16


@pytest.mark.parametrize("allocator", ["torch", "callable"])
def test_a_keys_finalizer_may_call_the_manager_when_a_growth_retires_its_memo(allocator):
    # The memo holds the last reference to a retained key: a growth retires the memo, and
    # emptying it under the manager's lock ran the key's __del__ there, whose call to the
    # manager hung that thread and every other (helper attack round, stop 46).
    ran = []

    class Key:
        def __del__(self):
            ran.append(ws.unlock() is None)  # any call that installs a state takes the lock

    options = (
        {} if allocator == "torch" else {"allocator": lambda n, device: torch.empty(n, dtype=U8)}
    )
    ws = WorkspaceManager("cpu", **options)
    key = Key()
    ws.get_simultaneous(((1024,), U8))
    for _ in range(3):  # seen twice: memoised, the memo holds the key
        ws.get_retained(key, (16,), U8)
    ws.get_retained("other", (16,), U8)  # the state no longer refers to the key
    del key
    worker = threading.Thread(target=ws.get_simultaneous, args=(((1 << 20,), U8),))
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "the key's finalizer's call to the manager hung"
    assert ran == [True]
    assert ws.stats().slots[0].capacity == 1 << 20


def _grow(ws):
    ws.get_simultaneous(((1 << 20,), U8))


@pytest.mark.parametrize(
    "operation",
    ["growth", "growth, callable allocator", "pickle", "deepcopy"],
)
def test_no_garbage_collection_runs_under_the_managers_lock(operation):
    # A collection runs the __del__ of whatever garbage it finds (the caller's objects,
    # which may call the manager) wherever Python allocates; under the lock, such a call
    # hung for good. With a threshold of 1 a collection starts at almost every allocation
    # here, and gc's callbacks see whether the lock is held when one starts.
    import copy
    import pickle

    options = {}
    if operation == "growth, callable allocator":
        options["allocator"] = lambda n, device: torch.empty(n, dtype=U8)
    ws = WorkspaceManager("cpu", **options)
    ws.get_simultaneous(((64,), U8))
    ws.get_retained("key", (16,), U8)
    mutex = ws._engine._mutex
    under_lock = []

    def seen(phase, info):
        if phase == "start":
            under_lock.append(mutex.locked())

    run = {
        "growth": _grow,
        "growth, callable allocator": _grow,
        "pickle": pickle.dumps,
        "deepcopy": copy.deepcopy,
    }[operation]
    threshold = gc.get_threshold()
    gc.callbacks.append(seen)
    gc.set_threshold(1)
    try:
        run(ws)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(seen)
    assert gc.isenabled()
    assert not _locks.pausing  # (a fork resumed the collector for a pause long over)
    assert under_lock and True not in under_lock  # collections ran, none under the lock


def test_the_collector_stays_paused_until_the_last_of_two_threads_pausing_is_done():
    # Two managers growing at once in two threads: the first to finish resumed the
    # collector while the other was still in its section.
    first_in, first_go, second_in, second_go = (threading.Event() for _ in range(4))
    seen = []

    def section(entered, go):
        entered.set()
        assert go.wait(10)
        seen.append(gc.isenabled())

    first = threading.Thread(target=_locks.collection_paused, args=(section, first_in, first_go))
    second = threading.Thread(target=_locks.collection_paused, args=(section, second_in, second_go))
    first.start()
    assert first_in.wait(10)
    second.start()
    assert second_in.wait(10)
    first_go.set()
    first.join(10)
    assert not gc.isenabled()  # the second is still in its section
    second_go.set()
    second.join(10)
    assert seen == [False, False] and gc.isenabled() and not _locks.pausing
    _locks.collection_paused(_locks.collection_paused, gc.collect)  # nested, same thread
    assert gc.isenabled() and not _locks.pausing


def test_the_collector_is_resumed_when_the_paused_section_raises():
    # A section under the lock raising (a Ctrl-C, an allocation that failed) left the
    # collector off for the rest of the process.
    def fails():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _locks.collection_paused(fails)
    assert gc.isenabled()
    assert not _locks.pausing
