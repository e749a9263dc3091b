"""Everything that touches device memory: aligned allocation, cache emptying, capture checks."""

from __future__ import annotations

from collections.abc import Callable

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

    torch's own allocator through :func:`aligned_block`.

    Example:
        >>> import torch
        >>> buffer = allocate_aligned(1000, torch.device("cpu"), 256)
        >>> buffer.numel(), buffer.data_ptr() % 256
        (1000, 0)
    """
    return aligned_block(
        lambda n: torch.empty((n,), dtype=torch.uint8, device=device), nbytes, alignment
    )


def aligned_block(
    allocate: Callable[[int], torch.Tensor], nbytes: int, alignment: int
) -> torch.Tensor:
    """``nbytes`` bytes from ``allocate`` starting at a multiple of ``alignment``.

    The exact size is tried first: CUDA's caching allocator hands out 256-aligned addresses
    (FACTS.md), so nothing is wasted there and a growth's peak stays at the new size. When
    the address is not aligned (torch's and JAX's CPU allocators align to 64 bytes only),
    that block is released and ``nbytes + alignment`` bytes are allocated; the result is the
    slice starting at the first aligned address, which keeps the whole block alive through
    its storage.

    Args:
        allocate: returns a 1-D contiguous ``uint8`` tensor of at least the bytes asked for.
        nbytes: bytes wanted.
        alignment: a power of two.

    Returns:
        A ``uint8`` tensor of exactly ``nbytes`` whose ``data_ptr()`` is a multiple of
        ``alignment`` (a slice of what ``allocate`` returned).

    Example:
        >>> import torch
        >>> block = aligned_block(lambda n: torch.empty(n + 64, dtype=torch.uint8)[64:], 100, 256)
        >>> block.numel(), block.data_ptr() % 256
        (100, 0)
    """
    buffer = allocate(nbytes)
    if buffer.data_ptr() % alignment == 0:
        return buffer if buffer.numel() == nbytes else buffer[:nbytes]
    del buffer
    block = allocate(nbytes + alignment)
    skip = -block.data_ptr() % alignment
    return block[skip : skip + nbytes]
