"""Carving typed views out of a slot's bytes: aliases, ``as_strided``, fresh views.

A :class:`Carver` serves one buffer, which lies in a block (torch's CPU block is larger
than the buffer: the allocator aligns it by starting the buffer past the block's start). It
sees the block through one typed alias per dtype (every whole element of the block, made on
first use), so a view at a byte offset of the buffer is one ``torch.as_strided`` over the
alias; where no alias can be made (a dtype torch cannot view bytes as), the original's
slice, ``view(dtype)`` and ``view(shape)`` serve instead. Every provider hands over a
buffer at a multiple of the largest itemsize in its storage (a callable's block at an odd
byte is rebased: ``_providers.py``), so every dtype has an alias; a slice at an odd byte
of its storage would not serve a wider dtype either.

Views are carved outside inference mode whatever the caller's mode: a view carved inside it
would not share the buffer's version counter, and every view made from it later would lose
autograd's in-place checks. (A buffer allocated in inference mode is an inference tensor,
and so are its views, as in the original.)

Carved views share a base (the alias): they are memoised, never handed out. A caller gets
``carved.view(dtype)`` of each (:func:`fresh`, :func:`view_maker`): a new tensor
over the same memory with no view relation to the alias (``view(dtype)`` records none), as
the original's result had; so what a caller does to it (``resize_``, ``set_``,
``requires_grad_``, an in-place op under autograd) never reaches the alias or another
call's views. ``tests/workspace/test_carving.py`` checks every such use against the original's
views; ``benchmarks/bench_hot_path.py`` measures what a view costs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .._private import MODE_PROBES, modes_active, outside_modes

_as_strided = torch.as_strided
_inference_mode_enabled = torch.is_inference_mode_enabled
_view = torch.Tensor.view
_function_modes, _dispatch_modes, _transforms = MODE_PROBES
_UNKNOWN = object()  # an alias not made yet (``None`` is an alias that cannot be made)


class Carver:
    """The views of one buffer: the bytes of ``block`` from ``start`` on (``None``: a slot
    without a buffer, which serves only empty views).

    Args:
        block: a 1-D ``uint8`` tensor holding the buffer, or ``None``.
        device: where an empty slot's empty views live.
        start: the buffer's first byte in ``block`` (offsets are the buffer's).
        generation: which of its slot's buffers this is (``_buffers.SlotBuffers`` counts
            them; a memo entry records it).

    Example:
        >>> import torch
        >>> carver = Carver(torch.zeros(1024, dtype=torch.uint8), torch.device("cpu"))
        >>> a, b = carver.carve((0, 256), (((2, 3), torch.float32), ((4,), torch.int8)))
        >>> a.shape, b.dtype, b.data_ptr() - a.data_ptr()
        (torch.Size([2, 3]), torch.int8, 256)
    """

    __slots__ = ("_aliases", "block", "device", "generation", "start")

    def __init__(
        self,
        block: torch.Tensor | None,
        device: torch.device,
        start: int = 0,
        generation: int = 0,
    ) -> None:
        self.block = block
        self.device = device
        self.start = start
        self.generation = generation
        # Per dtype: the block seen as that dtype, the element where the buffer starts in
        # its storage, and the itemsize; None where no alias can be made.
        self._aliases: dict[Any, tuple[torch.Tensor, int, int] | None] = {}

    def carve(
        self, offsets: Sequence[int], requests: Sequence[tuple[Any, Any]]
    ) -> list[torch.Tensor]:
        """The views of ``requests`` (canonical ``(shape, dtype)`` pairs) at byte
        ``offsets`` of the buffer: one ``as_strided`` each where an alias serves.
        """
        if _inference_mode_enabled():
            with torch.inference_mode(False):
                return self.carve(offsets, requests)
        aliases = self._aliases
        if len(requests) == 1:  # the usual single view, without the loop
            ((shape, dtype),) = requests
            alias: Any = aliases.get(dtype, _UNKNOWN)
            if alias is _UNKNOWN:
                alias = self._alias(dtype)
            offset = offsets[0]
            if alias is not None and not offset % alias[2]:
                start = alias[1] + offset // alias[2]
                # contiguous_strides, inlined for the shapes the miss path sees most: a call
                # saved on bench_workloads' "miss, 1 view" (tests/workspace/test_carving.py
                # pins the strides to torch's)
                rank = len(shape)
                if rank == 2:
                    strides: tuple[int, ...] = (shape[1] or 1, 1)
                elif rank == 1:
                    strides = (1,)
                else:
                    strides = contiguous_strides(shape)
                return [_as_strided(alias[0], shape, strides, start)]
        views = []
        for offset, (shape, dtype) in zip(offsets, requests, strict=False):  # equal lengths
            alias = aliases.get(dtype, _UNKNOWN)
            if alias is _UNKNOWN:
                alias = self._alias(dtype)
            if alias is None or offset % alias[2]:
                views.append(self._slice(offset, shape, dtype))
                continue
            views.append(
                _as_strided(
                    alias[0], shape, contiguous_strides(shape), alias[1] + offset // alias[2]
                )
            )
        return views

    def _slice(self, offset: int, shape: tuple[int, ...], dtype: Any) -> torch.Tensor:
        """The original's way: slice the bytes, view them as the dtype, then the shape."""
        block = self.block
        if block is None:  # a slot without a buffer serves only empty views
            block = torch.empty((0,), dtype=torch.uint8, device=self.device)
        nbytes = dtype.itemsize
        for dim in shape:
            nbytes *= dim
        offset += self.start
        return block[offset : offset + nbytes].view(dtype).view(shape)

    def _alias(self, dtype: Any) -> tuple[torch.Tensor, int, int] | None:
        """The block seen as ``dtype``, the storage offset (in elements) of the buffer's
        first byte, and the itemsize; ``None`` where the buffer's offset in its storage is
        not a multiple of the itemsize (then views are sliced instead). Kept: made as a
        real tensor, whatever the caller's torch modes."""
        # Asked inline first: a growth's call budget (count_growth_calls.py)
        if (_function_modes() or _dispatch_modes() or _transforms() is not None) and modes_active():
            with outside_modes():
                return self._alias(dtype)
        block = self.block
        alias = None
        if block is not None:
            itemsize = dtype.itemsize
            offset = int(block.storage_offset())
            start, remainder = divmod(self.start, itemsize)
            if offset % itemsize or remainder:
                alias = None
            elif dtype is torch.uint8:  # the block itself
                alias = (block, offset + start, 1)
            else:
                numel = block.numel()
                usable = numel - numel % itemsize
                try:
                    typed = (block if usable == numel else block[:usable]).view(dtype)
                    alias = (typed, int(typed.storage_offset()) + start, itemsize)
                except RuntimeError:  # a dtype torch cannot view bytes as: slice instead
                    alias = None
        self._aliases[dtype] = alias
        return alias


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (a zero dim counts as one).

    Example:
        >>> contiguous_strides((2, 3, 4)), contiguous_strides((5, 0, 2))
        ((12, 4, 1), (2, 2, 1))
    """
    if len(shape) == 1:
        return (1,)
    if len(shape) == 2:
        return (shape[1] or 1, 1)
    strides = [1] * len(shape)
    step = 1
    for i in range(len(shape) - 1, 0, -1):
        step *= max(shape[i], 1)
        strides[i - 1] = step
    return tuple(strides)


def fresh(views: Sequence[torch.Tensor], requests: Sequence[tuple[Any, Any]]) -> list[torch.Tensor]:
    """A new tensor over each of ``views``, carved for ``requests`` (``view.view(dtype)``):
    no view relation to the shared alias, so what a caller does to it reaches no other
    call's views. (Each dtype is read from its request: cheaper than the view's own.)"""
    # The usual sizes unrolled (a comprehension is a call): bench_workloads' "miss, 1 view"
    # and "miss, 3 views".
    if len(views) == 1:
        (a,), ((_, da),) = views, requests
        return [a.view(da)]
    if len(views) == 3:
        (a, b, c), ((_, da), (_, db), (_, dc)) = views, requests
        return [a.view(da), b.view(db), c.view(dc)]
    return [view.view(dtype) for view, (_, dtype) in zip(views, requests, strict=True)]


def view_maker(
    carved: Sequence[torch.Tensor], requests: Sequence[tuple[Any, Any]]
) -> Callable[[], list[torch.Tensor]]:
    """A function of no arguments returning fresh views of ``carved`` (carved for
    ``requests``), one per tensor (a memo entry keeps it; unrolled for the usual sizes).

    Example:
        >>> import torch
        >>> base = torch.zeros(8, dtype=torch.uint8)
        >>> carved = [base[:4].view(torch.int32), base[4:]]
        >>> make = view_maker(carved, [((1,), torch.int32), ((4,), torch.uint8)])
        >>> first, second = make()
        >>> first.dtype, second.shape, make()[0] is first
        (torch.int32, torch.Size([4]), False)
    """
    # The usual sizes unrolled: bench_hot_path's "get_simultaneous x3" (x1 is viewed by the
    # façade itself, from the entry's one view).
    if len(carved) == 1:
        (a,), ((_, da),) = carved, requests
        return lambda: [a.view(da)]
    if len(carved) == 2:
        (a, b), ((_, da), (_, db)) = carved, requests
        return lambda: [a.view(da), b.view(db)]
    if len(carved) == 3:
        (a, b, c), ((_, da), (_, db), (_, dc)) = carved, requests
        return lambda: [a.view(da), b.view(db), c.view(dc)]
    views = tuple(carved)
    dtypes = tuple(dtype for _, dtype in requests)
    return lambda: list(map(_view, views, dtypes))
