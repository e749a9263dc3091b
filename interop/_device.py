"""Everything that touches device memory: devices, aligned allocation, cache emptying, capture.

Devices are compared through :func:`normalize_device`, so ``"cpu"`` and ``"cpu:0"`` (and
``"cuda"`` and ``"cuda:<current index>"``) are one device everywhere.

Aligned blocks (:func:`aligned_block`): a growth asks its provider once. Where the provider's
own alignment is known and smaller than the workspace's (torch's and JAX's CPU allocators
give 64-byte aligned addresses), the request is ``nbytes + alignment - provider_alignment``
bytes, always enough to start at an aligned address; where it is at least the workspace's
(CUDA's caching allocator gives 512), the exact size. Only a provider that breaks its known
alignment, or one whose alignment is unknown (a user's callable), is asked a second time, and
the first block is dropped before that.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from ._errors import DeviceUnavailableError, GrowthDuringCaptureError, UnknownDeviceError

_CPU = torch.device("cpu")


def normalize_device(device: torch.device | str | int) -> torch.device:
    """``device`` as one canonical ``torch.device``, refused where this process cannot use it.

    ``cpu`` and ``cpu:N`` become ``cpu`` (torch reports CPU tensors as plain ``cpu``); an
    accelerator without an index (``cuda``) gets the current index (``cuda:0``), so equal
    devices compare equal however they were spelled.

    Args:
        device: a ``torch.device``, a string such as ``"cpu"`` or ``"cuda:1"``, or an
            accelerator index (as ``torch.device`` takes it).

    Returns:
        The canonical ``torch.device``.

    Raises:
        TypeError: ``device`` is none of the above.
        UnknownDeviceError: (``RuntimeError``, as ``torch.device`` raises) a string torch
            cannot parse or a device type torch does not know.
        DeviceUnavailableError: (``RuntimeError``) an accelerator this process cannot use:
            this torch build has no CUDA, no device is visible, or the index is past the
            device count.

    Example:
        >>> normalize_device("cpu:0")
        device(type='cpu')
        >>> normalize_device("cpu:0") == normalize_device(torch.device("cpu"))
        True
        >>> normalize_device("tpu:0")
        Traceback (most recent call last):
        ...
        interop.errors.UnknownDeviceError: device='tpu:0' is not a device torch knows: ...
    """
    if isinstance(device, torch.device):
        parsed = device
    elif isinstance(device, str) or (type(device) is int and device >= 0):
        try:
            parsed = torch.device(device)
        except RuntimeError as err:
            if isinstance(device, int):
                raise DeviceUnavailableError(
                    f"device={device!r} names an accelerator by index, but this process "
                    f"can use none: {err}"
                ) from None
            raise UnknownDeviceError(
                f"device={device!r} is not a device torch knows: {err} Pass 'cpu', "
                "'cuda' or 'cuda:<index>' (or another type your torch build lists)."
            ) from None
    else:
        raise TypeError(
            f"device must be a torch.device, a string such as 'cpu' or 'cuda:0', or a "
            f"non-negative accelerator index, got {device!r} ({type(device).__name__})."
        )
    if parsed.type == "cpu":
        return _CPU
    return _accelerator(parsed, device)


def _accelerator(parsed: torch.device, given: object) -> torch.device:
    """``parsed`` with its index filled in, after checking that this process can use it."""
    backend = getattr(torch, parsed.type, None)  # torch.cuda, torch.xpu, torch.mps...
    is_available = getattr(backend, "is_available", None)
    if is_available is None:  # meta, or a type without a runtime module: nothing to check
        return parsed
    if not is_available():
        without_cuda = parsed.type == "cuda" and not torch.backends.cuda.is_built()  # type: ignore[no-untyped-call]
        why = (
            "this torch build has no CUDA (torch.version.cuda is None)"
            if without_cuda
            else f"torch.{parsed.type}.is_available() is False (no device visible to this "
            "process; check the driver and CUDA_VISIBLE_DEVICES)"
        )
        raise DeviceUnavailableError(
            f"device={given!r} cannot be used: {why}. Use 'cpu', or install a torch build "
            f"for {parsed.type} and run where a device is visible."
        )
    count_devices = getattr(backend, "device_count", None)
    count = int(count_devices()) if count_devices is not None else None
    if parsed.index is None:
        current = getattr(backend, "current_device", None)
        return torch.device(parsed.type, int(current()) if current is not None else 0)
    if count is not None and parsed.index >= count:
        raise DeviceUnavailableError(
            f"device={given!r} cannot be used: this process sees {count} {parsed.type} "
            f"device{'s' if count != 1 else ''} (indices 0 to {count - 1})."
        )
    return parsed


def device_memory(device: torch.device) -> int | None:
    """The total memory of ``device`` in bytes (a slot can never hold more), or ``None``.

    CUDA: the device's total memory; CPU: the machine's physical memory. The façade gives
    it to the core as the capacity limit (``initial_state(max_capacity=...)``), which
    refuses a growth above it before anything is released.
    """
    if device.type == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device() if device.index is None else device.index
        return int(torch.cuda.get_device_properties(index).total_memory)
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):  # not a POSIX system
            return None
    return None


def same_device(got: torch.device, wanted: torch.device) -> bool:
    """Whether two devices are one once normalised (``cpu`` is ``cpu:0``).

    Example:
        >>> same_device(torch.device("cpu"), torch.device("cpu:0"))
        True
    """
    if got == wanted:
        return True
    return normalize_device(got) == normalize_device(wanted)


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


#: The alignment torch's allocator guarantees per device type: 64 bytes on CPU (c10's
#: ``gAlignment``), 512 on CUDA (the caching allocator rounds every block to 512).
TORCH_ALIGNMENT = {"cpu": 64, "cuda": 512}


def torch_block(nbytes: int, device: torch.device) -> torch.Tensor:
    """``nbytes`` uninitialised bytes from torch's allocator on ``device`` (a ``uint8`` tensor)."""
    return torch.empty((nbytes,), dtype=torch.uint8, device=device)


