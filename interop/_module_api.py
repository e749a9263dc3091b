"""The original's module-level API: one process-wide manager and functions that reach it.

As in vLLM's workspace module, the manager is the package's attribute ``interop._manager``
and every function here reads it when called, so a test that does
``monkeypatch.setattr(interop, "_manager", m)`` reaches ``m`` through all of them. The
package's class (:class:`WorkspaceModule`) also tells the slot selection when
``interop.dbo_current_ubatch_id`` is replaced (``_context.py``), and keeps
``interop._VIEW_ALIGNMENT`` (upstream's module constant) from being rebound.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final

import torch

import functional_ws as fws

from . import _context
from ._diagnostics import logger
from ._errors import NotInitializedError, ReadOnlyAttributeError
from ._workspace._allocators import AllocatorArg
from ._workspace._facade import WorkspaceManager

#: The ``interop`` package, whose ``_manager`` attribute is the process-wide manager.
_PACKAGE = sys.modules[__name__.rpartition(".")[0]]

#: vLLM's module constant (``vllm.v1.worker.workspace._VIEW_ALIGNMENT``, since 0.34.0): the
#: byte alignment of every view's offset in its buffer, 256 as ``cudaMalloc`` guarantees.
#: Upstream reads it at each request, so rebinding it there changes every manager's layout
#: at once. Here each manager's alignment is its own, fixed when it is made
#: (``WorkspaceManager(alignment=...)``, whose default is this value): rebinding the
#: constant could change nothing, so ``interop._VIEW_ALIGNMENT = n`` (and ``del``) raises
#: :class:`~interop.errors.ReadOnlyAttributeError` instead of being ignored.
_VIEW_ALIGNMENT: Final = 256

#: The package's attributes that :class:`WorkspaceModule` refuses to rebind or delete.
_READ_ONLY = frozenset({"_VIEW_ALIGNMENT"})


def _refuse_rebinding(name: str, change: str) -> ReadOnlyAttributeError:
    return ReadOnlyAttributeError(
        f"interop.{name} is read-only ({getattr(_PACKAGE, name)!r}): each manager's view "
        f"alignment is fixed when it is made, so {change} would change nothing. Pass "
        "WorkspaceManager(..., alignment=n) for another alignment."
    )


class WorkspaceModule(types.ModuleType):
    """The ``interop`` package's class: setting ``dbo_current_ubatch_id`` on it (as vLLM's
    tests patch their workspace module) changes how the ubatch is chosen at once, and
    ``_VIEW_ALIGNMENT`` cannot be set or deleted.

    Example:
        >>> import interop
        >>> interop._VIEW_ALIGNMENT
        256
        >>> interop._VIEW_ALIGNMENT = 512
        Traceback (most recent call last):
        ...
        interop.errors.ReadOnlyAttributeError: interop._VIEW_ALIGNMENT is read-only (256): ...
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _READ_ONLY:
            raise _refuse_rebinding(name, f"setting it to {value!r}")
        super().__setattr__(name, value)
        if name == "dbo_current_ubatch_id":
            _context.ubatch_function_replaced(value)

    def __delattr__(self, name: str) -> None:
        if name in _READ_ONLY:
            raise _refuse_rebinding(name, "deleting it")
        super().__delattr__(name)
        if name == "dbo_current_ubatch_id":
            _context.ubatch_function_replaced(None)


def _current() -> WorkspaceManager | None:
    return _PACKAGE.__dict__.get("_manager")


