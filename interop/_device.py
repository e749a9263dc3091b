"""Everything that touches device memory: aligned allocation, cache emptying, capture checks."""

from __future__ import annotations

import torch

from functional_ws import WorkspaceError


class GrowthDuringCaptureError(WorkspaceError, RuntimeError):
    """A workspace would grow while the current CUDA stream is capturing a graph.

    A captured graph keeps raw addresses; growing would free the buffer the graph writes to
    (vLLM #52553). A ``RuntimeError``, like the errors torch raises for operations that are
    not allowed during capture. Reserve the worst case (``reserve``) and ``lock()`` before
    capturing.
    """


def refuse_growth_during_capture(device: torch.device, slot: tuple[int, int], nbytes: int) -> None:
    """Raise :class:`GrowthDuringCaptureError` when ``device``'s current stream is capturing."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return
    if torch.cuda.is_current_stream_capturing():
        raise GrowthDuringCaptureError(
            f"Workspace slot {slot} would grow to {nbytes} bytes while a CUDA graph is being "
            "captured; the graph would keep the address of the freed buffer. Reserve the "
            "worst case (reserve(...)) and lock() before capturing."
        )


def empty_device_cache(device: torch.device) -> None:
    """Give a freed buffer back to the accelerator's caching allocator, where there is one.

    The original called ``torch.accelerator.empty_cache()`` unconditionally, which raises on
    CPU-only torch. Here it runs only for accelerator workspaces, when an accelerator exists.
    """
    if device.type == "cpu":
        return
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "empty_cache"):
        if accelerator.is_available():
            accelerator.empty_cache()
    elif device.type == "cuda" and torch.cuda.is_available():  # torch before 2.6
        torch.cuda.empty_cache()


def allocate_aligned(nbytes: int, device: torch.device, alignment: int) -> torch.Tensor:
    """A ``uint8`` tensor of exactly ``nbytes`` whose ``data_ptr()`` is a multiple of ``alignment``.

    The exact size is tried first: CUDA's caching allocator hands out 256-aligned addresses
    (FACTS.md), so nothing is wasted there and a growth's peak stays at the new size. When
    the address is not aligned (torch's CPU allocator aligns to 64 bytes only), that block
    is released and ``nbytes + alignment`` bytes are allocated; the result is the slice
    starting at the first aligned address, which keeps the whole block alive through its
    storage.

    Example:
        >>> import torch
        >>> buffer = allocate_aligned(1000, torch.device("cpu"), 256)
        >>> buffer.numel(), buffer.data_ptr() % 256
        (1000, 0)
    """
    buffer = torch.empty((nbytes,), dtype=torch.uint8, device=device)
    if buffer.data_ptr() % alignment == 0:
        return buffer
    del buffer
    block = torch.empty((nbytes + alignment,), dtype=torch.uint8, device=device)
    skip = -block.data_ptr() % alignment
    return block[skip : skip + nbytes]
