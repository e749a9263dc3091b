"""A recorded call as the core's :class:`functional_ws.TraceEvent`: what ``History.trace()``
is made of.

A request goes into the trace unless the call was refused for its arguments: a malformed
pair, a dtype that is not torch's, an unhashable key, a lane or ubatch not configured, a
persistent key holding a tensor of another shape, a factory that is not callable. Such a
call is no request the workload can make. Every other outcome keeps it: served, refused
for want of room (locked, above the device's memory, ``try_get_simultaneous`` returning
``None``), or failed on the way (an allocator that ran out of memory, whatever it raised;
an ``alloc_context`` that swallowed the error; an interrupt). Those are requests the
workload makes, which sizing must see: when in doubt a request is kept (a trace that holds
one request too many sizes a workspace too large, never too small).
"""

from __future__ import annotations

from typing import Any

import torch

import functional_ws as fws
from functional_ws import Slot, TraceEvent

from .._errors import FactoryNotCallableError, PersistentMismatchError
from ._requests import canonical, canonical_shape

#: Refusals of a call for its arguments: the request stays out of the trace.
FOR_ITS_ARGUMENTS = (
    fws.InvalidSpecError,
    fws.InvalidSlotError,
    fws.LaneNotConfiguredError,
    fws.UbatchNotConfiguredError,
    PersistentMismatchError,
    FactoryNotCallableError,
)


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
    if slot is None or isinstance(error, FOR_ITS_ARGUMENTS):
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
