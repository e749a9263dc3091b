"""Where the manager meets other code: torch modes, forks, races, and user code that keeps
changing the workspace (issue 29, items 4 to 8 and 11). Nothing hangs, nothing is stale.

Every test that could hang runs its work in a thread (or a process) joined with a timeout.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from support.seams import in_slot_buffer, inconsistencies, retired_of
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import interop
from interop.errors import ReplanLimitError

U8, F32 = torch.uint8, torch.float32
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 20


def _finishes(work: Callable[[], Any], timeout: float = TIMEOUT) -> list[Any]:
    """Run ``work`` in a thread; what it returned or raised (the test fails if it hangs)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as err:
            out.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{work} did not finish in {timeout} s: a deadlock"
    return out


# ----- torch modes: their handlers are user code, and none runs under the lock (item 4) -----


class _UsesTheManager:
    """A mode's handler that uses the manager on every torch call it sees (once at a time)."""

    def __init__(self, ws: interop.WorkspaceManager, use: Callable[[], Any]) -> None:
        super().__init__()
        self.ws, self.use, self.busy, self.calls = ws, use, False, 0

    def _handle(self, func: Any, args: Any, kwargs: Any) -> Any:
        if not self.busy:
            self.busy = True
            try:
                self.use()
                self.calls += 1
            finally:
                self.busy = False
        return func(*args, **(kwargs or {}))


class CallsTheManager(_UsesTheManager, TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self._handle(func, args, kwargs)


class DispatchCallsTheManager(_UsesTheManager, TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self._handle(func, args, kwargs)


MODES = [CallsTheManager, DispatchCallsTheManager]
USES = {
    "stats": lambda ws: ws.stats(),
    "lock and unlock": lambda ws: (ws.lock(), ws.unlock()),
    "another slot's scratch": lambda ws: _in_slot(ws, 1, lambda: ws.get_simultaneous(((8,), F32))),
}


def _in_slot(ws: interop.WorkspaceManager, ubatch: int, work: Callable[[], Any]) -> Any:
    with interop.use_workspace_ubatch(ubatch):
        return work()


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("use", list(USES))
@pytest.mark.parametrize("grows", [False, True], ids=["fits", "grows"])
def test_a_torch_modes_handler_may_call_the_manager(mode, use, grows):
    ws = interop.WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((4096,), U8))
    request = ((2048 if grows else 16, 4), F32) if grows else ((16, 4), F32)

    def work() -> Any:
        with mode(ws, lambda: USES[use](ws)) as active:
            (view,) = ws.get_simultaneous(request)
        return view, active.calls

    ((view, calls),) = _finishes(work)
    assert calls > 0, "the mode saw the manager's torch calls"
    assert view.shape == request[0] and in_slot_buffer(ws, view)
    assert not inconsistencies(ws)


def test_a_handler_waiting_for_a_thread_that_calls_the_manager_is_not_blocked():
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((4096,), U8))

    def helper_thread_call() -> None:  # the handler waits for this thread to finish
        thread = threading.Thread(target=lambda: ws.get_simultaneous(((3000,), U8)))
        thread.start()
        thread.join(TIMEOUT)
        assert not thread.is_alive()

    def work() -> Any:
        with CallsTheManager(ws, helper_thread_call):
            return ws.get_simultaneous(((5000,), U8))

    ((views,),) = _finishes(work)
    assert in_slot_buffer(ws, views[0])


def test_a_handler_that_grows_the_slot_on_every_call_gets_a_clear_error():
    ws = interop.WorkspaceManager("cpu")
    sizes = iter(range(1000, 10**6, 256))

    def work() -> Any:
        with CallsTheManager(ws, lambda: ws.get_simultaneous(((next(sizes),), U8))):
            return ws.get_simultaneous(((100,), F32))

    (outcome,) = _finishes(work)
    if isinstance(outcome, BaseException):  # it may also win a round: then its views are good
        assert isinstance(outcome, ReplanLimitError), outcome
        assert "a torch mode's handler" in str(outcome) or "the manager" in str(outcome)
    else:
        assert in_slot_buffer(ws, outcome[0])
    assert not inconsistencies(ws)


# ----- a growth racing a memoisation (item 5) -----


