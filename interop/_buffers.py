"""The slots' device buffers: carrying out the growth the core plans, and carving views.

One aligned ``uint8`` buffer per slot. Growth follows the original's order for each slot:
drop the old buffer, empty the accelerator cache, allocate the new one inside
``alloc_context()``. Retired buffers that something still holds are reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast

import torch

from functional_ws import Growth, ViewSpec, WorkspaceState

from ._device import allocate_aligned, empty_device_cache, refuse_growth_during_capture
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
    """

    def __init__(
        self,
        device: torch.device,
        count: int,
        alignment: int,
        alloc_context: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        self.device = device
        self.retired = RetiredBuffers()
        self._alignment = alignment
        self._alloc_context = alloc_context
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._empty: torch.Tensor | None = None

    def buffer(self, index: int) -> torch.Tensor | None:
        """Slot ``index``'s buffer, ``None`` before its first growth."""
        return self._buffers[index]

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
            failed, the state that describes the buffers as they now are (the failed slot
            empty, as the original left it; slots grown before it keep their new buffers)
            and the error to raise after installing it.

        Raises:
            GrowthDuringCaptureError: the current CUDA stream is capturing; nothing changed.
        """
        refuse_growth_during_capture(self.device, *growth[0])
        grown: list[int] = []
        for slot, nbytes in growth:
            index = new.index(slot)
            try:
                self._replace(index, slot, nbytes, released)
            except BaseException as err:  # out of memory, alloc_context failed, interrupted
                return _after_failed_growth(old, new, grown, index), err
            grown.append(index)
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

    def _replace(
        self, index: int, slot: tuple[int, int], nbytes: int, released: Callable[[int], None]
    ) -> None:
        retiring = self._buffers[index]
        self._buffers[index] = None
        released(index)
        if retiring is not None:
            record = self.retired.retire(slot, retiring)
            del retiring
            self.retired.report(record)
        empty_device_cache(self.device)
        with self._alloc_context():
            self._buffers[index] = allocate_aligned(nbytes, self.device, self._alignment)

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
