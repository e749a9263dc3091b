"""Who provides each slot's bytes: torch, JAX, or the caller's pool (tiny adapters, as RMM's).

``WorkspaceManager(..., allocator=...)`` takes ``"torch"`` (the default), ``"jax"`` or a
callable ``allocator(nbytes, device) -> torch.Tensor``. Each is wrapped here in an adapter
with one method, :meth:`SlotAllocator.allocate`, that returns an :class:`Allocation`: a
``uint8`` tensor of exactly the bytes asked for whose address is a multiple of the
alignment, and the object that owns the memory (the JAX array for ``"jax"``), which the
slot keeps for as long as the buffer is its own.

One allocation per growth: torch's and JAX's CPU allocators align to 64 bytes, so they are
asked for ``nbytes + alignment - 64`` bytes up front (exactly ``nbytes`` on CUDA, whose
allocators align to 256 or more); a callable is asked for exactly ``nbytes`` until one of
its addresses shows how it aligns, and for what that alignment needs from then on
(:func:`interop._device.aligned_block`). A retry, when one is needed, drops the first block
(and with ``"jax"`` the first array) before asking for the next.

Every result of JAX or of a callable is validated (a ``torch.Tensor``, ``uint8``, neither
nested nor sparse, one dimension, no negative bit, at least the bytes asked for, on the
workspace's device, contiguous, and not overlapping the buffers other slots are using)
before the manager uses it, so a pool that hands back the wrong thing is refused with an
:class:`AllocatorError` naming the allocator and the value. A callable's result is kept
through what DLPack exports of it (:func:`own_storage`), and that is checked too: a tensor
subclass may export other bytes than its ``data_ptr()`` says.

Any byte address. A pool that slices an arena anywhere hands out blocks whose storage
starts at that byte (DLPack's export starts a storage at the block); the buffer then starts
at the first aligned address, which may be at an odd byte of its storage, where torch views
no wider dtype. Such a buffer is seen through a storage that starts at its first byte
(:func:`interop._device.storage_from_start`, zero-copy), so every dtype is served, or,
where its storage cannot be sliced, refused before anything changes
(:class:`AllocationStorageOffsetError`).

The order of release and allocation. The built-ins release a slot's old buffer first and
then allocate (the original's order, which keeps a growth's peak at the new size). A
callable's buffers are allocated first, every growing slot's, and only then are the old ones
released: so a refused or failed allocation changes nothing (state, buffers and retained
bytes stay as they were), at the cost of a peak of old plus new during the growth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import _device
from .._device import (
    LARGEST_ITEMSIZE,
    TORCH_ALIGNMENT,
    address_alignment,
    aligned_block,
    allocate_aligned,
    same_device,
    storage_from_start,
)
from .._errors import (
    AllocationDeviceError,
    AllocationDtypeError,
    AllocationLayoutError,
    AllocationNegativeBitError,
    AllocationNotStridedError,
    AllocationNotTensorError,
    AllocationOverlapError,
    AllocationShapeError,
    AllocationSizeError,
    AllocationStorageOffsetError,
    AllocatorError,
)
from .._private import is_fake_tensor, modes_active, outside_modes

#: A user allocator: ``allocator(nbytes, device)`` returns a 1-D ``uint8`` tensor of at least
#: ``nbytes`` bytes on ``device``.
AllocatorFunction = Callable[[int, torch.device], torch.Tensor]
#: The buffers a new one must not overlap (the other slots' current ones; ``None``: no buffer).
InUse = Sequence[torch.Tensor | None]


class Allocation:
    """A slot's buffer: the block it lies in, where in it, and what owns its memory.

    torch's CPU allocator aligns to 64 bytes, so its block is larger than the buffer and the
    buffer starts past the block's start; the tensor of exactly the buffer's bytes is a
    slice of the block, which costs as much as the block's allocation (about a microsecond
    on CPU), and a growth does not need it: views are carved from the block
    (:class:`interop._workspace._carving.Carver`), so :attr:`buffer` makes it when first asked.

    Args:
        block: a 1-D ``uint8`` tensor holding the buffer's bytes.
        nbytes: the buffer's size.
        start: where the buffer begins in ``block`` (its address a multiple of the
            alignment).
        owner: the object that must live as long as the buffer is the slot's (the JAX array
            for ``"jax"``); ``None`` where the tensor owns its memory.

    Example:
        >>> import torch
        >>> block = torch.empty(1024, dtype=torch.uint8)
        >>> allocation = Allocation(block, 512, start=256)
        >>> allocation.buffer.numel(), allocation.buffer.data_ptr() - block.data_ptr()
        (512, 256)
        >>> allocation.buffer is allocation.buffer, Allocation(block, 1024).buffer is block
        (True, True)
    """

    __slots__ = ("_buffer", "block", "nbytes", "owner", "start")

    def __init__(self, block: torch.Tensor, nbytes: int, start: int = 0, owner: Any = None) -> None:
        self.block = block
        self.nbytes = nbytes
        self.start = start
        self.owner = owner
        self._buffer: torch.Tensor | None = None

    @property
    def buffer(self) -> torch.Tensor:
        """The buffer: ``uint8``, 1-D, exactly :attr:`nbytes`, its address aligned (the
        block itself where it is exactly that; made once)."""
        buffer = self._buffer
        if buffer is None:
            block, start, nbytes = self.block, self.start, self.nbytes
            if not (start == 0 and block.numel() == nbytes):
                if modes_active():  # kept: a real tensor, whatever the caller's modes
                    with outside_modes():
                        return self.buffer
                block = block[start : start + nbytes]
            buffer = self._buffer = block
        return buffer

    def __repr__(self) -> str:
        return f"Allocation(nbytes={self.nbytes}, start={self.start}, owner={self.owner!r})"


class SlotAllocator:
    """The adapter interface: a name for the statistics and one allocation method.

    Attributes:
        name: what :meth:`WorkspaceManager.stats` reports (``"torch"``, ``"jax"``, or the
            callable's qualified name).
        checks_overlap: whether results are checked against the buffers other slots keep
            (a user's pool may hand out memory in use; torch's and JAX's allocators never do,
            so the built-ins skip the check).
        releases_first: whether a growth releases the old buffer before allocating the new
            one (the original's order); otherwise it allocates every new buffer first.
    """

    name: str = "torch"
    releases_first: bool = True
    checks_overlap: bool = False
    #: What is queued to :meth:`report` (a provider queues nothing; the adaptors share a
    #: list, ``_allocators.Adaptor.pending``).
    pending: Sequence[Any] = ()

    def allocate(
        self,
        nbytes: int,
        device: torch.device,
        alignment: int,
        *,
        in_use: InUse = (),
        slot: tuple[int, int] | None = None,
        previous: int = 0,
    ) -> Allocation:
        """A buffer of exactly ``nbytes`` on ``device`` at a multiple of ``alignment``.

        Args:
            nbytes: bytes wanted.
            device: the workspace's device.
            alignment: a power of two.
            in_use: buffers the new one must not overlap (torch's allocator never hands
                out memory in use, so the built-in ``"torch"`` does not check).
            slot: the ``(ubatch, lane)`` that grows, for the adaptors (``None``: a buffer
                allocated again after a failed growth, which is not a growth).
            previous: the bytes the slot held before (for the resize log).

        Returns:
            The :class:`Allocation`, from one call to the provider where its alignment
            is known.

        Raises:
            AllocatorError: the provider's result is not a usable buffer.

        Example:
            >>> import torch
            >>> allocation = SlotAllocator().allocate(1000, torch.device("cpu"), 256)
            >>> allocation.buffer.numel(), allocation.buffer.data_ptr() % 256
            (1000, 0)
        """
        # allocate_aligned, unrolled for torch (a growth's path is the original's plus this):
        # one block sized by what torch guarantees, sliced to the first aligned address.
        provider = TORCH_ALIGNMENT.get(device.type)
        size = (
            nbytes + alignment - provider
            if provider is not None and provider < alignment
            else nbytes
        )
        block = _device.torch_block(size, device)  # looked up here: tests count the calls
        skip = -block.data_ptr() % alignment
        if skip + nbytes > size:  # torch broke its alignment: the general way
            del block
            return Allocation(allocate_aligned(nbytes, device, alignment), nbytes)
        return Allocation(block, nbytes, skip)  # the exact slice made when asked for

    def release(self, slot: tuple[int, int], buffer: torch.Tensor) -> None:
        """``buffer``, slot ``slot``'s old one, is being dropped (the manager holds no other
        reference to it; nothing to do for a plain provider)."""

    def report(self) -> None:
        """Write what the adaptors queued (logging runs handlers: called with no lock held)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class FunctionAllocator(SlotAllocator):
    """A user's ``allocator(nbytes, device) -> torch.Tensor``, its results validated.

    Attributes:
        provider_alignment: the largest power of two every address it returned so far is a
            multiple of (``None`` before its first result); it sizes the next requests.
    """

    releases_first = False
    checks_overlap = True

    def __init__(self, function: AllocatorFunction) -> None:
        self.function = function
        self.name = getattr(function, "__qualname__", None) or type(function).__name__
        self.provider_alignment: int | None = None

    def allocate(
        self,
        nbytes: int,
        device: torch.device,
        alignment: int,
        *,
        in_use: InUse = (),
        slot: tuple[int, int] | None = None,
        previous: int = 0,
    ) -> Allocation:
        def raw(n: int) -> torch.Tensor:
            result = check_allocation(self.function(n, device), n, device, self, in_use=in_use)
            block = own_storage(result)
            if block is not result:  # the slot keeps what DLPack exported: check that
                self._check_export(block, result, n, device, in_use)
            seen = address_alignment(block.data_ptr())
            if self.provider_alignment is None or seen < self.provider_alignment:
                self.provider_alignment = seen
            return block

        block = aligned_block(raw, nbytes, alignment, provider_alignment=self.provider_alignment)
        if block.storage_offset() % LARGEST_ITEMSIZE:  # an arena sliced at an odd byte
            block = self._from_start(block, nbytes, device)
        return Allocation(block, nbytes)

    def _check_export(
        self,
        block: torch.Tensor,
        result: torch.Tensor,
        nbytes: int,
        device: torch.device,
        in_use: InUse,
    ) -> None:
        """Check ``block``, what DLPack exported of ``result``, as the slot's buffer: a
        tensor subclass may export other bytes than its ``data_ptr()`` says."""
        try:
            check_allocation(block, nbytes, device, self, in_use=in_use)
        except AllocatorError as err:
            raise type(err)(
                f"{err} (These are the bytes its __dlpack__ exports, which the workspace would "
                f"keep; its data_ptr() says {result.data_ptr():#x}.)"
            ) from None

    def _from_start(self, block: torch.Tensor, nbytes: int, device: torch.device) -> torch.Tensor:
        """``block`` through a storage starting at its first byte (:func:`storage_from_start`),
        or refused where its storage cannot be sliced so."""
        try:
            rebased = storage_from_start(block)
        except (RuntimeError, TypeError, NotImplementedError):
            rebased = None
        if rebased is None or rebased.data_ptr() != block.data_ptr():
            raise AllocationStorageOffsetError(
                f"allocator {self.name!r} returned a buffer for {nbytes} bytes on {device} "
                f"that starts at byte {block.storage_offset()} of its storage: torch views "
                f"bytes as a dtype of {LARGEST_ITEMSIZE} bytes only at a multiple of "
                f"{LARGEST_ITEMSIZE} in the storage, and neither DLPack nor a slice of its "
                "storage could start a storage at the buffer. Return a plain torch tensor."
            )
        return rebased


def own_storage(block: torch.Tensor) -> torch.Tensor:
    """``block``'s bytes through a storage of the manager's own, zero-copy (DLPack).

    A user's pool may keep references to the blocks it hands out (a free list) or hand out
    slices of one arena: counted on the block's own storage, those references would read as
    views pinning a retired buffer. The new storage holds ``block`` alive, and only the
    manager and its views hold the new storage. A tensor DLPack cannot export is kept as
    it is (its pinned count may then include the pool's own references).

    Example:
        >>> import torch
        >>> arena = torch.zeros(4096, dtype=torch.uint8)
        >>> block = own_storage(arena[1024:2048])
        >>> block.data_ptr() == arena[1024:].data_ptr(), block.untyped_storage().nbytes()
        (True, 1024)
    """
    try:
        return torch.utils.dlpack.from_dlpack(block)
    except (BufferError, RuntimeError, TypeError):  # not exportable: the block itself
        return block


def check_allocation(
    result: object,
    nbytes: int,
    device: torch.device,
    allocator: SlotAllocator,
    *,
    in_use: InUse = (),
) -> torch.Tensor:
    """``result`` if it can be a slot's buffer of ``nbytes`` on ``device``; else raise.

    Devices are compared normalised (``cpu`` is ``cpu:0``; ``cuda`` is the current index).

    Args:
        result: what the allocator returned.
        nbytes: the bytes asked of it.
        device: the workspace's device.
        allocator: the adapter, named in the messages.
        in_use: buffers ``result``'s first ``nbytes`` bytes must not overlap: the other
            slots' current buffers (and those allocated earlier in the same growth).

    Returns:
        ``result``, unchanged.

    Raises:
        AllocationNotTensorError: (``AllocationTypeError``, ``TypeError``) not a tensor.
        AllocationDtypeError: (``AllocationTypeError``, ``TypeError``) not ``uint8``.
        AllocationNotStridedError: (``AllocationLayoutError``, ``ValueError``) a nested or
            sparse tensor.
        AllocationShapeError: (``AllocationValueError``, ``ValueError``) not 1-D.
        AllocationNegativeBitError: (``AllocationValueError``) torch's negative bit is set.
        AllocationSizeError: (``AllocationValueError``) fewer than ``nbytes`` elements, or
            a storage that holds fewer of their bytes (freed, or a fake tensor's: none).
        AllocationDeviceError: (``AllocationValueError``) on another device.
        AllocationLayoutError: (``AllocationValueError``) not contiguous.
        AllocationOverlapError: (``AllocationValueError``) overlaps a buffer in ``in_use``.

    Example:
        >>> import torch
        >>> check_allocation(torch.empty(8), 8, torch.device("cpu"), SlotAllocator())
        Traceback (most recent call last):
        ...
        interop.errors.AllocationDtypeError: allocator 'torch' returned a torch.float32 tensor ...
        >>> arena = torch.empty(4096, dtype=torch.uint8)
        >>> check_allocation(arena[1024:], 1024, torch.device("cpu"), SlotAllocator(),
        ...                  in_use=[arena[:2048]])
        Traceback (most recent call last):
        ...
        interop.errors.AllocationOverlapError: allocator 'torch' returned bytes [0x... overlap ...
    """
    who = f"allocator {allocator.name!r}"
    if not isinstance(result, torch.Tensor):
        raise AllocationNotTensorError(
            f"{who} returned {type(result).__name__} {_short(result)} for {nbytes} bytes on "
            f"{device}; it must return a torch.Tensor (1-D, torch.uint8)."
        )
    if result.dtype != torch.uint8:
        raise AllocationDtypeError(
            f"{who} returned a {result.dtype} tensor for {nbytes} bytes on {device}; it must "
            "be torch.uint8 (the workspace counts bytes). Return tensor.view(torch.uint8)."
        )
    if result.is_nested or result.layout != torch.strided:
        kind = "nested" if result.is_nested else f"{result.layout} (sparse)"
        raise AllocationNotStridedError(
            f"{who} returned a {kind} tensor for {nbytes} bytes on {device}; it must be a "
            "plain strided tensor, one run of bytes that views are carved from. Return "
            "torch.empty(nbytes, dtype=torch.uint8, device=device) or a slice of an arena."
        )
    what = f"{who} returned tensor(shape={tuple(result.shape)}, device={result.device}"
    if result.dim() != 1:
        raise AllocationShapeError(
            f"{what}) for {nbytes} bytes; it must be 1-D. Return tensor.reshape(-1)."
        )
    if result.is_neg():
        raise AllocationNegativeBitError(
            f"{what}) for {nbytes} bytes with torch's negative bit set: its bytes are not "
            "its values, and every view carved from it would fail. Return "
            "tensor.resolve_neg() (a copy) or the tensor it was negated from."
        )
    if result.numel() < nbytes:
        raise AllocationSizeError(
            f"{what}) for {nbytes} bytes: {result.numel()} bytes is too small."
        )
    if not same_device(result.device, device):
        raise AllocationDeviceError(
            f"{what}) but the workspace lives on {device}; allocate on the device passed."
        )
    if not result.is_contiguous():
        raise AllocationLayoutError(
            f"{what}, stride={result.stride()}) for {nbytes} bytes; it must be contiguous "
            "(views are carved from consecutive bytes)."
        )
    if is_fake_tensor(result):  # (before its storage is read)
        raise AllocationSizeError(
            f"{what}) for {nbytes} bytes: a fake tensor (FakeTensorMode), which holds no "
            "bytes; views of it would write to no memory. Allocate outside the mode."
        )
    try:
        held = result.untyped_storage().nbytes() - result.storage_offset()
    except RuntimeError:  # a storage its owner keeps private: its address is what is known
        held = nbytes
    if held < nbytes or (nbytes and not result.data_ptr()):
        raise AllocationSizeError(
            f"{what}) for {nbytes} bytes whose storage holds {max(held, 0)} of them from "
            f"the tensor's start (address {result.data_ptr():#x}): its memory was freed "
            "(untyped_storage().resize_(0), as FSDP frees a parameter's) or never there; "
            "views of it would write past its memory. Return a tensor that owns its bytes."
        )
    start = result.data_ptr()
    end = start + nbytes
    for other in in_use:
        if other is None or other.numel() == 0:
            continue
        other_start = other.data_ptr()
        other_end = other_start + other.numel() * other.element_size()
        if start < other_end and other_start < end:
            raise AllocationOverlapError(
                f"{who} returned bytes [{start:#x}, {end:#x}) for {nbytes} bytes on "
                f"{device}, which overlap [{other_start:#x}, {other_end:#x}), a buffer "
                "another slot of this workspace is using: one slot's writes would appear "
                "in the other's views. Hand each request memory of its own."
            )
    return result


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
