"""Who provides each slot's bytes: torch, JAX, or the caller's pool (tiny adapters, as RMM's).

``WorkspaceManager(..., allocator=...)`` takes ``"torch"`` (the default), ``"jax"`` or a
callable ``allocator(nbytes, device) -> torch.Tensor``. Each is wrapped here in an adapter
with one method, :meth:`SlotAllocator.allocate`, that returns an :class:`Allocation`: a
``uint8`` tensor of exactly the bytes asked for whose address is a multiple of the
alignment, and the object that owns the memory (the JAX array for ``"jax"``), which the
slot keeps for as long as the buffer is its own. Where the provider's address is not aligned
(torch's and JAX's CPU allocators give 64 bytes), the block is dropped and one ``alignment``
bytes larger is asked for and sliced (:func:`interop._device.aligned_block`).

Every raw result is validated (a ``torch.Tensor``, ``uint8``, one dimension, at least the
bytes asked for, on the workspace's device, contiguous) before the manager uses it, so a
pool that hands back the wrong thing is refused with an :class:`AllocatorError` naming the
allocator and the value.

The order of release and allocation. The built-ins release a slot's old buffer first and
then allocate (the original's order, which keeps a growth's peak at the new size). A
callable's buffers are allocated first, every growing slot's, and only then are the old ones
released: so a refused or failed allocation changes nothing (state, buffers and retained
bytes stay as they were), at the cost of a peak of old plus new during the growth.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import torch

from functional_ws import WorkspaceError

from ._device import aligned_block, allocate_aligned
from ._dlpack import device_target
from ._jax import to_torch

#: A user allocator: ``allocator(nbytes, device)`` returns a 1-D ``uint8`` tensor of at least
#: ``nbytes`` bytes on ``device``.
AllocatorFunction = Callable[[int, torch.device], torch.Tensor]
#: What ``WorkspaceManager(allocator=...)`` accepts.
AllocatorArg = Literal["torch", "jax"] | AllocatorFunction


class AllocatorError(WorkspaceError):
    """Base class of the errors about ``allocator=`` and what an allocator returned.

    Attributes:
        reason: a short machine-readable reason (``"name"``, ``"callable"``, ``"type"``,
            ``"dtype"``, ``"ndim"``, ``"size"``, ``"device"``, ``"layout"``).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class UnknownAllocatorError(AllocatorError, ValueError):
    """``allocator=`` is a string that names no built-in allocator."""


class AllocatorNotCallableError(AllocatorError, TypeError):
    """``allocator=`` is neither a built-in's name nor a callable."""


class AllocationTypeError(AllocatorError, TypeError):
    """The allocator returned something that is not a ``uint8`` torch tensor."""


class AllocationValueError(AllocatorError, ValueError):
    """The allocator returned a ``uint8`` tensor the workspace cannot use as its buffer:
    not 1-D, too small, on another device, or not contiguous."""


@dataclasses.dataclass(frozen=True)
class Allocation:
    """A slot's buffer and what owns its memory.

    Attributes:
        buffer: ``uint8``, 1-D, exactly the bytes asked for, its address aligned.
        owner: the object that must live as long as the buffer is the slot's (the JAX array
            for ``"jax"``); ``None`` where the tensor owns its memory.
    """

    buffer: torch.Tensor
    owner: Any = None


class SlotAllocator:
    """The adapter interface: a name for the statistics and one allocation method.

    Attributes:
        name: what :meth:`WorkspaceManager.stats` reports (``"torch"``, ``"jax"``, or the
            callable's qualified name).
        releases_first: whether a growth releases the old buffer before allocating the new
            one (the original's order); otherwise it allocates every new buffer first.
    """

    name: str = "torch"
    releases_first: bool = True

    def allocate(self, nbytes: int, device: torch.device, alignment: int) -> Allocation:
        """A buffer of exactly ``nbytes`` on ``device`` at a multiple of ``alignment``.

        Raises:
            AllocatorError: the provider's result is not a usable buffer.
        """
        return Allocation(allocate_aligned(nbytes, device, alignment))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class JaxAllocator(SlotAllocator):
    """Each buffer is a JAX ``uint8`` array on the matching JAX device, seen through DLPack.

    The memory comes out of JAX's pool (on a GPU where JAX preallocated, out of the memory
    JAX already holds, not torch's caching allocator); torch sees it zero-copy through
    :func:`interop.to_torch`, which orders torch after the fill that created it.
    """

    name = "jax"

    def __init__(self, device: torch.device) -> None:
        self.jax_device = device_target(device).device  # refuses a device JAX cannot see

    def allocate(self, nbytes: int, device: torch.device, alignment: int) -> Allocation:
        arrays: list[jax.Array] = []

        def raw(n: int) -> torch.Tensor:
            arrays[:] = [jnp.zeros((n,), dtype=jnp.uint8, device=self.jax_device)]
            return check_allocation(to_torch(arrays[0]), n, device, self)

        buffer = aligned_block(raw, nbytes, alignment)
        return Allocation(buffer, arrays[0])  # the array behind the block kept


