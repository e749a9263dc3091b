"""The slots' device buffers: carrying out the growth the core plans, and carving views.

One aligned ``uint8`` buffer per slot, from the manager's allocator (``_allocators.py``),
always allocated inside ``alloc_context()``. With the built-in allocators, growth follows the
original's order for each slot: drop the old buffer, empty the accelerator cache, allocate
the new one. A callable allocator's new buffers are all allocated (and validated) first, so
a refused result changes nothing. Retired buffers that something still holds are reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast

import torch

from functional_ws import Growth, ViewSpec, WorkspaceState

from ._allocators import Allocation, SlotAllocator
from ._device import empty_device_cache, refuse_growth_during_capture
from ._diagnostics import caller_origin, debug_enabled, logger
from ._retired import RetiredBuffers

_MB = 1024 * 1024


class SlotBuffers:
    """The device buffers of a manager's slots, indexed as ``WorkspaceState.slots``.

    Args:
        device: where buffers live.
        count: number of slots.
        alignment: every buffer's ``data_ptr()`` is a multiple of it.
        alloc_context: factory of the context each buffer is allocated in.
        allocator: provides each buffer (``SlotAllocator()`` is torch's).
    """

    def __init__(
        self,
        device: torch.device,
        count: int,
        alignment: int,
        alloc_context: Callable[[], AbstractContextManager[Any]],
        allocator: SlotAllocator,
    ) -> None:
        self.device = device
        self.retired = RetiredBuffers()
        self.allocator = allocator
        self._alignment = alignment
        self._alloc_context = alloc_context
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._owners: list[Any] = [None] * count  # what owns each buffer's memory (a jax.Array)
        self._empty: torch.Tensor | None = None

    def buffer(self, index: int) -> torch.Tensor | None:
        """Slot ``index``'s buffer, ``None`` before its first growth."""
        return self._buffers[index]

    def owner(self, index: int) -> Any:
        """What owns slot ``index``'s memory (the JAX array with ``"jax"``), else ``None``."""
        return self._owners[index]

    def grow(
        self,
        old: WorkspaceState,
        new: WorkspaceState,
        growth: Growth,
        released: Callable[[int], None],
    ) -> tuple[WorkspaceState, BaseException | None]:
        """Reallocate the buffers ``growth`` names, going from state ``old`` to ``new``.

        Args:
            old: the state before the transition.
            new: the state the core planned.
            growth: ``((slot, nbytes), ...)`` from the core.
            released: called with a slot's index once its old buffer is dropped, before
                anything is allocated: the caller drops its own references (memoised views)
                there, so that the retired-buffer report sees only outside holders.

        Returns:
            ``(state, error)``: the state to install and ``None``, or, when an allocation
            failed, the state that describes the buffers as they now are and the error to
            raise after installing it. Releasing first (the built-ins), the failed slot is
            empty, as the original left it, and slots grown before it keep their new
            buffers; allocating first (a callable), that state is ``old``: nothing changed.

        Raises:
            GrowthDuringCaptureError: the current CUDA stream is capturing; nothing changed.
        """
        refuse_growth_during_capture(self.device, *growth[0])
        if self.allocator.releases_first:
            grown: list[int] = []
            for slot, nbytes in growth:
                index = new.index(slot)
                try:
                    self._release(index, slot, released)
                    self._install(index, self._allocate(nbytes))
                except BaseException as err:  # out of memory, alloc_context failed, interrupted
                    return _after_failed_growth(old, new, grown, index), err
                grown.append(index)
        else:
            try:
                fresh = [self._allocate(nbytes) for _, nbytes in growth]
            except BaseException as err:  # refused or failed: nothing has changed
                return old, err
            for (slot, _), allocation in zip(growth, fresh, strict=True):
                index = new.index(slot)
                self._release(index, slot, released)
                self._install(index, allocation)
        if debug_enabled():
            origin = caller_origin()
            for slot, nbytes in growth:
                logger.info(
                    "[WORKSPACE DEBUG] Resized workspace from '%s': %.2f MB -> %.2f MB "
                    "(ubatch %d, lane %d)",
                    origin,
                    old.slots[new.index(slot)].capacity / _MB,
                    nbytes / _MB,
                    *slot,
                )
        return new, None

    def _release(self, index: int, slot: tuple[int, int], released: Callable[[int], None]) -> None:
        """Drop slot ``index``'s buffer (reporting it if something else holds it)."""
        retiring = self._buffers[index]
        self._buffers[index] = self._owners[index] = None
        released(index)
        if retiring is not None:
            record = self.retired.retire(slot, retiring)
            del retiring
            self.retired.report(record)
        empty_device_cache(self.device)

    def _allocate(self, nbytes: int) -> Allocation:
        with self._alloc_context():
            return self.allocator.allocate(nbytes, self.device, self._alignment)

    def _install(self, index: int, allocation: Allocation) -> None:
        self._buffers[index] = allocation.buffer
        self._owners[index] = allocation.owner

    def carve(self, index: int, offset: int, spec: ViewSpec) -> torch.Tensor:
        """The view the original built (slice, ``view(dtype)``, ``view(shape)``), to memoise.

        Carved outside inference mode whatever the caller's mode: a view carved inside it
        would not share the buffer's version counter, and every view made from it later
        would lose autograd's in-place checks. (A buffer allocated in inference mode is an
        inference tensor, and so are its views, as in the original.)
        """
        buffer = self._buffers[index]
        if buffer is None:  # a slot never grown serves only empty views
            if self._empty is None:
                self._empty = torch.empty((0,), dtype=torch.uint8, device=self.device)
            buffer = self._empty
        with torch.inference_mode(False):
            piece = buffer[offset : offset + spec.nbytes]
            return piece.view(cast(torch.dtype, spec.dtype)).view(spec.shape)


def _after_failed_growth(
    old: WorkspaceState, new: WorkspaceState, grown: list[int], failed: int
) -> WorkspaceState:
    """The state after a growth that failed while (re)allocating slot ``failed``.

    Records facts, decides nothing: slots in ``grown`` hold their new buffers; the failed
    slot holds none (its old buffer was dropped first), so capacity 0 and no retained span;
    every other slot is as before.
    """
    slots = list(old.slots)
    for i in grown:
        slots[i] = new.slots[i]
    slots[failed] = dataclasses.replace(old.slots[failed], capacity=0, retained=None)
    return dataclasses.replace(old, slots=tuple(slots))