@contextlib.contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def test_a_growth_racing_a_second_sighting_leaves_no_stale_memo():
    """A request's second sighting (memoised) in one thread, a reservation that grows the
    slot in another, at a 1 µs switch interval: afterwards, the request's views are of the
    slot's current buffer, and nothing holds a retired one."""
    request = ((64,), F32)
    stale = []
    with switch_interval(1e-6):
        for round_ in range(300):
            ws = interop.WorkspaceManager("cpu")
            ws.get_simultaneous(request)  # first sighting
            start = threading.Barrier(2)

            def second_sighting(ws=ws, start=start) -> None:
                start.wait()
                ws.get_simultaneous(request)

            def grow(ws=ws, start=start, size=4096 + round_) -> None:
                start.wait()
                ws.reserve(((size,), F32))

            threads = [threading.Thread(target=f) for f in (second_sighting, grow)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(TIMEOUT)
            (view,) = ws.get_simultaneous(request)
            if not in_slot_buffer(ws, view):
                stale.append(round_)
            del view
            if retired_of(ws).pinned():
                stale.append(round_)
    assert stale == []


# ----- a fork while another thread holds the lock (item 6) -----

FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading, time
    import torch
    import interop
    from interop._workspace._memo import Memos

    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((64,), torch.float32))
    parked, release = threading.Event(), threading.Event()
    real_retire = Memos.retire

    def retire(self, index, dead):  # called under the mutex during a growth: park there
        parked.set()
        release.wait(30)
        real_retire(self, index, dead)

    Memos.retire = retire
    grower = threading.Thread(target=lambda: ws.get_simultaneous(((1 << 16,), torch.uint8)))
    grower.start()
    assert parked.wait(30), "the grower never reached the locked section"
    pid = os.fork()
    if pid == 0:  # the child: its first calls that need the lock must not hang
        Memos.retire = real_retire
        import gc  # the parent's grower had paused the collector: resumed here
        assert gc.isenabled(), "the child's collector is off"
        ws.lock()
        ws.unlock()
        (view,) = ws.get_simultaneous(((1 << 17,), torch.uint8))
        ok = view.numel() == 1 << 17 and ws.state.capacity((0, 0)) == 1 << 17
        os._exit(0 if ok else 3)
    release.set()
    grower.join(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("child", os.waitstatus_to_exitcode(status))
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        print("child hung")
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_fork_while_another_thread_holds_the_lock_gives_the_child_a_working_manager():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", FORK_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "child 0", done.stdout + done.stderr[-2000:]


# ----- user code that changes the workspace every time it runs (items 7 and 11) -----


class GrowingKey:
    """A retained key whose ``__hash__`` or ``__eq__`` grows a slot each time it runs."""

    def __init__(self, ws: interop.WorkspaceManager, grows: str, ubatch: int) -> None:
        self.ws, self.grows, self.ubatch, self.runs, self.size = ws, grows, ubatch, 0, 4096

    def _grow(self) -> None:
        self.runs += 1
        self.size += 256
        with interop.use_workspace_ubatch(self.ubatch):
            self.ws.get_simultaneous(((self.size,), U8))

    def __hash__(self) -> int:
        if self.grows == "__hash__":
            self._grow()
        return 7

    def __eq__(self, other: object) -> bool:
        if self.grows == "__eq__":
            self._grow()
        return isinstance(other, GrowingKey)


def test_a_key_whose_hash_grows_its_own_slot_every_time_gets_a_clear_error():
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((1024,), U8))
    key = GrowingKey(ws, "__hash__", ubatch=0)
    (outcome,) = _finishes(lambda: ws.get_retained(key, (64,), F32))
    assert isinstance(outcome, ReplanLimitError), outcome
    assert "GrowingKey" in str(outcome) and "__hash__" in str(outcome)
    assert key.runs < 100, f"the key's code ran {key.runs} times"
    assert not inconsistencies(ws)
    (view,) = ws.get_simultaneous(((64,), F32))  # the manager works on
    assert in_slot_buffer(ws, view)


def test_a_key_whose_eq_grows_another_slot_is_served_as_the_original_serves_it():
    """The original compares the key once; here the other slot's growth does not make the
    call plan again (calls in different slots are merged), so its ``__eq__`` runs a few
    times, not forever."""
    ws = interop.WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((1024,), U8))
    first, second = GrowingKey(ws, "__eq__", 1), GrowingKey(ws, "", 1)
    ws.get_retained(first, (64,), F32)  # seen once; an equal key compares with it next
    ((view, intact),) = _finishes(lambda: ws.get_retained(second, (64,), F32))
    assert intact and in_slot_buffer(ws, view)
    assert 1 <= first.runs <= 4, first.runs
    assert not inconsistencies(ws)