class FunctionAllocator(SlotAllocator):
    """A user's ``allocator(nbytes, device) -> torch.Tensor``, its results validated."""

    releases_first = False

    def __init__(self, function: AllocatorFunction) -> None:
        self.function = function
        self.name = getattr(function, "__qualname__", None) or type(function).__name__

    def allocate(self, nbytes: int, device: torch.device, alignment: int) -> Allocation:
        def raw(n: int) -> torch.Tensor:
            return check_allocation(self.function(n, device), n, device, self)

        return Allocation(aligned_block(raw, nbytes, alignment))


_BUILT_INS: dict[str, Callable[[torch.device], SlotAllocator]] = {
    "torch": lambda device: SlotAllocator(),
    "jax": JaxAllocator,
}


def resolve_allocator(allocator: AllocatorArg, device: torch.device) -> SlotAllocator:
    """The adapter for ``WorkspaceManager``'s ``allocator`` argument.

    Args:
        allocator: ``"torch"``, ``"jax"`` or a callable ``(nbytes, device) -> torch.Tensor``.
        device: the workspace's device.

    Returns:
        A :class:`SlotAllocator`.

    Raises:
        UnknownAllocatorError: (``ValueError``) a string other than ``"torch"`` or ``"jax"``.
        AllocatorNotCallableError: (``TypeError``) neither a string nor a callable.
        DeviceNotVisibleError: (``ValueError``) ``"jax"`` for a device this process's JAX
            has no backend for.

    Example:
        >>> import torch
        >>> resolve_allocator("jax", torch.device("cpu"))
        JaxAllocator('jax')
        >>> resolve_allocator("numpy", torch.device("cpu"))
        Traceback (most recent call last):
        ...
        interop._allocators.UnknownAllocatorError: allocator must be 'torch', 'jax' or a ...
    """
    if isinstance(allocator, str):
        if allocator not in _BUILT_INS:
            raise UnknownAllocatorError(
                f"allocator must be 'torch', 'jax' or a callable (nbytes, device) -> "
                f"torch.Tensor, got {allocator!r}.",
                "name",
            )
        return _BUILT_INS[allocator](device)
    if not callable(allocator):
        raise AllocatorNotCallableError(
            f"allocator must be 'torch', 'jax' or a callable (nbytes, device) -> "
            f"torch.Tensor, got {allocator!r}.",
            "callable",
        )
    return FunctionAllocator(allocator)


def check_allocation(
    result: object, nbytes: int, device: torch.device, allocator: SlotAllocator
) -> torch.Tensor:
    """``result`` if it can be a slot's buffer of ``nbytes`` on ``device``; else raise.

    Raises:
        AllocationTypeError: (``TypeError``) not a torch tensor, or not ``uint8``.
        AllocationValueError: (``ValueError``) not 1-D, fewer than ``nbytes`` elements, on
            another device, or not contiguous.

    Example:
        >>> import torch
        >>> check_allocation(torch.empty(8), 8, torch.device("cpu"), SlotAllocator())
        Traceback (most recent call last):
        ...
        interop._allocators.AllocationTypeError: allocator 'torch' returned a torch.float32 ...
    """
    who = f"allocator {allocator.name!r}"
    if not isinstance(result, torch.Tensor):
        raise AllocationTypeError(
            f"{who} returned {type(result).__name__} {_short(result)} for {nbytes} bytes on "
            f"{device}; it must return a torch.Tensor (1-D, torch.uint8).",
            "type",
        )
    if result.dtype != torch.uint8:
        raise AllocationTypeError(
            f"{who} returned a {result.dtype} tensor for {nbytes} bytes on {device}; it must "
            "be torch.uint8 (the workspace counts bytes). Return tensor.view(torch.uint8).",
            "dtype",
        )
    what = f"{who} returned tensor(shape={tuple(result.shape)}, device={result.device}"
    if result.dim() != 1:
        raise AllocationValueError(
            f"{what}) for {nbytes} bytes; it must be 1-D. Return tensor.reshape(-1).", "ndim"
        )
    if result.numel() < nbytes:
        raise AllocationValueError(
            f"{what}) for {nbytes} bytes: {result.numel()} bytes is too small.", "size"
        )
    if not _same_device(result.device, device):
        raise AllocationValueError(
            f"{what}) but the workspace lives on {device}; allocate on the device passed.",
            "device",
        )
    if not result.is_contiguous():
        raise AllocationValueError(
            f"{what}, stride={result.stride()}) for {nbytes} bytes; it must be contiguous "
            "(views are carved from consecutive bytes).",
            "layout",
        )
    return result


def _same_device(got: torch.device, wanted: torch.device) -> bool:
    if got.type != wanted.type:
        return False
    if wanted.index is None and wanted.type == "cuda":
        return got.index == torch.cuda.current_device()
    return wanted.index is None or got.index == wanted.index


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