def allocate_aligned(nbytes: int, device: torch.device, alignment: int) -> torch.Tensor:
    """A ``uint8`` tensor of exactly ``nbytes`` whose ``data_ptr()`` is a multiple of ``alignment``.

    One call to torch's allocator (:func:`torch_block`), sized by what torch guarantees on
    ``device`` (:data:`TORCH_ALIGNMENT`), through :func:`aligned_block`.

    Example:
        >>> import torch
        >>> buffer = allocate_aligned(1000, torch.device("cpu"), 256)
        >>> buffer.numel(), buffer.data_ptr() % 256
        (1000, 0)
    """
    return aligned_block(
        lambda n: torch_block(n, device),
        nbytes,
        alignment,
        provider_alignment=TORCH_ALIGNMENT.get(device.type),
    )


#: The largest itemsize of a torch dtype (complex128's): every view starts at a multiple of
#: the alignment, and torch needs a view's offset in its storage to be a multiple of its
#: itemsize.
LARGEST_ITEMSIZE = max(d.itemsize for d in vars(torch).values() if isinstance(d, torch.dtype))


def storage_from_start(block: torch.Tensor) -> torch.Tensor:
    """``block`` (1-D ``uint8``) through a storage that starts at its first byte, zero-copy.

    torch views bytes as another dtype only where the view's offset in its storage is a
    multiple of that dtype's itemsize: a buffer at an aligned address, but at an odd byte of
    its storage (a pool's arena sliced anywhere), serves no wider dtype. A slice of the
    storage (a new storage over the same bytes, which keeps the old one alive) starts at the
    buffer's first byte, so a view at an aligned offset of the buffer is at an aligned
    offset of its storage.

    Example:
        >>> import torch
        >>> arena = torch.zeros(64, dtype=torch.uint8)
        >>> rebased = storage_from_start(arena[3:35])
        >>> rebased.storage_offset(), rebased.data_ptr() - arena.data_ptr(), rebased.numel()
        (0, 3, 32)
        >>> rebased[16:].view(torch.complex128).shape
        torch.Size([1])
    """
    offset = block.storage_offset()
    storage = block.untyped_storage()[offset : offset + block.numel()]
    return torch.empty((0,), dtype=torch.uint8, device=block.device).set_(storage)


def address_alignment(address: int) -> int:
    """The largest power of two that divides ``address`` (4096 at most, for an address of 0).

    Example:
        >>> address_alignment(192), address_alignment(1 << 20)
        (64, 4096)
    """
    lowest = address & -address
    return 4096 if lowest == 0 or lowest > 4096 else lowest


def aligned_block(
    allocate: Callable[[int], torch.Tensor],
    nbytes: int,
    alignment: int,
    *,
    provider_alignment: int | None = None,
) -> torch.Tensor:
    """``nbytes`` bytes from ``allocate`` starting at a multiple of ``alignment``.

    The size asked for depends on what the provider guarantees (``provider_alignment``):

    - at least ``alignment`` (CUDA's caching allocator): exactly ``nbytes``, nothing wasted;
    - less (torch's and JAX's CPU allocators, 64): ``nbytes + alignment -
      provider_alignment``, which always holds an aligned run of ``nbytes``;
    - unknown (``None``, a user's callable): exactly ``nbytes``, in case the block is
      aligned anyway.

    Only when the block cannot hold an aligned run of ``nbytes`` (the provider broke its
    alignment, or an unknown one was unaligned) is ``allocate`` called again, for ``nbytes +
    alignment`` bytes, which always suffices; the first block is dropped before that call, so
    no two new blocks are ever held at once.

    Args:
        allocate: returns a 1-D contiguous ``uint8`` tensor of at least the bytes asked for.
        nbytes: bytes wanted.
        alignment: a power of two.
        provider_alignment: the power of two that ``allocate``'s addresses are known to be
            multiples of, or ``None`` when unknown.

    Returns:
        A ``uint8`` tensor of exactly ``nbytes`` whose ``data_ptr()`` is a multiple of
        ``alignment`` (a slice of what ``allocate`` returned, which keeps the whole block
        alive through its storage).

    Example:
        >>> import torch
        >>> calls = []
        >>> def pool(n):  # addresses 64 bytes past a 256-byte boundary
        ...     calls.append(n)
        ...     block = torch.empty(n + 512, dtype=torch.uint8)
        ...     start = -block.data_ptr() % 256 + 64
        ...     return block[start : start + n]
        >>> block = aligned_block(pool, 100, 256, provider_alignment=64)
        >>> block.numel(), block.data_ptr() % 256, calls
        (100, 0, [292])
    """
    size = nbytes
    if provider_alignment is not None and provider_alignment < alignment:
        size += alignment - provider_alignment
    first = allocate(size)
    block = _aligned_run(first, nbytes, alignment)
    if block is not None:
        return block
    del first  # the block cannot serve: let it go before asking for the next one
    second = allocate(nbytes + alignment)
    skip = -second.data_ptr() % alignment
    return second[skip : skip + nbytes]


def _aligned_run(block: torch.Tensor, nbytes: int, alignment: int) -> torch.Tensor | None:
    """The first ``nbytes`` of ``block`` that start at a multiple of ``alignment``, if any."""
    skip = -block.data_ptr() % alignment
    if skip + nbytes > block.numel():
        return None
    return block if skip == 0 and block.numel() == nbytes else block[skip : skip + nbytes]
