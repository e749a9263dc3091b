"""Where two states differ: "what did this call change?" (like JAX's ``equality_errors``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._presenters import Presented, robust_repr, safe_repr
from ._state import Slot, SlotState, WorkspaceState

#: Every workspace-wide field (all but the slots), so two unequal states never diff as equal.
_CONFIG = tuple(f.name for f in dataclasses.fields(WorkspaceState) if f.name != "slots")
_SLOT_FIELDS = tuple(f.name for f in dataclasses.fields(SlotState))


@robust_repr
@dataclasses.dataclass(frozen=True)
class Change(Presented):
    """One difference: ``slot`` is ``None`` for workspace-wide fields.

    ``str(change)`` reads ``slot (0, 0): capacity 0 B → 512 B`` (sizes in binary units).
    """

    slot: Slot | None
    field: str
    before: Any
    after: Any

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself


class Diff(Presented, tuple[Change, ...]):
    """The changes between two states, in storage order.

    ``print(d)`` gives one line per change; a notebook shows a table, the exact bytes on hover.
    """

    __slots__ = ()

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself

    def __repr__(self) -> str:
        return f"Diff({safe_repr(tuple(self))})"


def diff(a: WorkspaceState, b: WorkspaceState) -> Diff:
    """Explain where ``b`` differs from ``a``: slot, field, before → after.

    Args:
        a: the state before (say, before a call).
        b: the state after.

    Returns:
        A :class:`Diff` (a tuple of :class:`Change`); empty when the states are equal.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire
        >>> s = initial_state(num_ubatches=2)
        >>> print(diff(s, acquire(s, (1, 0), ((100,), np.dtype("float32")))[0]))
        slot (1, 0): capacity 0 B → 512 B
        slot (1, 0): high_water 0 B → 512 B
        slot (1, 0): growths 0 → 1
    """
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, WorkspaceState):
            raise TypeError(
                f"diff compares two WorkspaceStates; {name} is a {type(value).__name__}. For "
                "a manager, pass ws.state (a recorded History's states: history[i].state)."
            )
    changes = [
        Change(None, name, getattr(a, name), getattr(b, name))
        for name in _CONFIG
        if getattr(a, name) != getattr(b, name)
    ]
    if len(a.slots) != len(b.slots) or a.num_lanes != b.num_lanes:
        changes.append(Change(None, "slots", len(a.slots), len(b.slots)))
        return Diff(changes)
    for index, (x, y) in enumerate(zip(a.slots, b.slots, strict=True)):
        if x == y:
            continue
        slot = a.slot_of(index)
        changes.extend(
            Change(slot, name, getattr(x, name), getattr(y, name))
            for name in _SLOT_FIELDS
            if getattr(x, name) != getattr(y, name)
        )
    return Diff(changes)
