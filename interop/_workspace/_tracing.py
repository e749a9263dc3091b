"""A recorded call as the core's :class:`functional_ws.TraceEvent`: what ``History.trace()``
is made of.

A request goes into the trace when it was served, or refused for want of room: a
``WorkspaceLockedError``, a ``CapacityLimitError``, a ``PersistentKeyLockedError``, a
``GrowthDuringCaptureError``, an allocation that ran out of memory (torch's
``OutOfMemoryError``, ``MemoryError``, or the ``RuntimeError`` torch's CPU allocator and
JAX raise, recognised by their messages), or ``try_get_simultaneous`` returning ``None``. Those are
requests the workload makes, and sizing must see them. A call refused for its arguments (a
malformed pair, a dtype that is not torch's, a lane not configured) is no request the
workload can make, and is left out.
"""

from __future__ import annotations

from typing import Any

import torch

import functional_ws as fws
from functional_ws import Slot, TraceEvent

from .._errors import GrowthDuringCaptureError
from ._requests import canonical, canonical_shape

#: Refusals for want of room: the request stays in the trace.
FOR_WANT_OF_ROOM = (
    fws.WorkspaceLockedError,
    fws.CapacityLimitError,
    fws.PersistentKeyLockedError,
    GrowthDuringCaptureError,
    MemoryError,
    torch.OutOfMemoryError,
)
#: What the out-of-memory ``RuntimeError``s that are no ``OutOfMemoryError`` say: torch's
#: CPU allocator ("DefaultCPUAllocator: can't allocate memory") and JAX's allocator
#: (``JaxRuntimeError``: "RESOURCE_EXHAUSTED: Out of memory ...").
OUT_OF_MEMORY_MESSAGES = ("can't allocate memory", "RESOURCE_EXHAUSTED", "out of memory")


def for_want_of_room(error: BaseException) -> bool:
    """Whether ``error`` refused a request for want of room (see the module)."""
    if isinstance(error, FOR_WANT_OF_ROOM):
        return True
    if not isinstance(error, RuntimeError):
        return False
    try:
        text = str(error).lower()
    except Exception:  # the caller's error type, whose __str__ raised
        return False
    return any(message.lower() in text for message in OUT_OF_MEMORY_MESSAGES)


def trace_event(
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    slot: Slot | None,
    error: BaseException | None,
) -> TraceEvent | None:
    """The event of one recorded call, or ``None`` when it is no request for the trace.

    Args:
        name: the public method called.
        args, kwargs: its arguments.
        slot: the slot it ran in (``None`` when unknown).
        error: what it raised, if anything.

    Raises:
        Whatever building the event raises (a malformed request): the recorder keeps such
        a call out of the trace.
    """
    if slot is None or (error is not None and not for_want_of_room(error)):
        return None
    trace = fws.Trace()
    if name in ("get_simultaneous", "try_get_simultaneous"):
        trace = trace.acquire(slot, *canonical(args, "shapes_and_dtypes"))
    elif name == "get_retained":
        key, shape, dtype = _bound(args, kwargs, ("key", "shape", "dtype"))
        trace = trace.retain(slot, key, (canonical_shape(shape), dtype))
    elif name == "get_persistent_resource":
        (key,) = _bound(args, kwargs, ("key",))
        trace = trace.claim(slot, key)
    elif name == "get_persistent":  # its key, as the manager claims it
        (key,) = _bound(args, kwargs, ("key",))
        trace = trace.claim(slot, (torch.Tensor, key))
    else:
        return None
    return trace.events[0]


def _bound(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...]) -> list[Any]:
    """The arguments ``names`` of a call, positional or by keyword."""
    return [args[i] if i < len(args) else kwargs[name] for i, name in enumerate(names)]