def test_no_garbage_collection_runs_under_the_lock_while_a_call_merges_over_another_slot():
    """A merge under the lock allocates: a collection there ran the __del__ of whatever
    garbage it found, which may call the manager (it hung). A collection is forced at
    every allocation here, and gc's callbacks see whether the lock is held."""
    import gc

    ws = interop.WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((1024,), U8))
    first, second = GrowingKey(ws, "__eq__", 1), GrowingKey(ws, "", 1)
    ws.get_retained(first, (64,), F32)
    mutex = ws._engine._mutex
    under_lock = []

    def seen(phase, info):
        if phase == "start":
            under_lock.append(mutex.locked())

    threshold = gc.get_threshold()
    gc.callbacks.append(seen)
    gc.set_threshold(1)
    try:
        view, intact = ws.get_retained(second, (64,), F32)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(seen)
    assert under_lock and True not in under_lock
    assert intact and in_slot_buffer(ws, view)


@pytest.mark.parametrize("sightings", [1, 2], ids=["seen-once", "memoised"])
def test_a_key_whose_eq_grows_its_own_slot_leaves_nothing_pinned(sightings):
    """Memoised, the key's ``__eq__`` runs in the memo's own lookup, on the hot path."""
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((1024,), U8))
    first, second = GrowingKey(ws, "__eq__", 0), GrowingKey(ws, "", 0)
    first.size = 1000
    for _ in range(sightings):
        ws.get_retained(first, (64,), F32)
    outcome = _finishes(lambda: ws.get_retained(second, (64,), F32))
    if not isinstance(outcome[0], BaseException):
        view, _ = outcome[0]
        assert in_slot_buffer(ws, view)
        del view
    del outcome
    assert sum(s.pinned_bytes for s in ws.stats().slots) == 0
    assert not inconsistencies(ws)


@pytest.mark.parametrize(
    "key",
    [
        collections.namedtuple("Key", "layer kind")(3, "scales"),
        torch.Size([2, 3]),
        ("layer", torch.Size([2])),
    ],
    ids=["named tuple", "torch.Size", "a tuple holding one"],
)
def test_a_tuple_subclass_key_is_claimed_as_the_original_claims_it(key):
    """A tuple subclass of plain values runs no code of the caller's in its elements."""
    from interop.testing import ReferenceWorkspaceManager

    made: list[int] = []
    reference = ReferenceWorkspaceManager(torch.device("cpu"))
    ws = interop.WorkspaceManager("cpu")
    for manager in (reference, ws, ws):
        resource = manager.get_persistent_resource(key, lambda: made.append(1) or len(made))
    assert made == [1, 1] and resource == 2  # the façade's factory ran once
    assert ws.state.slots[0].persistent_keys == {key}


def test_a_context_that_locks_the_manager_on_entry_does_not_strand_the_slot():
    """The original checks the lock before it releases anything; a pool that locks the
    manager when entered still gets its growth, and the slot works on, locked."""
    holder: list[interop.WorkspaceManager] = []

    @contextlib.contextmanager
    def locking_pool() -> Iterator[None]:
        holder[0].lock()
        yield

    ws = interop.WorkspaceManager("cpu", alloc_context=locking_pool)
    holder.append(ws)
    (view,) = ws.get_simultaneous(((1000,), U8))
    assert ws.is_locked() and ws.state.capacity((0, 0)) == 1024
    assert in_slot_buffer(ws, view)
    (again,) = ws.get_simultaneous(((512,), U8))  # locked, what fits is served
    assert in_slot_buffer(ws, again) and not inconsistencies(ws)


# ----- try_get_simultaneous returns None only for its own lock (item 8) -----


