"""Plans: a state as plain JSON-able data, so a warm-up's sizes survive a restart.

A plan keeps the configuration and, per slot, capacity, high-water mark and growth count.
It leaves out the retained span and the persistent keys on purpose: they describe live
memory and live objects (keys may be any Python object), which a restart does not keep.
So ``from_dict(to_dict(s))`` equals ``s`` with those two cleared (a test pins this).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._errors import InvalidSpecError
from ._ops import initial_state
from ._state import SlotState, WorkspaceState

FORMAT = "functional-ws/plan"
VERSION = 1


def to_dict(state: WorkspaceState) -> dict[str, Any]:
    """The plan of ``state`` as JSON-able data.

    Example:
        >>> import json
        >>> from functional_ws import initial_state
        >>> json.dumps(to_dict(initial_state()))[:40]
        '{"format": "functional-ws/plan", "versio'
    """
    return {
        "format": FORMAT,
        "version": VERSION,
        "num_ubatches": state.num_ubatches,
        "num_lanes": state.num_lanes,
        "alignment": state.alignment,
        "growth": state.growth,
        "locked": state.locked,
        "slots": [
            {
                "ubatch": ubatch,
                "lane": lane,
                "capacity": s.capacity,
                "high_water": s.high_water,
                "growths": s.growths,
            }
            for (ubatch, lane), s in zip(state.all_slots(), state.slots, strict=True)
        ],
    }


def _field(data: dict[str, Any], name: str, where: str) -> Any:
    if name not in data:
        raise InvalidSpecError(f"plan{where} has no field {name!r}.")
    return data[name]


def _count(data: dict[str, Any], name: str, where: str) -> int:
    value = _field(data, name, where)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidSpecError(f"plan{where}[{name!r}] must be a non-negative int, got {value!r}.")
    return value


def from_dict(data: dict[str, Any]) -> WorkspaceState:
    """The state a plan describes (no retained span, no persistent keys).

    Raises:
        InvalidSpecError: (``ValueError``) naming the field that is missing or malformed.

    Example:
        >>> from functional_ws import initial_state, lock
        >>> s = lock(initial_state(num_lanes=2))
        >>> from_dict(to_dict(s)) == s
        True
    """
    if not isinstance(data, dict):
        raise InvalidSpecError(f"plan must be a dict, got {type(data).__name__}.")
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise InvalidSpecError(
            f"plan must have format={FORMAT!r} and version={VERSION}, got "
            f"format={data.get('format')!r}, version={data.get('version')!r}."
        )
    state = initial_state(
        _field(data, "num_ubatches", ""),
        _field(data, "num_lanes", ""),
        alignment=_field(data, "alignment", ""),
        growth=_field(data, "growth", ""),
    )
    locked = _field(data, "locked", "")
    if not isinstance(locked, bool):
        raise InvalidSpecError(f"plan['locked'] must be a bool, got {locked!r}.")
    entries = _field(data, "slots", "")
    if not isinstance(entries, list) or len(entries) != len(state.slots):
        raise InvalidSpecError(
            f"plan['slots'] must list {len(state.slots)} slots, got {entries!r}."
        )
    slots = list(state.slots)
    for i, entry in enumerate(entries):
        where = f"['slots'][{i}]"
        if not isinstance(entry, dict):
            raise InvalidSpecError(f"plan{where} must be a dict, got {entry!r}.")
        slot = (_field(entry, "ubatch", where), _field(entry, "lane", where))
        index = state.index(slot)
        slots[index] = SlotState(
            capacity=_count(entry, "capacity", where),
            high_water=_count(entry, "high_water", where),
            growths=_count(entry, "growths", where),
        )
    return dataclasses.replace(state, locked=locked, slots=tuple(slots))
