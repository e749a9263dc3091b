"""The slots' device buffers, by index: which buffer each slot holds, and its carver.

One aligned ``uint8`` buffer per slot, from the manager's allocator (``_allocators.py``),
kept as its :class:`~interop._workspace._providers.Allocation`: the block it lies in (torch's CPU
block is larger than the buffer) and where; views are carved from the block, and the exact
tensor of the buffer is made only when asked for (:meth:`SlotBuffers.buffer`). Nothing
here knows a state or a policy: the engine (``_engine.py``) decides when a slot's
buffer is taken away, allocated or installed, and in which order; this room only holds
them, in slot order (``WorkspaceState.slots``'s), and carves views from them
(``_carving.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from .._private import MODE_PROBES, modes_active, outside_modes
from ._carving import Carver
from ._providers import Allocation, SlotAllocator

_function_modes, _dispatch_modes, _transforms = MODE_PROBES


class SlotBuffers:
    """The device buffers of a manager's slots, indexed as ``WorkspaceState.slots``.

    Args:
        device: where buffers live.
        count: number of slots.
        alignment: every buffer's ``data_ptr()`` is a multiple of it.
        allocator: provides each buffer (an adaptor stack, ``_allocators.allocator_stack``).

    Each slot's buffer and its carver are one record, replaced whole (one assignment: an
    interruption leaves either the old record or the new one). A new buffer gets a new
    :class:`~interop._workspace._carving.Carver`, whose ``generation`` no other carver of
    this manager has had: views carved from a carver are of the slot's buffer while that
    carver is the slot's :meth:`current` one (the engine reads it under its lock, carves
    with no lock held, and checks after). Every slot without a buffer shares one carver,
    of generation 0, that serves only empty views (views of no memory, valid whenever
    they are handed out); a buffer's carvers count from 1.
    """

    def __init__(
        self, device: torch.device, count: int, alignment: int, allocator: SlotAllocator
    ) -> None:
        self.device = device
        self.allocator = allocator
        self._alignment = alignment
        self._generations = itertools.count(1)  # a buffer's carver: the next one
        #: The carver of every slot without a buffer (generation 0).
        self.empty = Carver(None, device)
        empty = (None, self.empty)
        #: Per slot, ``(allocation, carver)``: read ``records[index][1]`` for the carver
        #: where a call costs (the engine's miss path), :meth:`current` elsewhere.
        self.records: list[tuple[Allocation | None, Carver]] = [empty] * count

    def current(self, index: int) -> Carver:
        """Slot ``index``'s carver: its buffer's views (none while it has no buffer)."""
        return self.records[index][1]

    def buffer(self, index: int) -> torch.Tensor | None:
        """Slot ``index``'s buffer, ``None`` while it has none."""
        allocation = self.records[index][0]
        return None if allocation is None else allocation.buffer

    def buffers(self) -> list[torch.Tensor | None]:
        """Every slot's buffer, in slot order (a new list)."""
        return [self.buffer(index) for index in range(len(self.records))]

    def owner(self, index: int) -> Any:
        """What owns slot ``index``'s memory (the JAX array for ``"jax"``), or ``None``."""
        allocation = self.records[index][0]
        return None if allocation is None else allocation.owner

    def take(self, index: int) -> torch.Tensor | None:
        """The block slot ``index``'s buffer lies in, which the slot no longer holds (the
        caller drops it; the block keeps the buffer's bytes alive, and whatever else holds
        them holds its storage)."""
        allocation = self.records[index][0]
        self.records[index] = (None, self.empty)
        return None if allocation is None else allocation.block

    def install(self, index: int, allocation: Allocation) -> None:
        """Make ``allocation`` slot ``index``'s buffer."""
        carver = Carver(allocation.block, self.device, allocation.start, next(self._generations))
        self.records[index] = (allocation, carver)

    def allocate(
        self,
        index: int,
        nbytes: int,
        *,
        slot: tuple[int, int] | None = None,
        previous: int = 0,
        in_use: Sequence[torch.Tensor] | None = None,
    ) -> Allocation:
        """A new buffer of ``nbytes`` for slot ``index`` (not installed yet), not overlapping
        the other slots' buffers (nor ``in_use``, when given instead of them).

        Args:
            index: the slot's position.
            nbytes: bytes wanted.
            slot: the ``(ubatch, lane)`` it grows (``None`` for an allocation that is not
                a growth: the old capacity again after a failure).
            previous: the bytes the slot held (for the resize log).
            in_use: the buffers it must not overlap; default: the other slots' buffers.
        """
        if in_use is None:
            in_use = self.others(index) if self.allocator.checks_overlap else ()
        # A buffer is a real tensor, whatever the caller's modes; asked inline first (a
        # growth's call budget, count_growth_calls.py)
        if (_function_modes() or _dispatch_modes() or _transforms() is not None) and modes_active():
            with outside_modes():
                return self.allocate(index, nbytes, slot=slot, previous=previous, in_use=in_use)
        return self.allocator.allocate(
            nbytes, self.device, self._alignment, in_use=in_use, slot=slot, previous=previous
        )

    def allocate_apart(
        self, wanted: Sequence[tuple[int, int, tuple[int, int], int]]
    ) -> dict[int, Allocation]:
        """A new buffer for each ``(index, nbytes, slot, previous)`` of ``wanted`` (not
        installed), none overlapping a buffer another slot keeps nor another new one (a
        callable allocator's growth allocates them all before releasing anything).

        Returns:
            Per slot index, its new buffer.

        Raises:
            AllocatorError: a result that cannot be a buffer (nothing has changed).
        """
        growing = {index for index, _, _, _ in wanted}
        kept = [b for i, b in enumerate(self.buffers()) if b is not None and i not in growing]
        fresh: dict[int, Allocation] = {}
        for index, nbytes, slot, previous in wanted:
            in_use = kept + [allocation.buffer for allocation in fresh.values()]
            fresh[index] = self.allocate(index, nbytes, slot=slot, previous=previous, in_use=in_use)
        return fresh

    def others(self, index: int) -> list[torch.Tensor]:
        """The buffers of every slot but ``index``, which a new buffer must not overlap
        (empty for an allocator that never hands out memory in use)."""
        if not self.allocator.checks_overlap:
            return []
        buffers = self.buffers()
        return [b for i, b in enumerate(buffers) if b is not None and i != index]
