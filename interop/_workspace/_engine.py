"""The state engine: the manager's current state, its lock, and the loop that carries out
what the core plans.

This is the only module that takes the manager's mutex, and it takes it only with
``with``. Everything that changes the state comes here, as a *transition*: a function of
a state returning ``(new_state, offsets, result, growth)`` (:func:`functional_ws.fast_paths.fit`'s
shape). A transition runs on the current state with no lock held (it may run the caller's
code: a key's ``__hash__``), and its result is installed only if the state is still the
one it planned from (compare-and-swap), or, where other calls changed only other slots,
over what they did (:func:`functional_ws.rebase`); otherwise it runs again, a bounded
number of times (:data:`MAX_PLANS`).

The mutex covers only assignments: installing a state, taking and installing buffers,
retiring memos. No user code runs under it: views are carved after it is released, from
the carver read with the state, and they are handed out only if that carver is still the
slot's (else the call is served again); a torch mode's handler, an ``alloc_context``, an
allocator, a pool's finaliser and a log handler all run with no lock held.

Every step keeps the state and the buffers consistent, so that an asynchronous exception
(KeyboardInterrupt) at any point leaves a manager whose next call works: a slot's state
never claims bytes its buffer does not hold. Before a slot's buffer is taken, the state
that says the slot holds none is published; a new buffer is installed before the state
that claims it. A slot's memos retire after its buffer is taken (a call that checked the
buffer before may still insert an entry: into the memo that then dies), and a memo is
replaced before it is killed, so the memo tables always hold a live one.

A growth (:meth:`Engine._grow`) is carried out in the original's order (vLLM 0.33.0's
``_ensure_workspace_size``):

1. the checks that need no release: a CUDA graph being captured refuses it; the core has
   refused what can never fit already;
2. under the mutex, if the state is still the one planned from: the state saying the
   growing slots hold nothing is published (capacity 0: :func:`functional_ws.after_failed_growth`
   with every slot at 0), their buffers are taken, and their memos retire;
3. with no lock held: the old buffers go (the allocator's adaptors see them go; freeing
   may run a pool's code), the accelerator cache is emptied, then ``alloc_context()`` is
   entered and the new buffers are allocated inside it (vLLM's sleep-mode pool unmaps what
   was freed when it is entered: the old buffers must be gone by then);
4. under the mutex, the new buffers are installed, then the planned state; if other calls
   changed other slots meanwhile, the growing slots are put into the state as it is
   (:func:`functional_ws.rebase`: a lock taken meanwhile stays, as the original checks the
   lock before it releases anything); if another growth settled the growing slots
   meanwhile, these buffers go and the call is planned again;
5. after the mutex, what the allocator's adaptors queued is reported (logging runs
   handlers).

If entering the context or an allocation fails, every growing slot gets its old capacity
again where possible (the slots of one growth stay in step), the core
(:func:`functional_ws.after_failed_growth`) says what the state becomes, and the error is
raised with a note per slot. A callable allocator keeps the other order: its buffers are
allocated and checked inside ``alloc_context()`` before anything is released, so a refused
or failed allocation changes nothing; the old buffers go after the mutex.

A fork while another thread holds the mutex would leave the child's copy held for good:
the child gets a new one (``interop/_locks.py``), and the state it inherited is
consistent (see above).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import torch

import functional_ws as fws
from functional_ws import Growth, InvalidSpecError, Slot, WorkspaceLockedError, WorkspaceState
from functional_ws.fast_paths import fit

from .. import _locks
from .._device import empty_device_cache, refuse_growth_during_capture
from .._errors import AllocationSuppressedError, ReplanLimitError
from .._locks import collection_paused, renew_after_fork
from .._private import outside_modes
from ._buffers import SlotBuffers
from ._carving import Carver
from ._memo import Memo, Memos
from ._providers import Allocation
from ._requests import worded

R = TypeVar("R")
#: A transition: state -> (new state, offsets of the views to carve, result, growth).
Transition = Callable[[WorkspaceState], tuple[WorkspaceState, Sequence[int], R, Growth]]
#: How many times a call plans again because the state moved before it could install its
#: result (other threads, or user code the call runs). A transition that runs no user code
#: then plans once more under the mutex; one that does raises ReplanLimitError.
MAX_PLANS = 16
#: The offsets of a transition that carves nothing.
_NOTHING: Sequence[Any] = ()
#: The "carver" of a transition that carves nothing: installed, nothing to carve from.
_NO_SLOT = Carver(None, torch.device("cpu"))


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
        renew_after_fork(self, "_mutex")  # a fork while another thread holds it

    # ----- a copy of another manager's -----

    def snapshot(self) -> tuple[WorkspaceState, list[torch.Tensor | None]]:
        """The state and a copy of every slot's bytes, taken together under the mutex (so
        the bytes are those the state describes: a span it calls intact holds its bytes),
        outside the caller's torch modes (what a pickled copy is made of)."""
        return collection_paused(self._snapshot)

    def _snapshot(self) -> tuple[WorkspaceState, list[torch.Tensor | None]]:
        with self._mutex, outside_modes():
            buffers = self.buffers.buffers()
            return self.state, [None if b is None else b.clone() for b in buffers]

    def adopt(self, state: WorkspaceState, buffers: Sequence[torch.Tensor | None]) -> None:
        """Become a copy of a manager whose :meth:`snapshot` was ``(state, buffers)`` (of
        this one's configuration), on a fresh engine: each slot gets a buffer of its own
        (:meth:`_allocate_copy`) holding a copy of that slot's bytes, and the state is
        ``state`` (its capacity limit too: the limit of the device it was made for)."""
        made = self._allocate_copy([0 if b is None else b.numel() for b in buffers])
        with outside_modes():
            for index, allocation in made.items():
                allocation.buffer.copy_(buffers[index])  # type: ignore[arg-type]
        self._take_copy(made, state)

    def copy_of(self, source: Engine) -> None:
        """Become a copy of ``source`` (an engine of this one's configuration), on a fresh
        engine: buffers of the sizes ``source``'s have (:meth:`_allocate_copy`), then,
        under ``source``'s mutex, its bytes copied into them and its state taken (so the
        bytes are those the state describes), with no copy held in between (what a deep
        copy is made of).

        Raises:
            ReplanLimitError: ``source``'s slots changed size every time (other threads
                growing them), :data:`MAX_PLANS` times.
        """
        for _ in range(MAX_PLANS):
            sizes = [0 if b is None else b.numel() for b in source.buffers.buffers()]
            made = self._allocate_copy(sizes)
            if collection_paused(self._copy_if_sized, source, sizes, made):
                return
        raise ReplanLimitError(
            f"a copy of the manager was overtaken {MAX_PLANS} times in a row: other "
            "threads grew its slots while the copy allocated. Copy it while they pause."
        )

    def _copy_if_sized(self, source: Engine, sizes: list[int], made: dict[int, Allocation]) -> bool:
        """Under ``source``'s mutex: if its slots still have ``sizes``, copy their bytes
        into ``made`` and take its state."""
        with source._mutex, outside_modes():
            buffers = source.buffers.buffers()
            if [0 if b is None else b.numel() for b in buffers] != sizes:
                return False
            for index, allocation in made.items():
                allocation.buffer.copy_(buffers[index])  # type: ignore[arg-type]
            self._take_copy(made, source.state)
            return True

    def _allocate_copy(self, sizes: Sequence[int]) -> dict[int, Allocation]:
        """A buffer per slot index of nonzero ``sizes``, allocated inside
        ``alloc_context()``, each apart from those made before it (none is installed yet).

        Raises:
            AllocationSuppressedError: the context swallowed an allocation's failure: the
                copy would claim bytes it has no buffer for (a growth handles that as a
                failed allocation).
        """
        made: dict[int, Allocation] = {}
        with self._alloc_context():
            for index, nbytes in enumerate(sizes):
                if nbytes:
                    in_use = [allocation.buffer for allocation in made.values()]
                    made[index] = self.buffers.allocate(index, nbytes, in_use=in_use)
        missing = [index for index, nbytes in enumerate(sizes) if nbytes and index not in made]
        if missing:
            raise AllocationSuppressedError(
                f"alloc_context() suppressed an exception raised while a copy of the manager "
                f"allocated the buffers of slot index(es) {missing} inside it (its __exit__ "
                "returned a true value), so the copy has no bytes to hold them. Let the "
                "context re-raise what happens inside it."
            )
        return made

    def _take_copy(self, made: dict[int, Allocation], state: WorkspaceState) -> None:
        """Install the copy's buffers ``made`` (holding their bytes) and its ``state``."""
        for index, allocation in made.items():
            self.buffers.install(index, allocation)
        self.state = state

    # ----- installing a state -----

    def swap(self, old: WorkspaceState, new: WorkspaceState) -> bool:
        """Install ``new`` if the state is still ``old`` (compare-and-swap)."""
        with self._mutex:
            if self.state is not old:
                return False
            self.state = new
            return True

    def update(
        self,
        transition: Callable[[WorkspaceState], WorkspaceState],
        user_code: str | None = None,
    ) -> WorkspaceState:
        """Install ``transition`` of the current state, one that never grows (lock, unlock,
        a persistent key's claim), planning again while the state moves.

        Returns:
            The state installed.
        """
        return self.serve(
            lambda state: (transition(state), _NOTHING, None, ()), None, (), user_code
        )[2]

    def run(self, transition: Transition[R], user_code: str | None = None) -> R:
        """Install ``transition``'s state, carrying out its growth first; its result."""
        return self.serve(transition, None, (), user_code)[1]

    def serve(
        self,
        transition: Callable[..., tuple[WorkspaceState, Sequence[int], R, Growth]],
        index: int | None,
        requests: Sequence[tuple[Any, Any]],
        user_code: str | None = None,
        args: tuple[Any, ...] = (),
    ) -> tuple[list[torch.Tensor], R, WorkspaceState, int]:
        """Install ``transition(state, *args)`` (growing first where it says so) and carve
        ``requests`` (canonical ``(shape, dtype)`` pairs) at its offsets from the buffer of
        the slot at ``index`` (``None``: nothing to carve).

        The views are carved with no lock held and handed out only if the slot's buffer is
        still the one the installed state describes; otherwise the call is served again.

        Args:
            transition: what to install (a core function, or one the caller made).
            index: the slot whose views are carved.
            requests: the views, in the order of the transition's offsets.
            user_code: what of the caller's code the transition runs (``None``: none), for
                the error raised when it keeps moving the state.
            args: the transition's arguments after the state (:meth:`fit_and_carve`'s retry
                passes :func:`functional_ws.fast_paths.fit` its slot index and byte counts).

        Returns:
            ``(views, result, state, generation)``: the carved (shared-base) views, the
            transition's result, the state installed, and the generation of the buffer they
            were carved from.

        Raises:
            ReplanLimitError: (``RuntimeError``) the state moved every time the call was
                planned, :data:`MAX_PLANS` times, and the transition runs ``user_code``.
        """
        spare: dict[int, Allocation] | None = None  # a growth's buffers another overtook
        records = self.buffers.records
        for attempt in range(MAX_PLANS + 1):
            if attempt < MAX_PLANS:
                old = self.state
                new, offsets, result, growth = self.plan(transition, old, *args)
                if growth:
                    spare = {} if spare is None else spare
                    carver = self._install(old, new, growth, index, spare)
                else:  # installed if the state is still old, or merged over other slots
                    with self._mutex:  # (a merge allocates: the collector is paused)
                        merged = (
                            new
                            if self.state is old
                            else collection_paused(self._merge, old, new, index)
                        )
                        if merged is None:
                            carver = None
                        else:
                            self.state = new = merged
                            carver = _NO_SLOT if index is None else records[index][1]
            elif user_code is None:  # nothing of the caller's runs: plan under the mutex
                new, offsets, result, carver = collection_paused(
                    self._plan_under_lock, transition, index, args, {} if spare is None else spare
                )
            else:
                raise ReplanLimitError.for_user_code(user_code, MAX_PLANS)
            if carver is None:
                continue  # the state moved first: plan again
            if index is None:
                return [], result, new, 0
            views = carver.carve(offsets, requests)  # no lock held: a torch mode may run
            if records[index][1] is carver:  # still the slot's buffer
                return views, result, new, carver.generation
        raise ReplanLimitError.for_growth(MAX_PLANS)

    def fit_and_carve(
        self, index: int, nbytes: list[int], requests: Sequence[tuple[Any, Any]]
    ) -> list[torch.Tensor]:
        """The miss path (a request seen for the first time in the slot at ``index``):
        :func:`functional_ws.fast_paths.fit` of its byte counts, installed, its views carved.

        The first try is written out (bench_workloads' "miss, 1 view" and "miss, 3 views":
        :meth:`serve`'s general loop costs a tenth of a miss); a try that another call
        overtook goes to :meth:`serve`, which plans it again.

        Returns:
            The carved (shared-base) views.
        """
        old = self.state
        try:
            new, offsets, _, growth = fit(old, index, nbytes)
        except WorkspaceLockedError as err:
            raise worded(err, refused_by=self) from None
        except InvalidSpecError:  # views of 2**63 bytes together: said in the caller's words
            try:
                fit(old, index, nbytes, argname="shapes_and_dtypes")
            except InvalidSpecError as named:
                raise named from None
            raise
        records = self.buffers.records
        if growth:
            carver = self._install(old, new, growth, index, {})
        else:
            with self._mutex:
                carver = None
                if self.state is old:
                    self.state = new
                    carver = records[index][1]
        if carver is not None:
            views = carver.carve(offsets, requests)  # no lock held
            if records[index][1] is carver:  # still the slot's buffer
                return views
        return self.serve(fit, index, requests, None, (index, nbytes))[0]

    def generation(self, index: int) -> int:
        """The generation of slot ``index``'s current buffer (memo entries record theirs)."""
        return self.buffers.current(index).generation

    def plan(self, transition: Callable[..., R], *args: Any) -> R:
        """``transition(*args)``, a core function, with its lock refusal worded as the
        original's (naming the caller's line) and marked as this manager's own."""
        try:
            return transition(*args)
        except WorkspaceLockedError as err:
            raise worded(err, refused_by=self) from None

    def _plan_under_lock(
        self,
        transition: Callable[..., Any],
        index: int | None,
        args: tuple[Any, ...],
        spare: dict[int, Allocation],
    ) -> tuple[WorkspaceState, Sequence[int], Any, Carver | None]:
        """The last try of a call whose transition runs no user code: planned and, without
        growth, installed under the mutex, so other threads cannot move the state between."""
        with self._mutex:
            old = self.state
            new, offsets, result, growth = self.plan(transition, old, *args)
            if not growth:
                self.state = new
                return new, offsets, result, self._carver(index)
        return new, offsets, result, self._install(old, new, growth, index, spare)

    def _carver(self, index: int | None) -> Carver:
        """The carver of slot ``index`` (read under the mutex, with the state); for
        ``None`` (nothing to carve), a carver of no buffer."""
        return _NO_SLOT if index is None else self.buffers.records[index][1]

    def _install(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        growth: Growth,
        index: int | None,
        spare: dict[int, Allocation],
    ) -> Carver | None:
        """Carry out ``growth`` and install ``new``, planned on ``old`` (with the buffers in
        ``spare``, by slot index, where they are the sizes it needs: what an earlier try of
        the call allocated before another growth overtook it, so that code its allocation
        runs, which made that growth, does not run again).

        Returns:
            The carver of slot ``index`` as ``new`` describes it; ``None`` when the state
            moved before ``new`` could be installed (plan again).
        """
        if self._device.type == "cuda":
            refuse_growth_during_capture(self._device, *growth[0])
        # The growth's sections under the mutex allocate: the collector is paused for all
        # of it, the allocator's own calls included (collection_paused written out: a call
        # fewer, count_growth_calls.py's budget; the pause starts inside the try that ends
        # it).
        me = threading.get_ident()
        try:
            if gc.isenabled():
                _locks.resuming = True
                gc.disable()
            _locks.pausing.append(me)
            if self.buffers.allocator.releases_first and not (
                spare and _covers(spare, old, growth)
            ):
                return self._grow(old, new, growth, index, spare)
            # Buffers in hand (a callable's, or spares): swapped in under the mutex.
            return self._grow_allocating_first(old, new, growth, index, spare)
        finally:
            if me in _locks.pausing:
                _locks.pausing.remove(me)
            if _locks.resuming and not _locks.pausing:
                _locks.resuming = False
                gc.enable()
            if self.buffers.allocator.pending:  # logging runs handlers: never under the mutex
                self.buffers.allocator.report()

    def _merge(
        self, old: WorkspaceState, new: WorkspaceState, index: int | None
    ) -> WorkspaceState | None:
        """``new``, planned on ``old``, over what other calls made of the state meanwhile
        (under the mutex): ``None`` where they changed the slot it planned in (or which it
        read is unknown) or what it changes."""
        current = self.state
        if index is None or current.slots[index] is not old.slots[index]:
            return None
        return fws.rebase(old, new, current)

    # ----- growth -----

    def _grow(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        growth: Growth,
        index: int | None,
        spare: dict[int, Allocation],
    ) -> Carver | None:
        """The built-in allocators' growth, in the original's order: release the old
        buffers, empty the accelerator cache, then allocate inside ``alloc_context()``
        (steps 2 to 4 of the module's docstring)."""
        # Three calls fewer, written out (the growth's budget, count_growth_calls.py, and
        # bench_workloads' growth rows): each index, the uncontended install, the carver.
        slots, indices, blocks = [], [], []
        lanes = old.num_lanes
        for slot, _ in growth:  # the core's slots: valid pairs
            slots.append(slot)
            indices.append(slot[0] * lanes + slot[1])  # old.index(slot)
        bare = fws.after_failed_growth(old, new, dict.fromkeys(slots, 0))
        dead: list[Memo] = []  # emptied with no lock held: their entries hold the caller's keys
        with self._mutex:
            if self.state is not old:
                return None
            try:
                self.state = bare  # the slots claim nothing before their buffers go
                for i in indices:
                    blocks.append(self.buffers.take(i))
                    self.memos.retire(i, dead)  # after its buffer: a memo filled before dies
            except BaseException:  # Ctrl-C: the slots not yet taken claim theirs again
                self._settle_interrupted(old, new, slots, indices, {}, old, dead)
                raise
        self._release(slots, blocks, dead)
        held, allocations, error = self._allocate(old, growth, indices, spare)
        try:
            with self._mutex:
                try:
                    current = self.state  # over what other calls did meanwhile, if any:
                    settled = new if current is bare else fws.rebase(bare, new, current)
                    if settled is not None:  # (None: another growth settled these slots)
                        for i, allocation in allocations.items():
                            self.buffers.install(i, allocation)  # before the state claims it
                        if error is None:
                            self.state = settled  # and self._carver(index):
                            return _NO_SLOT if index is None else self.buffers.records[index][1]
                        moved = None if current is bare else current
                        self.state = fws.after_failed_growth(old, new, held, current=moved)
                except BaseException:  # Ctrl-C between the installs: the state claims them
                    self._settle_interrupted(old, new, slots, indices, allocations, None, dead)
                    raise
            if error is not None:
                raise error
            spare.update(allocations)  # another growth settled these slots: plan again
            return None
        finally:  # the error's traceback holds this frame: keep no cycle through it
            error = None

    def _allocate(
        self,
        old: WorkspaceState,
        growth: Growth,
        indices: list[int],
        spare: dict[int, Allocation],
    ) -> tuple[dict[Slot, int], dict[int, Allocation], BaseException | None]:
        """Allocate the new buffers of ``growth`` inside ``alloc_context()`` (taking those
        of ``spare`` that have the sizes needed); if entering it or an allocation fails,
        every growing slot gets its old capacity again where possible (the slots of one
        growth stay in step).

        Returns:
            ``(held, allocations, error)``: per slot, the capacity it will hold; per slot
            index, its buffer; the error to raise (with a note per slot), or ``None``.
        """
        allocations: dict[int, Allocation] = {}
        entered = False
        try:
            with self._alloc_context():
                entered = True
                for (slot, nbytes), i in zip(growth, indices, strict=True):
                    ready = spare.pop(i, None) if spare else None
                    if ready is None or ready.nbytes != nbytes:
                        previous = old.slots[i].capacity
                        ready = self.buffers.allocate(i, nbytes, slot=slot, previous=previous)
                    allocations[i] = ready
                    ready = None
            if len(allocations) != len(indices):
                raise _suppressed(growth, indices, allocations)
        except BaseException as err:  # out of memory, a bad result, a context that raised
            allocations.clear()  # the new buffers go before the old capacities come back
            return self._restore(err, old, growth, indices, entered)
        return dict(growth), allocations, None

    def _restore(
        self,
        err: BaseException,
        old: WorkspaceState,
        growth: Growth,
        indices: list[int],
        in_context: bool,
    ) -> tuple[dict[Slot, int], dict[int, Allocation], BaseException]:
        """After ``err``, each growing slot's old capacity allocated again (inside
        ``alloc_context()`` when the failure came after entering it): per slot the
        capacity it gets (0 where even that fails, or where it had none), per index its
        buffer, and the error to raise once the state says so, with a note per slot:
        ``err``, or a Ctrl-C (any ``BaseException`` not an ``Exception``) that came
        meanwhile, ``err`` its context. (No local of a frame an error passed through
        holds that error: a reference cycle would keep the manager until a collection.)"""
        held: dict[Slot, int] = dict.fromkeys((slot for slot, _ in growth), 0)
        allocations: dict[int, Allocation] = {}
        # A slot whose allocation fails stays empty (the note says so); the context is made
        # inside the try, which covers its factory too.
        try:
            with self._alloc_context() if in_context else contextlib.nullcontext():
                for (slot, _), i in zip(growth, indices, strict=True):
                    capacity = old.slots[i].capacity
                    if capacity:
                        allocations[i] = self.buffers.allocate(i, capacity)
                        held[slot] = capacity
        except Exception:  # out of memory again: the slots not yet restored stay empty
            pass
        except BaseException as interrupt:  # never swallowed: raised in err's place
            return held, allocations, _explained(interrupt, old, growth, held, "was interrupted")
        return held, allocations, _explained(err, old, growth, held, "failed too")

    def _grow_allocating_first(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        growth: Growth,
        index: int | None,
        spare: dict[int, Allocation],
    ) -> Carver | None:
        """A callable allocator's growth: every new buffer allocated and checked (inside
        ``alloc_context()``) before anything is released, so a refused or failed allocation
        changes nothing; then the buffers are swapped under the mutex, and the old ones
        dropped after it (a pool's finaliser may call the manager). A growth whose buffers
        are all in ``spare`` takes this way too: nothing of the caller's runs between its
        plan and the swap, so other calls that keep growing the slot meanwhile (code the
        first try's release and allocation ran) cannot overtake it again."""
        slots = [slot for slot, _ in growth]
        indices = [old.index(slot) for slot in slots]
        wanted = [
            (i, nbytes, slot, old.slots[i].capacity)
            for i, (slot, nbytes) in zip(indices, growth, strict=True)
        ]
        if _covers(spare, old, growth):
            prepared = {i: spare.pop(i) for i, _, _, _ in wanted}  # checked when made
        else:
            spare.clear()
            made = None
            with self._alloc_context():
                made = self.buffers.allocate_apart(wanted)  # user code: no lock held
            if made is None:  # the context suppressed a failure: nothing was released
                raise _suppressed(growth, indices, {})
            prepared = made
        with self._mutex:
            settled = fws.rebase(old, new, self.state)  # over what user code did meanwhile
            if settled is None:
                spare.update(prepared)  # user code changed the growing slots: plan again
                return None
            before = self.state
            dead: list[Memo] = []
            try:
                self.state = fws.after_failed_growth(
                    old, new, dict.fromkeys(slots, 0), current=before
                )
                blocks = [self.buffers.take(i) for i in indices]
                for i in indices:
                    self.memos.retire(i, dead)
                    self.buffers.install(i, prepared[i])
                self.state = settled
            except BaseException:  # Ctrl-C: each slot claims the buffer it holds
                self._settle_interrupted(old, new, slots, indices, prepared, before, dead)
                raise
            carver = self._carver(index)
        self._release(slots, blocks, dead)
        return carver

    def _settle_interrupted(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        slots: list[Slot],
        indices: list[int],
        fresh: dict[int, Allocation],
        base: WorkspaceState | None,
        dead: list[Memo],
    ) -> None:
        """After a Ctrl-C between a growth's steps under the mutex (the caller holds it):
        each growing slot's state describes the buffer it holds now, its old one (as in
        ``old``), one of ``fresh`` (grown, or its old capacity again) or none (capacity 0,
        its memos retired into ``dead``, which the caller's frame holds until the Ctrl-C
        is handled), over ``base`` (``None``: the state now). Retried until done: a second
        Ctrl-C meanwhile is dropped, as the first is being raised."""
        while True:
            try:
                held: dict[Slot, int] = {}
                for slot, i in zip(slots, indices, strict=True):
                    allocation = self.buffers.records[i][0]
                    if allocation is None:
                        held[slot] = 0
                        self.memos.retire(i, dead)
                    elif fresh.get(i) is allocation:
                        held[slot] = allocation.nbytes
                current = self.state if base is None else base
                moved = None if current is old else current
                self.state = fws.after_failed_growth(old, new, held, current=moved)
                return
            except KeyboardInterrupt:
                continue

    def _release(
        self, slots: list[Slot], blocks: list[torch.Tensor | None], dead: list[Memo]
    ) -> None:
        """Let the old buffers go (with no lock held: freeing memory may run a pool's code,
        emptying a memo a key's ``__del__``): the memos retired with them are emptied (their
        views pin the old buffers), the allocator's adaptors see each buffer go, then the
        accelerator's cache is emptied."""
        for memo in dead:  # written out: no call more (count_growth_calls.py's budget)
            memo.clear()
            memo.old.clear()
        dead.clear()
        for i, slot in enumerate(slots):
            block, blocks[i] = blocks[i], None  # the list holds it no more
            if block is not None:
                self.buffers.allocator.release(slot, block)
            block = None
        if self._device.type != "cpu":
            empty_device_cache(self._device)


