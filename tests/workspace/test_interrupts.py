"""A Ctrl-C anywhere leaves a manager whose next call works (issue 29, items 1 to 3).

The sweep raises ``KeyboardInterrupt`` at each call boundary the library's own code
reaches during one call, on a fresh manager each time: where CPython delivers a signal (at
a Python function's entry, and right after a call returns, C functions' included: a
profiler's ``call``, ``return`` and ``c_return`` events in ``functional_ws`` and
``interop``). After each,
the manager must be consistent (the mutex free, every slot's state describing the buffer
it has, no dead memo in the tables) and the same call, made again, must work and hand out
views of the slot's current buffer. A locked manager must refuse only what truly needs
growth. The calls: growths through each path (a new request, a retained span, a
reservation of several slots, a callable allocator, an ``alloc_context``), a request's
second sighting (memoised), a lock and unlock, a persistent key.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from support.seams import in_slot_buffer, inconsistencies

import interop

U8, F32 = torch.uint8, torch.float32
PACKAGES = ("interop", "functional_ws")
ROOT = Path(interop.__file__).resolve().parents[1]
LIBRARY = tuple(str(ROOT / package) for package in PACKAGES)
GENERATOR = inspect.CO_GENERATOR
#: At most this many interruption points per call (spread evenly when a call has more).
MAX_POINTS = 400


def _in_library(frame: Any) -> bool:
    filename = frame.f_code.co_filename
    if filename.startswith("<"):  # generated code: its module's
        return str(frame.f_globals.get("__name__", "")).split(".")[0] in PACKAGES
    return filename.startswith(LIBRARY)


class Interrupt:
    """A profiler that counts the library's call boundaries and raises KeyboardInterrupt at
    the ``at``-th (``None``: counts only)."""

    EVENTS = frozenset({"call", "return", "c_return"})

    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.points = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        # Not in a generator: one closed early (all() of a generator that found its answer)
        # runs while CPython ignores what it raises, a real signal's KeyboardInterrupt too.
        generator = frame.f_code.co_flags & GENERATOR
        if event in self.EVENTS and not generator and _in_library(frame):
            self.points += 1
            if self.points == self.at:
                raise KeyboardInterrupt(f"injected at point {self.at}")


@contextlib.contextmanager
def profiled(profiler: Interrupt) -> Iterator[None]:
    previous = sys.getprofile()
    sys.setprofile(profiler)
    try:
        yield
    finally:
        sys.setprofile(previous)


class Pool:
    """A callable allocator with a pool's state (a dict of what it handed out)."""

    def __init__(self) -> None:
        self.out: dict[int, torch.Tensor] = {}

    def __call__(self, nbytes: int, device: torch.device) -> torch.Tensor:
        block = torch.empty(nbytes, dtype=U8, device=device)
        self.out[block.data_ptr()] = block
        return block


@contextlib.contextmanager
def user_context() -> Iterator[None]:
    yield


# Each case: a fresh manager, ready; the call to interrupt (and to make again after); whether
# the call hands out views of slot (0, 0)'s buffer.
Case = tuple[
    Callable[[], interop.WorkspaceManager], Callable[[interop.WorkspaceManager], Any], bool
]


def _warm(ws: interop.WorkspaceManager, *requests: Any) -> interop.WorkspaceManager:
    for request in requests:
        ws.get_simultaneous(*request)
    return ws


SMALL = (((64,), F32),)
BIG = (((4096,), F32), ((8,), torch.int64))
CASES: dict[str, Case] = {
    "growth, a new request": (
        lambda: _warm(interop.WorkspaceManager("cpu"), SMALL),
        lambda ws: ws.get_simultaneous(*BIG),
        True,
    ),
    "a second sighting (memoised)": (
        lambda: _warm(interop.WorkspaceManager("cpu"), BIG, SMALL),
        lambda ws: ws.get_simultaneous(*SMALL),
        True,
    ),
    "a memoised request replayed after a growth": (
        lambda: _warm(interop.WorkspaceManager("cpu"), SMALL, SMALL, BIG),
        lambda ws: ws.get_simultaneous(*SMALL),
        True,
    ),
    "growth, a retained span": (
        lambda: _warm(interop.WorkspaceManager("cpu"), SMALL),
        lambda ws: ws.get_retained("tail", (2048,), F32),
        True,
    ),
    "growth, a reservation of two slots": (
        lambda: _warm(interop.WorkspaceManager("cpu", num_ubatches=2, growth="ubatches"), SMALL),
        lambda ws: ws.reserve(*BIG),
        False,
    ),
    "growth, a callable allocator": (
        lambda: _warm(interop.WorkspaceManager("cpu", allocator=Pool()), SMALL),
        lambda ws: ws.get_simultaneous(*BIG),
        True,
    ),
    "growth, in an alloc_context": (
        lambda: _warm(interop.WorkspaceManager("cpu", alloc_context=user_context), SMALL),
        lambda ws: ws.get_simultaneous(*BIG),
        True,
    ),
    "lock and unlock": (
        lambda: _warm(interop.WorkspaceManager("cpu"), SMALL),
        lambda ws: (ws.lock(), ws.unlock()),
        False,
    ),
    "a new persistent key": (
        lambda: interop.WorkspaceManager("cpu"),
        lambda ws: ws.get_persistent("scales", (16,), F32, zero_init=True),
        False,
    ),
}


