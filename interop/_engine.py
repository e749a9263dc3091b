"""The state engine: the manager's current state, its lock, and the loop that carries out
what the core plans.

This is the only module that takes the manager's mutex. Everything that changes the state
comes here: a transition runs on the current state with no lock held (it may run the
caller's code: a key's ``__eq__``), and its result is installed only if the state is still
the one it planned from (compare-and-swap); otherwise it runs again. The mutex covers the
swap, and what must match the state it installs: carving views from the buffers the new
state describes, and (with a built-in allocator) releasing and allocating buffers.

A growth (:meth:`Engine.run`, when the core's plan names one) is carried out in this order:

1. the checks that need no release: a CUDA graph being captured refuses it
   (``GrowthDuringCaptureError``); the core has refused what can never fit already;
2. ``alloc_context()`` is entered (a context that raises changes nothing), and a callable
   allocator's new buffers are allocated and checked (user code: no lock held);
3. under the mutex, if the state is still the one planned from: each growing slot's memos
   retire (``_memo.Memos.retire``), its old buffer is released, the accelerator cache
   emptied, and the new buffer allocated (built-ins) or installed (a callable's); then the
   new state is published and the views carved;
4. after the mutex, what the allocator adaptors queued is reported (logging runs handlers).

If an allocation fails after its slot's old buffer was released, the slot's old capacity
is allocated again where possible, :func:`functional_ws.after_failed_growth` says what the
state becomes, and the allocator's error is raised with a note saying what happened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import torch

import functional_ws as fws
from functional_ws import Growth, Slot, WorkspaceLockedError, WorkspaceState
from functional_ws.replay import fit

from ._allocators import Allocation
from ._buffers import SlotBuffers
from ._device import empty_device_cache, refuse_growth_during_capture
from ._memo import Memos
from ._requests import worded

R = TypeVar("R")
F = TypeVar("F")
#: A transition as the engine runs it: state -> (new state, growth to carry out, result).
Transition = Callable[[WorkspaceState], tuple[WorkspaceState, Growth, R]]
#: What a transition planned on a state: ``(old, new, growth, result)``.
Planned = tuple[WorkspaceState, WorkspaceState, Growth, R]


class Engine:
    """The current state of one manager, and everything that changes it.

    Args:
        state: the initial state.
        buffers: the slots' buffers (the engine is the only one that changes them).
        memos: the slots' memos (retired before a slot's buffer is replaced).
        alloc_context: a factory of the context every growth allocates in.

    Attributes:
        state: the current :class:`functional_ws.WorkspaceState` (read it freely; only the
            engine writes it).
    """

    def __init__(
        self,
        state: WorkspaceState,
        buffers: SlotBuffers,
        memos: Memos,
        alloc_context: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        self.state = state
        self.buffers = buffers
        self.memos = memos
        self._alloc_context = alloc_context
        self._device = buffers.device
        self._mutex = threading.Lock()

    # ----- transitions without growth -----

    def swap(self, old: WorkspaceState, new: WorkspaceState) -> bool:
        """Install ``new`` if the state is still ``old`` (compare-and-swap)."""
        with self._mutex:
            if self.state is not old:
                return False
            self.state = new
            return True

    def update(self, transition: Callable[[WorkspaceState], WorkspaceState]) -> WorkspaceState:
        """Install ``transition`` of the current state, one that never grows (lock, unlock, a
        persistent key's claim), running it again while another thread moves the state.

        Returns:
            The state installed.
        """
        while True:
            old = self.state
            new = self.plan(transition, old)
            if new is old or self.swap(old, new):
                return new

    def fit_and_carve(
        self, index: int, nbytes: Sequence[int], requests: Sequence[tuple[Any, Any]]
    ) -> list[torch.Tensor]:
        """A request seen for the first time in the slot at ``index`` (the miss path):
        :func:`functional_ws.replay.fit` of its byte counts, installed (grown first where it
        must), and its views carved from the buffer the new state describes.

        Returns:
            The carved (shared-base) views.
        """
        while True:
            old = self.state
            try:  # plan(fit, ...), inlined: this is the miss path
                new, offsets, _, growth = fit(old, index, nbytes)
            except WorkspaceLockedError as err:
                raise worded(err) from None
            if growth:
                return self._fit_growing(index, nbytes, requests, (old, new, growth, offsets))
            with self._mutex:
                if self.state is old:
                    self.state = new
                    return self.buffers.carvers[index].carve(offsets, requests)

    def _fit_growing(
        self,
        index: int,
        nbytes: Sequence[int],
        requests: Sequence[tuple[Any, Any]],
        planned: Planned[tuple[int, ...]],
    ) -> list[torch.Tensor]:
        """:meth:`fit_and_carve` of a request that grows the slot (``planned`` on ``old``)."""

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, Any]:
            new, offsets, _, growth = fit(state, index, nbytes)
            return new, growth, offsets

        def finish(offsets: tuple[int, ...]) -> list[torch.Tensor]:
            # Under the mutex: carved from the buffer the new state describes.
            return self.buffers.carvers[index].carve(offsets, requests)

        return self.run(transition, finish, planned)

    def plan(self, transition: Callable[..., R], *args: Any) -> R:
        """``transition(*args)``, a core function, with its lock refusal worded as the
        original's (naming the caller's line): where refusals are reworded (and in
        :meth:`fit_and_carve`'s inlined copy)."""
        try:
            return transition(*args)
        except WorkspaceLockedError as err:
            raise worded(err) from None

    # ----- transitions that may grow -----

    def run(
        self,
        transition: Transition[R],
        finish: Callable[[R], F],
        planned: Planned[R] | None = None,
    ) -> F:
        """Run ``transition`` on the current state and install its result, growing first
        when it says so; then ``finish(result)`` under the mutex (it carves views from the
        buffers the new state describes). ``planned``: the transition's result on a state,
        when the caller has it already.
        """
        while True:
            if planned is None:
                old = self.state
                new, growth, result = self.plan(transition, old)
            else:
                (old, new, growth, result), planned = planned, None
            if growth:
                done, value = self._grow(transition, finish, (old, new, growth, result))
                if done:
                    return value  # type: ignore[return-value]
                continue
            with self._mutex:
                if self.state is old:
                    self.state = new
                    return finish(result)

    def _grow(
        self, transition: Transition[R], finish: Callable[[R], F], planned: Planned[R]
    ) -> tuple[bool, F | None]:
        """Carry out the growth ``planned`` names if the transition still plans it:
        ``(True, finish(result))``; ``(False, None)`` when the state moved meanwhile (the
        caller runs it again)."""
        if self._device.type == "cuda":
            refuse_growth_during_capture(self._device, *planned[2][0])
        if self._alloc_context is nullcontext:  # the default: no context to enter
            done, value, error = self._grow_in_context(transition, finish, planned)
        else:
            with self._alloc_context():  # entered before anything is released
                done, value, error = self._grow_in_context(transition, finish, planned)
        self.buffers.allocator.report()  # logging runs handlers: never under the mutex
        if error is not None:
            raise error
        return done, value

    def _grow_in_context(
        self, transition: Transition[R], finish: Callable[[R], F], planned: Planned[R]
    ) -> tuple[bool, F | None, BaseException | None]:
        """:meth:`_grow` inside ``alloc_context()``: ``(done, finish(result), error)``."""
        old, new, growth, result = planned
        prepared = self._prepare(growth, old)  # a callable allocates here, unlocked
        if self.state is not old:  # user code ran: plan again on the state as it is
            old = self.state
            new, again, result = self.plan(transition, old)
            if again != growth:  # another thread changed the slots meanwhile
                return False, None, None
        with self._mutex:
            if self.state is not old:
                return False, None, None
            state, error = self._replace(old, new, growth, prepared)
            self.state = state
            return True, (None if error is not None else finish(result)), error

    def _prepare(self, growth: Growth, old: WorkspaceState) -> dict[Slot, Allocation] | None:
        """For an allocator that allocates before releasing (a callable), the new buffers of
        ``growth`` (planned from ``old``), allocated and validated now; ``None`` for the
        built-ins, which allocate after releasing. A new buffer must not overlap a buffer
        another slot keeps, nor another new one.

        Raises:
            AllocatorError: a result that cannot be a buffer (nothing has changed).
        """
        buffers = self.buffers
        if buffers.allocator.releases_first:
            return None
        growing = {old.index(slot) for slot, _ in growth}
        kept = [b for i, b in enumerate(buffers.buffers()) if b is not None and i not in growing]
        fresh: dict[Slot, Allocation] = {}
        for slot, nbytes in growth:
            index = old.index(slot)
            in_use = kept + [allocation.buffer for allocation in fresh.values()]
            previous = old.slots[index].capacity
            fresh[slot] = buffers.allocate(
                index, nbytes, slot=slot, previous=previous, in_use=in_use
            )
        return fresh

    def _replace(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        growth: Growth,
        prepared: dict[Slot, Allocation] | None,
    ) -> tuple[WorkspaceState, BaseException | None]:
        """Replace the buffers ``growth`` names, going from ``old`` to ``new`` (under the
        mutex): ``(new, None)``, or the state that describes the buffers as they are and the
        error to raise after installing it."""
        buffers = self.buffers
        held: dict[Slot, int] = {}
        for slot, nbytes in growth:
            index = new.index(slot)
            previous = old.slots[index].capacity
            self._release(index, slot)
            if prepared is not None:
                buffers.install(index, prepared[slot])
                held[slot] = nbytes
                continue
            held[slot] = 0
            try:
                buffers.install(
                    index, buffers.allocate(index, nbytes, slot=slot, previous=previous)
                )
            except BaseException as err:  # out of memory, a bad result, interrupted
                held[slot] = self._restore(index, previous)
                _explain(err, slot, nbytes, previous, held[slot])
                return fws.after_failed_growth(old, new, held), err
            held[slot] = nbytes
        return new, None

    def _release(self, index: int, slot: Slot) -> None:
        """Drop slot ``index``'s buffer: its memos first (their views pin it), then the
        buffer itself (the allocator's adaptors see it go), then the accelerator cache."""
        self.memos.retire(index)
        retiring = self.buffers.take(index)
        if retiring is not None:
            self.buffers.allocator.release(slot, retiring)
        del retiring
        if self._device.type != "cpu":
            empty_device_cache(self._device)

    def _restore(self, index: int, capacity: int) -> int:
        """Allocate ``capacity`` bytes again for slot ``index``; the capacity it holds now."""
        if capacity == 0:
            return 0
        try:
            self.buffers.install(index, self.buffers.allocate(index, capacity))
        except BaseException:  # the device is full: the slot stays empty, the error says so
            return 0
        return capacity


def _explain(err: BaseException, slot: Slot, nbytes: int, previous: int, held: int) -> None:
    """Add a note to ``err`` saying what the failed growth did to ``slot``."""
    if held:
        outcome = (
            f"a buffer of its old capacity ({previous} bytes) was allocated again, so the "
            "slot keeps working; its bytes are new, so its retained span was dropped "
            "(get_retained reports it not intact)"
        )
    elif previous:
        outcome = (
            f"allocating its old capacity ({previous} bytes) again failed too, so the slot "
            "has no buffer now (capacity 0); its next request allocates one"
        )
    else:
        outcome = "the slot had no buffer before and has none now"
    note = (
        f"functional-ws: growing workspace slot {slot} to {nbytes} bytes failed after its "
        f"old buffer was released; {outcome}."
    )
    add_note = getattr(err, "add_note", None)
    if add_note is not None:  # Python 3.11+
        add_note(note)
