"""Where two states differ: "what did this call change?" (like JAX's ``equality_errors``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._state import Slot, SlotState, WorkspaceState

#: Every workspace-wide field (all but the slots), so two unequal states never diff as equal.
_CONFIG = tuple(f.name for f in dataclasses.fields(WorkspaceState) if f.name != "slots")
_SLOT_FIELDS = tuple(f.name for f in dataclasses.fields(SlotState))


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference: ``slot`` is ``None`` for workspace-wide fields."""

    slot: Slot | None
    field: str
    before: Any
    after: Any

    def __str__(self) -> str:
        where = "workspace" if self.slot is None else f"slot {self.slot}"
        before, after = self.before, self.after
        if self.field == "persistent_keys":
            added = sorted(map(repr, after - before))
            removed = sorted(map(repr, before - after))
            parts = [f"+{k}" for k in added] + [f"-{k}" for k in removed]
            return f"{where}: persistent_keys {' '.join(parts)}"
        return f"{where}: {self.field} {before!r} → {after!r}"


class Diff(tuple[Change, ...]):
    """The changes between two states, in storage order; prints one line per change."""

    __slots__ = ()

    def __str__(self) -> str:
        return "\n".join(map(str, self)) if self else "no differences"

    def _repr_html_(self) -> str:
        from html import escape

        rows = "".join(f"<li><code>{escape(str(c))}</code></li>" for c in self)
        return f"<ul>{rows}</ul>" if self else "<i>no differences</i>"


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
        slot (1, 0): capacity 0 → 512
        slot (1, 0): high_water 0 → 512
        slot (1, 0): growths 0 → 1
    """
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
