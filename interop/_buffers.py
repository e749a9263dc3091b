"""The slots' device buffers: carrying out the growth the core plans, and carving views.

One aligned ``uint8`` buffer per slot, from the manager's allocator (``_allocators.py``).
The manager enters ``alloc_context()`` before anything is released and calls
:meth:`SlotBuffers.grow` inside it. With the built-in allocators, each slot follows the
original's order: drop the old buffer, empty the accelerator cache, allocate the new one.
If that allocation fails, the old capacity is allocated again where possible, and the core
(:func:`functional_ws.after_failed_growth`) says what the state becomes. A callable
allocator's buffers are allocated (and validated) before anything is released
(:meth:`SlotBuffers.prepare`), so a refused result changes nothing.

Views are carved by each slot's :class:`interop._carving.Carver`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

import functional_ws as fws
from functional_ws import Growth, Slot, WorkspaceState

from ._allocators import Allocation, SlotAllocator
from ._carving import Carver
from ._device import empty_device_cache


class SlotBuffers:
    """The device buffers of a manager's slots, indexed as ``WorkspaceState.slots``.

    Args:
        device: where buffers live.
        count: number of slots.
        alignment: every buffer's ``data_ptr()`` is a multiple of it.
        allocator: provides each buffer (``SlotAllocator()`` is torch's).
    """

    def __init__(
        self, device: torch.device, count: int, alignment: int, allocator: SlotAllocator
    ) -> None:
        self.device = device
        self.allocator = allocator
        self._alignment = alignment
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._owners: list[Any] = [None] * count  # what owns each buffer's memory (a jax.Array)
        self.carvers: list[Carver] = [Carver(None, device) for _ in range(count)]

    def buffer(self, index: int) -> torch.Tensor | None:
        """Slot ``index``'s buffer, ``None`` while it has none."""
        return self._buffers[index]

    def buffers(self) -> list[torch.Tensor | None]:
        """Every slot's buffer, in slot order (a new list)."""
        return list(self._buffers)

    # ----- growth -----

    def prepare(self, growth: Growth, state: WorkspaceState) -> dict[Slot, Allocation] | None:
        """For an allocator that allocates before releasing (a callable), the new buffers of
        ``growth``, allocated and validated now; ``None`` for the built-ins, which allocate
        in :meth:`grow`, after releasing. ``state`` says where each slot is stored.

        A new buffer must not overlap a buffer another slot keeps, nor another new one.

        Raises:
            AllocatorError: a result that cannot be a buffer (nothing has changed).
        """
        if self.allocator.releases_first:
            return None
        growing = {state.index(slot) for slot, _ in growth}
        kept = [b for i, b in enumerate(self._buffers) if b is not None and i not in growing]
        fresh: dict[Slot, Allocation] = {}
        for slot, nbytes in growth:
            in_use = kept + [allocation.buffer for allocation in fresh.values()]
            previous = state.slots[state.index(slot)].capacity
            fresh[slot] = self._allocate(nbytes, in_use, slot=slot, previous=previous)
        return fresh

    def grow(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        growth: Growth,
        released: Callable[[int], None],
        prepared: Mapping[Slot, Allocation] | None = None,
    ) -> tuple[WorkspaceState, BaseException | None]:
        """Reallocate the buffers ``growth`` names, going from state ``old`` to ``new``.

        Args:
            old: the state before the transition.
            new: the state the core planned.
            growth: ``((slot, nbytes), ...)`` from the core.
            released: called with a slot's index once its old buffer is dropped, before
                anything is allocated: the caller drops its own references (memoised views)
                there, so that the retired-buffer report sees only outside holders.
            prepared: the new buffers :meth:`prepare` made, if any.

        Returns:
            ``(state, error)``: ``new`` and ``None``; or, when an allocation failed, the
            state that describes the buffers as they now are (decided by
            :func:`functional_ws.after_failed_growth`) and the error to raise after
            installing it, with a note saying what happened to the slot.
        """
        held: dict[Slot, int] = {}
        for slot, nbytes in growth:
            index = new.index(slot)
            if prepared is not None:
                self._release(index, slot, released)
                self._install(index, prepared[slot])
                held[slot] = nbytes
                continue
            previous = old.slots[index].capacity
            self._release(index, slot, released)
            held[slot] = 0
            try:
                allocation = self._allocate(
                    nbytes, self._others(index), slot=slot, previous=previous
                )
                self._install(index, allocation)
            except BaseException as err:  # out of memory, a bad result, interrupted
                held[slot] = self._restore(index, previous)
                _explain(err, slot, nbytes, previous, held[slot])
                return fws.after_failed_growth(old, new, held), err
            held[slot] = nbytes
        return new, None

    def report(self) -> None:
        """Write what the allocator's adaptors queued (retired buffers still pinned, the
        debug log of growths). Call it after releasing any lock: logging runs handlers."""
        self.allocator.report()

    def _restore(self, index: int, capacity: int) -> int:
        """Allocate ``capacity`` bytes again for slot ``index``; the capacity it holds now."""
        if capacity == 0:
            return 0
        try:
            self._install(index, self._allocate(capacity, self._others(index)))
        except BaseException:  # the device is full: the slot stays empty, the error says so
            return 0
        return capacity

    def _release(self, index: int, slot: tuple[int, int], released: Callable[[int], None]) -> None:
        """Drop slot ``index``'s buffer (reporting it if something else holds it)."""
        retiring = self._buffers[index]
        self._buffers[index] = self._owners[index] = None
        self.carvers[index] = Carver(None, self.device)
        released(index)
        if retiring is not None:
            self.allocator.release(slot, retiring)
        del retiring
        if self.device.type != "cpu":
            empty_device_cache(self.device)

    def _allocate(
        self,
        nbytes: int,
        in_use: Sequence[torch.Tensor],
        *,
        slot: Slot | None = None,
        previous: int = 0,
    ) -> Allocation:
        return self.allocator.allocate(
            nbytes, self.device, self._alignment, in_use=in_use, slot=slot, previous=previous
        )

    def _others(self, index: int) -> list[torch.Tensor]:
        """The buffers of every slot but ``index``, which a new buffer must not overlap
        (empty for an allocator that never hands out memory in use)."""
        if not self.allocator.checks_overlap:
            return []
        return [b for i, b in enumerate(self._buffers) if b is not None and i != index]

    def _install(self, index: int, allocation: Allocation) -> None:
        self._buffers[index] = allocation.buffer
        self._owners[index] = allocation.owner
        self.carvers[index] = Carver(allocation.buffer, self.device)

    # ----- views -----

    def carve(
        self, index: int, offsets: Sequence[int], requests: Sequence[tuple[Any, Any]]
    ) -> list[torch.Tensor]:
        """The views of ``requests`` at byte ``offsets`` of slot ``index``'s buffer."""
        return self.carvers[index].carve(offsets, requests)


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