@pytest.mark.parametrize("where", ["alloc_context", "allocator"])
def test_try_get_simultaneous_raises_another_managers_lock_refusal(where):
    other = interop.WorkspaceManager("cpu")
    other.lock()

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        other.get_simultaneous(((64,), U8))  # refused: other is locked
        yield

    def allocator(nbytes: int, device: torch.device) -> torch.Tensor:
        other.get_simultaneous(((64,), U8))
        return torch.empty(nbytes, dtype=U8, device=device)

    kwargs = {"alloc_context": context} if where == "alloc_context" else {"allocator": allocator}
    ws = interop.WorkspaceManager("cpu", **kwargs)
    with pytest.raises(interop.WorkspaceLockedError) as refused:
        ws.try_get_simultaneous(((128,), U8))
    assert refused.value.refused_by is other._engine
    assert not ws.is_locked() and not inconsistencies(ws)
    ws.lock()
    assert ws.try_get_simultaneous(((1 << 20,), U8)) is None  # its own refusal: None


# ----- what a torch mode or transform returns is never kept -----


class _ClonesViews(TorchFunctionMode):
    """A mode whose handler hands back copies of the views it sees (memory elsewhere)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        views = (torch.Tensor.view, torch.as_strided, torch.Tensor.__getitem__)
        return out.clone() if isinstance(out, torch.Tensor) and func in views else out


class _ClonesViewsBelow(TorchDispatchMode):
    """The same, below the dispatcher."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        views = (torch.ops.aten.view, torch.ops.aten.as_strided, torch.ops.aten.slice)
        return out.clone() if func.overloadpacket in views else out


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


@pytest.mark.parametrize(
    "mode", [_ClonesViews, _ClonesViewsBelow, _fake_mode], ids=["function", "dispatch", "fake"]
)
def test_what_a_mode_returns_inside_it_is_not_handed_out_after_it(mode):
    """The carver's typed aliases and the memo's views are made once and kept: made under
    a mode, they were the mode's (a copy, a FakeTensor with no memory) for every later
    call. The original carves afresh on every call."""
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((4096,), U8))  # a buffer, no float32 alias yet
    ws.get_persistent("p", (4,), F32)
    with mode():
        for _ in range(2):  # seen twice: memoised
            ws.get_simultaneous(((64,), F32))
            ws.get_retained("tail", (16,), F32)
        ws.get_persistent("q", (4,), F32)
        _ = ws._current_workspaces  # upstream's attribute: the buffer, sliced once and kept
    (buffer,) = ws._current_workspaces
    assert type(buffer) is torch.Tensor and buffer.untyped_storage().nbytes() >= 4096
    (seen,) = ws.get_simultaneous(((64,), F32))
    (new,) = ws.get_simultaneous(((32,), F32))
    tail, intact = ws.get_retained("tail", (16,), F32)
    for view in (seen, new, tail):
        assert type(view) is torch.Tensor and in_slot_buffer(ws, view)
    # Under the fake mode the span's views were fake (their writes reached no byte): not
    # intact then (the original says intact); a real view since, intact from then on.
    assert intact is (mode is not _fake_mode)
    assert ws.get_retained("tail", (16,), F32)[1] is True
    persistent = ws.get_persistent("q", (4,), F32)
    assert type(persistent) is torch.Tensor and persistent.untyped_storage().nbytes() == 16
    assert not inconsistencies(ws)


@pytest.mark.parametrize("transform", ["grad", "jacrev", "jacfwd", "vmap"])
def test_a_growth_inside_a_torch_func_transform_gives_the_originals_result(transform):
    """torch.empty inside a transform made a wrapper with no storage: the growth failed
    and the slot lost its buffer. The buffer is made outside the caller's transforms."""
    from interop.testing import ReferenceWorkspaceManager

    def run(ws):
        def loss(x):
            (scratch,) = ws.get_simultaneous(((1024,), F32))  # grows inside the transform
            scratch.zero_()
            return (x * x * 2).sum() + scratch[:1].sum()

        x = torch.arange(4.0)
        if transform == "vmap":
            return torch.func.vmap(loss)(torch.stack([x, x + 1]))
        return getattr(torch.func, transform)(loss)(x)

    ours, theirs = interop.WorkspaceManager("cpu"), ReferenceWorkspaceManager(torch.device("cpu"))
    for ws in (ours, theirs):
        ws.get_simultaneous(((16,), U8))
    torch.testing.assert_close(run(ours), run(theirs))
    assert ours.state.slots[0].capacity == 4096 and not inconsistencies(ours)
    (view,) = ours.get_simultaneous(((1024,), F32))
    assert type(view) is torch.Tensor and in_slot_buffer(ours, view)


