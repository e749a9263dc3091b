"""Plans: a state as plain JSON-able data, so a warm-up's sizes survive a restart.

A plan keeps the configuration and, per slot, capacity, high-water mark and growth count.
It leaves out the retained span and the persistent keys on purpose: they describe live
memory and live objects (keys may be any Python object), which a restart does not keep;
and the capacity limit, which belongs to the device the plan is applied on. So
``from_dict(to_dict(s))`` equals ``s`` with those cleared (a test pins this).

Reading a plan checks every field before building anything: a plan that does not
describe a workspace (a slot listed twice, a capacity or a high-water mark with no growth
that allocated the bytes) is refused with :class:`InvalidPlanError` naming the field; every
state the transitions produce reads back (a property test pins it).

A high-water mark may be above its capacity. It is the largest request the slot served,
which losing a buffer does not undo: a slot whose buffer was released for a growth still in
flight, or lost in a growth that failed (both :func:`functional_ws.after_failed_growth`),
has capacity 0 and keeps its mark. Such a plan
says what the slot needed, and :func:`functional_ws.apply_plan` reserves that.
"""

from __future__ import annotations

from typing import Any

from ._checks import check_int
from ._errors import InvalidPlanError
from ._spec import MAX_BYTES
from ._state import SlotState, WorkspaceState, check_config

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


#: The fields a plan has, and those of each of its slots: nothing else is read.
PLAN_FIELDS = ("format", "version", "num_ubatches", "num_lanes", "alignment", "growth", "locked",
               "slots")  # fmt: skip
SLOT_FIELDS = ("ubatch", "lane", "capacity", "high_water", "growths")


def _refuse_unknown(data: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse a field this version does not read (a typo, or one a newer writer meant
    something by): loading it would drop what it says without a word."""
    unknown = [name for name in data if name not in known]
    if unknown:
        raise InvalidPlanError(
            f"{where} has field(s) {', '.join(map(repr, unknown))} that a version-{VERSION} "
            f"plan does not have (it has {', '.join(map(repr, known))}); remove them."
        )


def _field(data: dict[str, Any], name: str, where: str) -> Any:
    if name not in data:
        raise InvalidPlanError(f"{where} has no field {name!r}.")
    return data[name]


def _count(data: dict[str, Any], name: str, where: str, maximum: int | None = None) -> int:
    value = _field(data, name, where)
    return check_int(value, f"{where}[{name!r}]", maximum=maximum, error=InvalidPlanError)


def from_dict(data: dict[str, Any]) -> WorkspaceState:
    """The state a plan describes (no retained span, no persistent keys, no limit).

    Raises:
        InvalidPlanError: (``ValueError``) naming the field that is missing, malformed or
            inconsistent: not a dict, another format or version, a field it does not
            have, a bad configuration, a slot missing, listed twice or out of range, a
            capacity of ``2**63`` or more, a capacity or a high-water mark with no growth
            that allocated the bytes.

    Example:
        >>> from functional_ws import initial_state, lock
        >>> s = lock(initial_state(num_lanes=2))
        >>> from_dict(to_dict(s)) == s
        True
    """
    if not isinstance(data, dict):
        raise InvalidPlanError(f"plan must be a dict, got {type(data).__name__}.")
    version = data.get("version")
    if data.get("format") != FORMAT or type(version) is not int or version != VERSION:
        raise InvalidPlanError(
            f"plan must have format={FORMAT!r} and version={VERSION}, got "
            f"format={data.get('format')!r}, version={data.get('version')!r}."
        )
    _refuse_unknown(data, PLAN_FIELDS, "plan")
    config = {
        name: _field(data, name, "plan")
        for name in ("num_ubatches", "num_lanes", "alignment", "growth")
    }
    check_config(**config, error=InvalidPlanError, type_error=InvalidPlanError, where="plan")
    locked = _field(data, "locked", "plan")
    if not isinstance(locked, bool):
        raise InvalidPlanError(f"plan['locked'] must be a bool, got {locked!r}.")
    num_ubatches, num_lanes = config["num_ubatches"], config["num_lanes"]
    count = num_ubatches * num_lanes
    entries = _field(data, "slots", "plan")
    if not isinstance(entries, list) or len(entries) != count:
        shown = f"a list of {len(entries)}" if isinstance(entries, list) else repr(entries)
        raise InvalidPlanError(
            f"plan['slots'] must list {count} slots ({num_ubatches} ubatches x {num_lanes} "
            f"lanes), got {shown}."
        )
    slots: list[SlotState | None] = [None] * count
    for i, entry in enumerate(entries):
        where = f"plan['slots'][{i}]"
        if not isinstance(entry, dict):
            raise InvalidPlanError(f"{where} must be a dict, got {entry!r}.")
        _refuse_unknown(entry, SLOT_FIELDS, where)
        ubatch = _count(entry, "ubatch", where, maximum=num_ubatches - 1)
        lane = _count(entry, "lane", where, maximum=num_lanes - 1)
        index = ubatch * num_lanes + lane
        if slots[index] is not None:
            raise InvalidPlanError(f"{where} lists slot {(ubatch, lane)} a second time.")
        slots[index] = _slot_state(entry, where)
    return WorkspaceState(
        num_ubatches=num_ubatches,
        num_lanes=num_lanes,
        alignment=config["alignment"],
        growth=config["growth"],
        locked=locked,
        slots=tuple(s for s in slots if s is not None),
    )


def _slot_state(entry: dict[str, Any], where: str) -> SlotState:
    capacity = _count(entry, "capacity", where, maximum=MAX_BYTES - 1)
    high_water = _count(entry, "high_water", where, maximum=MAX_BYTES - 1)
    growths = _count(entry, "growths", where)
    if capacity > 0 and growths == 0:
        raise InvalidPlanError(
            f"{where} has capacity {capacity} but growths 0: a slot holds bytes only after "
            "a growth allocated them."
        )
    if high_water > 0 and growths == 0:
        raise InvalidPlanError(
            f"{where} has high_water {high_water} but growths 0: a slot serves a request "
            "only from bytes a growth allocated."
        )
    return SlotState(capacity=capacity, high_water=high_water, growths=growths)
