"""The state engine: the manager's current state, its lock, and the loop that carries out
what the core plans.

This is the only module that takes the manager's mutex. Everything that changes the state
comes here: a transition runs on the current state with no lock held (it may run the
caller's code: a key's ``__eq__``), and its result is installed only if the state is still
the one it planned from (compare-and-swap); otherwise it runs again. The mutex covers the
swap, and what must match the state it installs: carving views from the buffers the new
state describes, and (with a built-in allocator) releasing and allocating buffers.

A growth (:meth:`Engine.run`, when the core's plan names one) is carried out in the
original's order (vLLM 0.33.0's ``_ensure_workspace_size``):

1. the checks that need no release: a CUDA graph being captured refuses it
   (``GrowthDuringCaptureError``); the core has refused what can never fit already;
2. under the mutex, if the state is still the one planned from: each growing slot's memos
   retire (``_memo.Memos.retire``), its buffer is taken, and the state says the slot holds
   none (capacity 0) while it has none;
3. with no lock held: the old buffers go (the allocator's adaptors see them go; freeing
   may run a pool's code), the accelerator cache is emptied, then ``alloc_context()`` is
   entered and the new buffers are allocated inside it (vLLM's sleep-mode pool unmaps what
   was freed when it is entered: the old buffers must be gone by then);
4. under the mutex, the new buffers are installed with the planned state and the views
   carved; if other calls moved the state meanwhile, the transition is planned again on
   the state as it is, and the buffers installed if it still plans this growth;
5. after the mutex, what the allocator adaptors queued is reported (logging runs handlers).

If entering the context or an allocation fails, every growing slot gets its old capacity
again where possible (the slots of one growth stay in step), the core
(:func:`functional_ws.after_failed_growth`) says what the state becomes, and the error is
raised with a note per slot. A callable allocator keeps the other order: its buffers are
allocated and checked inside ``alloc_context()`` before anything is released, so a refused
or failed allocation changes nothing; the old buffers are dropped after the mutex.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import torch

import functional_ws as fws
from functional_ws import Growth, Slot, WorkspaceLockedError, WorkspaceState
from functional_ws.fast_paths import emptied as emptied_slots
from functional_ws.fast_paths import fit

from .._device import empty_device_cache, refuse_growth_during_capture
from ._buffers import SlotBuffers
from ._memo import Memos
from ._providers import Allocation
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
        # Taken as acquire() / try / finally: release(), not `with`: the with statement costs
        # about 90 ns more per use on CPython 3.11, and the miss path takes it on every call.
        self._mutex = threading.Lock()

    # ----- transitions without growth -----

    def swap(self, old: WorkspaceState, new: WorkspaceState) -> bool:
        """Install ``new`` if the state is still ``old`` (compare-and-swap)."""
        self._mutex.acquire()
        try:
            if self.state is not old:
                return False
            self.state = new
            return True
        finally:
            self._mutex.release()

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
        :func:`functional_ws.fast_paths.fit` of its byte counts, installed (grown first where it
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
            self._mutex.acquire()
            try:
                if self.state is old:
                    self.state = new
                    return self.buffers.carvers[index].carve(offsets, requests)
            finally:
                self._mutex.release()

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
            self._mutex.acquire()
            try:
                if self.state is old:
                    self.state = new
                    return finish(result)
            finally:
                self._mutex.release()

    def _grow(
        self, transition: Transition[R], finish: Callable[[R], F], planned: Planned[R]
    ) -> tuple[bool, F | None]:
        """Carry out the growth ``planned`` names if the transition still plans it:
        ``(True, finish(result))``; ``(False, None)`` when the state moved meanwhile (the
        caller runs it again)."""
        if self._device.type == "cuda":
            refuse_growth_during_capture(self._device, *planned[2][0])
        buffers = self.buffers

        def carve(result: R) -> tuple[F, int]:  # under the mutex, as finish is
            return finish(result), buffers.generation

        try:
            if buffers.allocator.releases_first:
                done, value, error = self._grow_releasing_first(transition, carve, planned)
            else:
                done, value, error = self._grow_allocating_first(transition, carve, planned)
        finally:
            buffers.allocator.report()  # logging runs handlers: never under the mutex
        if error is not None:
            try:
                raise error
            finally:  # the traceback holds this frame: keep no cycle through the error
                error = None
        if not done or value is None:
            return done, None
        carved, generation = value
        if generation != buffers.generation:  # user code (a finalizer, a log handler, the
            return False, None  # context's exit) replaced a buffer since: plan again
        return True, carved

    def _grow_releasing_first(
        self, transition: Transition[R], finish: Callable[[R], F], planned: Planned[R]
    ) -> tuple[bool, F | None, BaseException | None]:
        """The built-in allocators' growth, in the original's order: release the old
        buffers, empty the accelerator cache, then allocate inside ``alloc_context()``.

        While the new buffers are allocated, the state says the growing slots hold none
        (capacity 0), and no lock is held (the context is user code).
        """
        old, new, growth, result = planned
        slots, indices = [], []
        for slot, _ in growth:  # (one loop, not comprehensions: each is a call)
            slots.append(slot)
            indices.append(old.index(slot))
        emptied = emptied_slots(old, indices)  # after_failed_growth with every slot at 0
        self._mutex.acquire()
        try:
            if self.state is not old:
                return False, None, None
            retired = []
            for index in indices:
                retired.append(self._take(index))
            self.state = emptied
        finally:
            self._mutex.release()
        self._drop(slots, retired)
        del retired
        held, allocations, error = self._allocate_in_context(old, growth, indices)
        try:
            self._mutex.acquire()
            try:
                if self.state is emptied:  # nothing moved meanwhile: install as planned
                    for index, allocation in allocations.items():
                        self.buffers.install(index, allocation)
                    if error is not None:
                        self.state = fws.after_failed_growth(old, new, held)
                        return True, None, error
                    self.state = new
                    return True, finish(result), None
            finally:
                self._mutex.release()
            if error is not None:  # other calls moved the state: keep what they did
                return self._settle_failure(old, new, emptied, held, allocations, error)
            done, value = self._settle_moved(transition, finish, growth, allocations)
            return done, value, None
        finally:  # the error's traceback keeps this frame: keep no cycle through the error
            error = None

    def _settle_moved(
        self,
        transition: Transition[R],
        finish: Callable[[R], F],
        growth: Growth,
        allocations: dict[int, Allocation],
    ) -> tuple[bool, F | None]:
        """The new buffers exist but other calls moved the state while they were allocated:
        plan the transition again on the state as it is and install them if it still plans
        this growth (the growing slots still hold none); else drop them (``(False, None)``:
        the caller runs the transition again)."""
        while True:
            current = self.state
            new, again, result = self.plan(transition, current)
            if again != growth:  # another growth settled these slots meanwhile
                return False, None
            self._mutex.acquire()
            try:
                if self.state is current:
                    for index, allocation in allocations.items():
                        self.buffers.install(index, allocation)
                    self.state = new
                    return True, finish(result)
            finally:
                self._mutex.release()

    def _settle_failure(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        emptied: WorkspaceState,
        held: dict[Slot, int],
        allocations: dict[int, Allocation],
        error: BaseException,
    ) -> tuple[bool, None, BaseException]:
        """A growth that failed while other calls moved the state: the growing slots get
        the buffers they hold again, over what those calls did (if no other growth settled
        the slots meanwhile, in which case its buffers stay and these are dropped)."""
        while True:
            current = self.state
            touched = [old.index(slot) for slot in held]
            if any(current.slots[i] is not emptied.slots[i] for i in touched):
                return True, None, error
            settled = fws.after_failed_growth(old, new, held, current=current)
            self._mutex.acquire()
            try:
                if self.state is current:
                    for index, allocation in allocations.items():
                        self.buffers.install(index, allocation)
                    self.state = settled
                    return True, None, error
            finally:
                self._mutex.release()

    def _allocate_in_context(
        self, old: WorkspaceState, growth: Growth, indices: list[int]
    ) -> tuple[dict[Slot, int], dict[int, Allocation], BaseException | None]:
        """Allocate the new buffers of ``growth`` inside ``alloc_context()``; if entering it
        or an allocation fails, every growing slot gets its old capacity again where
        possible (the slots of one growth stay in step).

        Returns:
            ``(held, allocations, error)``: per slot, the capacity it will hold; per slot
            index, its buffer; the error to raise (with a note), or ``None``.
        """
        allocations: dict[int, Allocation] = {}
        entered = False
        context = self._alloc_context
        try:
            if context is nullcontext:  # the default: nothing to enter (three calls saved)
                entered = True
                self._allocate_each(old, growth, indices, allocations)
            else:
                with context():
                    entered = True
                    self._allocate_each(old, growth, indices, allocations)
        except BaseException as err:  # out of memory, a bad result, a context that raised
            allocations.clear()  # the new buffers go before the old capacities come back
            held, allocations = self._restore(old, growth, indices, entered)
            for slot, nbytes in growth:
                _explain(err, slot, nbytes, old.capacity(slot), held[slot])
            return held, allocations, err
        return dict(growth), allocations, None

    def _allocate_each(
        self,
        old: WorkspaceState,
        growth: Growth,
        indices: list[int],
        allocations: dict[int, Allocation],
    ) -> None:
        """Allocate each growing slot's new buffer into ``allocations`` (by index)."""
        for (slot, nbytes), index in zip(growth, indices, strict=True):
            previous = old.slots[index].capacity
            allocations[index] = self.buffers.allocate(
                index, nbytes, slot=slot, previous=previous, in_use=()
            )

    def _restore(
        self, old: WorkspaceState, growth: Growth, indices: list[int], in_context: bool
    ) -> tuple[dict[Slot, int], dict[int, Allocation]]:
        """Each growing slot's old capacity allocated again (inside ``alloc_context()``
        when the failure came after entering it): per slot the capacity it gets (0 where
        even that fails, or where it had none), per index its buffer."""
        held: dict[Slot, int] = {}
        allocations: dict[int, Allocation] = {}
        context = self._alloc_context if in_context else nullcontext
        try:
            with context():
                for (slot, _), index in zip(growth, indices, strict=True):
                    held[slot] = 0
                    capacity = old.slots[index].capacity
                    if capacity:
                        allocations[index] = self.buffers.allocate(index, capacity, in_use=())
                        held[slot] = capacity
        except BaseException:  # the device is full: the slot stays empty, the note says so
            for slot, _ in growth:
                held.setdefault(slot, 0)
        return held, allocations

    def _grow_allocating_first(
        self, transition: Transition[R], finish: Callable[[R], F], planned: Planned[R]
    ) -> tuple[bool, F | None, BaseException | None]:
        """A callable allocator's growth: every new buffer allocated and checked (inside
        ``alloc_context()``) before anything is released, so a refused or failed allocation
        changes nothing; then the buffers are swapped under the mutex, and the old ones
        dropped after it (a pool's finalizer may call the manager)."""
        old, new, growth, result = planned
        wanted = [(old.index(slot), nbytes, slot, old.capacity(slot)) for slot, nbytes in growth]
        with self._alloc_context():
            prepared = self.buffers.allocate_apart(wanted)  # user code: no lock held
        if self.state is not old:  # user code ran: plan again on the state as it is
            old = self.state
            new, again, result = self.plan(transition, old)
            if again != growth:  # another thread changed the slots meanwhile
                return False, None, None
        self._mutex.acquire()
        try:
            if self.state is not old:
                return False, None, None
            slots = [slot for slot, _ in growth]
            indices = [old.index(slot) for slot in slots]
            retired = [self._take(index) for index in indices]
            for index in indices:
                self.buffers.install(index, prepared[index])
            self.state = new
            value = finish(result)
        finally:
            self._mutex.release()
        self._drop(slots, retired)
        return True, value, None

    def _take(self, index: int) -> torch.Tensor | None:
        """The block of slot ``index``'s buffer, taken from it (under the mutex): its memos
        retire first, their views pin it."""
        self.memos.retire(index)
        return self.buffers.take(index)

    def _drop(self, slots: list[Slot], retired: list[torch.Tensor | None]) -> None:
        """Let the old buffers go (with no lock held: freeing memory may run a pool's code):
        the allocator's adaptors see each go, then the accelerator's cache is emptied."""
        for i, slot in enumerate(slots):
            buffer, retired[i] = retired[i], None  # the list holds it no more
            if buffer is not None:
                self.buffers.allocator.release(slot, buffer)
            buffer = None
        if self._device.type != "cpu":
            empty_device_cache(self._device)


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
