"""The manager's allocator: a provider (``_providers.py``: torch, a callable; JAX's lives in
the bridge and is imported only for ``allocator="jax"``) under adaptors that each add one
concern, as RMM's resource adaptors wrap a memory resource: the debug log of growths
(:class:`ResizeLog`) and the watch on retired buffers that something still holds
(:class:`RetiredTracking`). :func:`allocator_stack` composes them once per manager.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import torch

from .. import _private
from .._diagnostics import caller_origin, debug_enabled, logger
from .._errors import AllocatorNotCallableError, UnknownAllocatorError
from ._providers import Allocation, AllocatorFunction, FunctionAllocator, InUse, SlotAllocator
from ._retired import RetiredBuffers

_MB = 1024 * 1024


#: What ``WorkspaceManager(allocator=...)`` accepts.
AllocatorArg = Literal["torch", "jax"] | AllocatorFunction


class Adaptor(SlotAllocator):
    """An allocator wrapping another one (``upstream``), as RMM's resource adaptors wrap a
    memory resource: it adds one concern and passes everything else through.

    Attributes:
        queues: whether this adaptor queues records to report (then its :meth:`report`
            writes what the stack queued; one that queues nothing passes the call on).
    """

    queues = False

    def __init__(self, upstream: SlotAllocator) -> None:
        self.upstream = upstream
        self.name = upstream.name
        self.releases_first = upstream.releases_first
        self.checks_overlap = upstream.checks_overlap
        #: What the stack's adaptors queued to report, as ``(write, record)`` pairs, in the
        #: order queued: one list for the whole stack (shared down it), so that the engine
        #: calls :meth:`report` only when there is something to write.
        self.pending: list[tuple[Callable[[Any], None], Any]] = (
            upstream.pending if isinstance(upstream, Adaptor) else []
        )
        # A method this adaptor does not override is the upstream's own, bound here: a
        # growth walks the stack once per method, and a frame that only passes the call on
        # costs it time (the methods below say what passing on means).
        for method in _PASSED_ON if not self.queues else ("allocate", "release"):
            if getattr(type(self), method) is getattr(Adaptor, method):
                setattr(self, method, getattr(upstream, method))

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
        return self.upstream.allocate(
            nbytes, device, alignment, in_use=in_use, slot=slot, previous=previous
        )

    def release(self, slot: tuple[int, int], buffer: torch.Tensor) -> None:
        self.upstream.release(slot, buffer)

    def report(self) -> None:
        """Write what the stack queued (each record once, whichever thread reports it),
        then pass the call on."""
        pending = self.pending
        while pending:
            try:
                write, record = pending.pop(0)
            except IndexError:  # another thread wrote the last one
                break
            write(record)
        self.upstream.report()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.upstream!r})"


_PASSED_ON = ("allocate", "release", "report")


class RetiredTracking(Adaptor):
    """Watches the buffers growth retires that something outside the manager still holds
    (views kept across calls, arrays imported from them: vLLM #56902), and warns about them.

    Attributes:
        retired: the records (:class:`interop._workspace._retired.RetiredBuffers`).
    """

    queues = True

    def __init__(self, upstream: SlotAllocator) -> None:
        super().__init__(upstream)
        self.retired = RetiredBuffers()

    def release(self, slot: tuple[int, int], buffer: torch.Tensor) -> None:
        if _private.held_elsewhere(buffer):
            self.pending.append((self.retired.report, self.retired.retire(slot, buffer)))
        self.upstream.release(slot, buffer)


class ResizeLog(Adaptor):
    """The debug log of growths (``FUNCTIONAL_WS_DEBUG=1`` or ``VLLM_DEBUG_WORKSPACE=1``),
    in the original's words, naming the caller's ``file:line:function``."""

    queues = True

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
        allocation = self.upstream.allocate(
            nbytes, device, alignment, in_use=in_use, slot=slot, previous=previous
        )
        # A growth (not a failed one's old capacity again), queued only where the logger
        # passes INFO on: what would not be logged is not looked up (the switch is read,
        # and the caller's line found, when it is written).
        if slot is not None and logger.isEnabledFor(logging.INFO):
            self.pending.append((self._write, (slot, previous, nbytes)))
        return allocation

    @staticmethod
    def _write(record: tuple[tuple[int, int], int, int]) -> None:
        """Log one growth, naming the caller's line (the call is still on the stack)."""
        if not debug_enabled():
            return
        slot, before, after = record
        logger.info(
            "[WORKSPACE DEBUG] Resized workspace from '%s': %.2f MB -> %.2f MB "
            "(ubatch %d, lane %d)",
            caller_origin(),
            before / _MB,
            after / _MB,
            *slot,
        )


def _jax_allocator(device: torch.device) -> SlotAllocator:
    """The ``"jax"`` provider, which lives in the bridge: JAX is imported only for it."""
    from .._bridge._jax_allocator import JaxAllocator

    return JaxAllocator(device)


_BUILT_INS: dict[str, Callable[[torch.device], SlotAllocator]] = {
    "torch": lambda device: SlotAllocator(),
    "jax": _jax_allocator,
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
        interop.errors.UnknownAllocatorError: allocator must be 'torch', 'jax' or a callable ...
    """
    if isinstance(allocator, str):
        if allocator not in _BUILT_INS:
            raise UnknownAllocatorError(
                f"allocator must be 'torch', 'jax' or a callable (nbytes, device) -> "
                f"torch.Tensor, got {allocator!r}."
            )
        return _BUILT_INS[allocator](device)
    if not callable(allocator):
        raise AllocatorNotCallableError(
            f"allocator must be 'torch', 'jax' or a callable (nbytes, device) -> "
            f"torch.Tensor, got {allocator!r}."
        )
    return FunctionAllocator(allocator)


def allocator_stack(allocator: AllocatorArg, device: torch.device) -> RetiredTracking:
    """The manager's allocator: the provider ``allocator`` names (:func:`resolve_allocator`),
    its growths logged (:class:`ResizeLog`) and the buffers it retires watched
    (:class:`RetiredTracking`).

    Example:
        >>> import torch
        >>> allocator_stack("torch", torch.device("cpu"))
        RetiredTracking(ResizeLog(SlotAllocator('torch')))
    """
    return RetiredTracking(ResizeLog(resolve_allocator(allocator, device)))