def init_workspace_manager(
    device: torch.device | str,
    num_ubatches: int | None = None,
    num_lanes: int = 1,
    alloc_context: Callable[[], AbstractContextManager[Any]] = nullcontext,
    *,
    growth: fws.GrowthPolicy = "slot",
    allocator: AllocatorArg = "torch",
) -> None:
    """Initialize the workspace manager with a device.

    Must be called before the other workspace functions (vLLM calls it from
    ``GPUModelRunner.__init__``). Calling it again logs a warning and replaces the manager.

    Args:
        device: the device to allocate the workspace on.
        num_ubatches: number of ubatch slots; ``None`` means 1.
        num_lanes: independent execution lanes per ubatch.
        alloc_context: factory of the context every buffer is allocated in.
        growth: the growth policy, ``"slot"`` (the original) or ``"ubatches"``.
        allocator: who provides the buffers, ``"torch"``, ``"jax"`` or a callable (see
            :class:`WorkspaceManager`).

    Raises:
        InvalidSpecError: (``ValueError``, "at least one") a count below one.

    Example:
        >>> from interop import (current_workspace_manager, init_workspace_manager,
        ...                      reset_workspace_manager)
        >>> init_workspace_manager("cpu")
        >>> current_workspace_manager()
        WorkspaceManager(device=cpu, 1 ubatch x 1 lane, 0 B, unlocked)
        >>> reset_workspace_manager()
    """
    manager = WorkspaceManager(
        device, num_ubatches, num_lanes, alloc_context, growth=growth, allocator=allocator
    )
    previous = _current()
    if previous is not None:
        if isinstance(previous, WorkspaceManager):
            shown: object = previous.device
        else:  # a stand-in a test patched in: upstream's manager keeps its device in _device
            shown = getattr(previous, "__dict__", {}).get("_device", "unknown")
        logger.warning(
            "WorkspaceManager already initialized on device %s, reinitializing on device %s",
            shown,
            manager.device,
        )
    _PACKAGE._manager = manager  # type: ignore[attr-defined]


def current_workspace_manager() -> WorkspaceManager:
    """Get the current workspace manager instance.

    Raises:
        NotInitializedError: (``AssertionError``, "not initialized") before
            :func:`init_workspace_manager`.

    Example:
        >>> from interop import current_workspace_manager
        >>> current_workspace_manager()
        Traceback (most recent call last):
        ...
        interop.errors.NotInitializedError: WorkspaceManager not initialized. ...
    """
    manager = _current()
    if manager is None:
        raise NotInitializedError(
            "WorkspaceManager not initialized. Call init_workspace_manager() with a device "
            "before using workspace functions."
        )
    return manager


def is_workspace_manager_initialized() -> bool:
    """Check if workspace manager has been initialized.

    Returns:
        True if :func:`init_workspace_manager` ran and :func:`reset_workspace_manager` did not
        since.
    """
    return _current() is not None


def lock_workspace() -> None:
    """Lock the workspace to prevent growth or new persistent resources.

    Call it after warm-up, when every slot has seen its largest requests (or after
    :func:`reserve_workspace`); later requests must fit.

    Raises:
        NotInitializedError: (``AssertionError``) no manager.
    """
    current_workspace_manager().lock()


def reserve_workspace(*shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]) -> None:
    """Pre-allocate room for these views, taken together, in every ubatch slot.

    :meth:`WorkspaceManager.reserve` on the current manager (upstream vLLM's
    ``reserve_workspace``, which ``lock_workspace``'s docstring tells users to call during
    initialisation). Idempotent; call it before :func:`lock_workspace`.

    Raises:
        NotInitializedError: (``AssertionError``) no manager.
        WorkspaceLockedError: (``AssertionError``) locked and a slot would have to grow.
        InvalidSpecError: (``ValueError``) a malformed pair.

    Example:
        >>> import torch
        >>> from interop import (current_workspace_manager, init_workspace_manager,
        ...                      reserve_workspace, reset_workspace_manager)
        >>> init_workspace_manager("cpu", num_ubatches=2)
        >>> reserve_workspace(((1000,), torch.uint8), ((8,), torch.float32))
        >>> [s.capacity for s in current_workspace_manager().stats().slots]
        [1280, 1280]
        >>> reset_workspace_manager()
    """
    current_workspace_manager().reserve(*shapes_and_dtypes)


def unlock_workspace() -> None:
    """Unlock the workspace to allow growth (elastic EP scaling); lock again afterwards.

    Raises:
        NotInitializedError: (``AssertionError``) no manager.
    """
    current_workspace_manager().unlock()


def reset_workspace_manager() -> None:
    """Reset the workspace manager to the uninitialized state (mostly for tests)."""
    _PACKAGE._manager = None  # type: ignore[attr-defined]