@pytest.mark.parametrize("how", ["context", "default"])
def test_a_default_device_keeps_the_memo(how):
    """``with torch.device(...)`` and ``torch.set_default_device`` are torch function modes
    that only fill in factories' devices: requests are memoised under them as without."""
    from support.seams import memo_of

    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((4096,), U8))
    # None where no default device was set (get_default_device answers cpu then, and
    # setting cpu back would leave a device mode on for every later test)
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    previous = None if context is None else torch.get_default_device()
    with contextlib.ExitStack() as stack:
        if how == "context":
            stack.enter_context(torch.device("cpu"))
        else:
            torch.set_default_device("cpu")
            stack.callback(torch.set_default_device, previous)
        for _ in range(2):  # seen twice: memoised
            (view,) = ws.get_simultaneous(((64,), F32))
            ws.get_retained("tail", (16,), F32)
    assert len(memo_of(ws)) == 1 and in_slot_buffer(ws, view)


# ----- honest "intact" when a retained view may not reach its bytes -----


class _InterruptsCarving(TorchDispatchMode):
    """Raises KeyboardInterrupt when a view is carved (as a Ctrl-C between a get_retained's
    planning and its view would)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.as_strided.default:
            raise KeyboardInterrupt
        return func(*args, **(kwargs or {}))


class _Logs(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _retained_once(ws: interop.WorkspaceManager, times: int = 1) -> None:
    for _ in range(times):  # twice or more: the memo serves the next call (its hit path)
        view, _ = ws.get_retained("logits", (4,), torch.float32)
        view.fill_(7.0)


@pytest.mark.parametrize("seen", [1, 3], ids=["first sight", "memoised"])
def test_a_fake_retained_view_leaves_the_next_call_not_intact(seen):
    from torch._subclasses.fake_tensor import FakeTensorMode

    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((64,), torch.float32))
    _retained_once(ws, seen)
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake, _ = ws.get_retained("logits", (4,), torch.float32)
        fake.fill_(1.0)  # writes nothing the workspace holds
    assert type(fake) is not torch.Tensor
    assert ws.get_retained("logits", (4,), torch.float32)[1] is False  # it said True


def test_a_retained_call_interrupted_while_carving_leaves_the_next_not_intact():
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((64,), torch.float32))
    _retained_once(ws)
    ws.get_retained("other", (4,), torch.float32)  # another key takes the span over
    with pytest.raises(KeyboardInterrupt), _InterruptsCarving():
        ws.get_retained("logits", (4,), torch.float32)  # planned, installed, no view
    assert ws.get_retained("logits", (4,), torch.float32)[1] is False  # it said True


def test_a_mode_whose_views_are_real_keeps_intact_and_a_refused_call_changes_nothing():
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((64,), torch.float32))
    _retained_once(ws)
    with _Logs():
        view, intact = ws.get_retained("logits", (4,), torch.float32)
    assert type(view) is torch.Tensor and intact is True
    assert ws.get_retained("logits", (4,), torch.float32)[1] is True
    ws.lock()
    before = ws.state
    with pytest.raises(AssertionError):
        ws.get_retained("logits", (4096,), torch.float32)  # too large: refused
    assert ws.state is before and ws.get_retained("logits", (4,), torch.float32)[1] is True


def test_a_refused_retained_call_forgets_nothing_when_another_slot_moved_meanwhile(monkeypatch):
    # The refused call compared the whole state before and after: another thread's call in
    # another slot made it forget this slot's intact span.
    ws = interop.WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((64,), torch.float32))
    with interop.use_workspace_ubatch(1):
        ws.get_simultaneous(((64,), torch.float32))
    _retained_once(ws, 2)
    ws.lock()
    serve = ws._engine.serve

    moved = []

    def moved_then_refused(*args, **kwargs):
        if not moved:
            moved.append(1)
            with interop.use_workspace_ubatch(1):  # another thread's call, another slot
                ws.get_retained("other", (4,), torch.float32)
        return serve(*args, **kwargs)

    monkeypatch.setattr(ws._engine, "serve", moved_then_refused)
    with pytest.raises(AssertionError):
        ws.get_retained("logits", (4096,), torch.float32)  # too large: refused
    monkeypatch.undo()
    assert moved and ws.state.slots[1].retained is not None  # the other call moved it
    assert ws.get_retained("logits", (4,), torch.float32)[1] is True