def _views(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [v for item in result for v in _views(item)]
    return []


def _points(make: Callable[[], Any], call: Callable[[Any], Any]) -> int:
    ws = make()
    tracer = Interrupt()
    with profiled(tracer):
        call(ws)
    return tracer.points


@pytest.mark.parametrize("case", list(CASES))
def test_an_interrupt_anywhere_leaves_a_manager_whose_next_call_works(case):
    make, call, hands_out_views = CASES[case]
    total = _points(make, call)
    assert total > 20, f"{case}: only {total} points traced"
    points = range(1, total + 1, max(1, total // MAX_POINTS))
    for at in points:
        ws = make()
        profiler = Interrupt(at)
        try:
            with profiled(profiler):
                call(ws)
        except KeyboardInterrupt:
            pass
        else:  # a run may take fewer boundaries (a pool's address needs no rebasing)
            assert profiler.points < at, f"{case}: the interrupt at point {at} was swallowed"
        problems = inconsistencies(ws)
        assert not problems, f"{case}, interrupted at point {at} of {total}: {problems}"
        again = _views(call(ws))  # the call, made again, works ...
        if hands_out_views:  # ... and hands out views of the slot's current buffer
            assert all(in_slot_buffer(ws, view) for view in again), f"{case}, at {at}"
        del again
        assert not inconsistencies(ws), f"{case}, at {at}, after the call again"
        ws.lock()  # locked, what fits is served
        capacity = ws.state.capacity((0, 0))
        if capacity:
            (view,) = ws.get_simultaneous(((capacity,), U8))
            assert in_slot_buffer(ws, view)


def _sweep(make: Callable[[], Any], call: Callable[[Any], Any]) -> Iterator[tuple[Any, int]]:
    """Each manager ``make`` gives, after ``call`` on it was interrupted at one point (every
    point, up to :data:`MAX_POINTS`), with the point's number."""
    total = _points(make, call)
    assert total > 10, f"only {total} points traced"
    for at in range(1, total + 1, max(1, total // MAX_POINTS)):
        ws = make()
        with contextlib.suppress(KeyboardInterrupt), profiled(Interrupt(at)):
            call(ws)
        yield ws, at


def test_an_interrupted_new_persistent_key_is_never_made_anew_once_locked():
    """The claim and the resource are kept in two steps: a Ctrl-C between them left a key
    the state claimed and no table kept, and a locked manager then ran the factory again
    and handed out a new resource (the original refuses: its one dict lacks the key)."""
    made: list[object] = []

    def factory() -> object:
        made.append(object())
        return made[-1]

    for ws, at in _sweep(
        lambda: interop.WorkspaceManager("cpu"), lambda ws: ws.get_persistent_resource("r", factory)
    ):
        kept = list(made)
        made.clear()
        ws.lock()
        try:
            resource = ws.get_persistent_resource("r", factory)
        except AssertionError:
            assert made == [], f"at {at}: refused, but after running the factory"
        else:
            assert made == [] and resource is kept[-1], f"at {at}: a new resource, locked"


def test_an_interrupted_recording_leaves_nothing_behind():
    """A Ctrl-C in a recorded call, or as its block ends: every later call is recorded (the
    thread's stack of running recorders kept the interrupted one, and every later call was
    taken for a call inside it), and no history stays attached to the manager."""
    from interop._workspace import _recording

    def record(ws: interop.WorkspaceManager) -> None:
        with ws.recording():
            ws.get_simultaneous(*BIG)

    for ws, at in _sweep(lambda: _warm(interop.WorkspaceManager("cpu"), SMALL), record):
        assert _recording._stack() == [], f"at {at}: a recorder left on the thread's stack"
        assert not ws._recorder.active, f"at {at}: a history kept"
        ws.get_simultaneous(*SMALL)  # a request after it finds its memo again
        ws.get_persistent_resource("r", dict)
        assert ws._acquired_at is ws._memos.acquired_at, f"at {at}: still routed"
        assert ws._tables is ws._persistent.tables, f"at {at}: still routed"
        with ws.recording() as history:
            ws.get_simultaneous(*SMALL)
            ws.get_retained("tail", (8,), F32)
            ws.get_persistent_resource("r", dict)
        assert len(history.trace()) == 3, f"at {at}: the next calls were not recorded"