def _covers(spare: dict[int, Allocation], old: WorkspaceState, growth: Growth) -> bool:
    """Whether ``spare`` holds a buffer of the size ``growth`` needs for each of its slots."""
    return bool(spare) and all(
        (allocation := spare.get(old.index(slot))) is not None and allocation.nbytes == nbytes
        for slot, nbytes in growth
    )


def _suppressed(
    growth: Growth, indices: list[int], allocations: dict[int, Allocation]
) -> AllocationSuppressedError:
    """The error for new buffers missing after ``alloc_context()`` exited quietly."""
    missing = [slot for (slot, _), i in zip(growth, indices, strict=True) if i not in allocations]
    return AllocationSuppressedError(
        f"alloc_context() suppressed an exception raised while workspace slot(s) {missing} "
        "allocated a new buffer inside it (its __exit__ returned a true value), so no buffer "
        "was made. Let the context re-raise what happens inside it."
    )


def _explained(
    err: BaseException,
    old: WorkspaceState,
    growth: Growth,
    held: dict[Slot, int],
    restore: str,
) -> BaseException:
    """``err`` with a note per growing slot saying what the failed growth did to it
    (``restore``: what became of a restore that gave the slot nothing)."""
    for slot, nbytes in growth:
        _explain(err, slot, nbytes, old.capacity(slot), held[slot], restore)
    return err


def _explain(
    err: BaseException, slot: Slot, nbytes: int, previous: int, held: int, restore: str
) -> None:
    """Add a note to ``err`` saying what the failed growth did to ``slot``."""
    if held:
        outcome = (
            f"a buffer of its old capacity ({previous} bytes) was allocated again, so the "
            "slot keeps working; its bytes are new, so its retained span was dropped "
            "(get_retained reports it not intact)"
        )
    elif previous:
        outcome = (
            f"allocating its old capacity ({previous} bytes) again {restore}, so the slot "
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
