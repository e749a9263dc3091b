"""A trace as JSON text, and back: what goes through exactly and what goes by ``repr``.

The format (``functional-ws/trace``, version 1)::

    {"format": "functional-ws/trace", "version": 1, "events": [
      {"kind": "acquire", "slot": [0, 0], "views": [[4096, "float16"], [40, "int32"]]},
      {"kind": "retain", "slot": [0, 0], "views": [[1024, "float32"]],
       "key": {"tuple": ["deepseek", 3]}},
      {"kind": "claim", "slot": [1, 0], "key": "scales"}]}

Keys. A key is written exactly when it is ``None``, a ``bool``, a ``str``, an ``int``, a
finite ``float`` or a ``tuple`` of keys, a tuple as ``{"tuple": [...]}`` since JSON has
none (vLLM's keys are tuples such as ``("deepseek", 3)``); those read back equal. A key
that equals such a value and hashes as it (a NumPy integer or float, a ``torch.Size``, a
named tuple, a ``str`` subclass) is written as that plain value: it reads back equal though
of the plain type, so it spells as the key a manager holds for it. Any other key (a class,
as in ``get_persistent``'s ``(torch.Tensor, key)``; an enum, whose name the JSON keeps; a
frozenset) is written as
``{"repr": "..."}`` and read back as a :class:`~functional_ws.ReprKey` with that text,
which equals no live object: :func:`functional_ws.replay` therefore compares a claim's key
with the persistent keys of a state by :func:`key_spelling` too, so that a trace read back
replays exactly as the trace that was written. Two distinct live keys with the same
``repr`` would be taken for one there; a key whose ``repr`` raises is refused.
"""

from __future__ import annotations

import enum
import json
import math
import numbers
import operator
from collections.abc import Hashable
from typing import Any

import numpy as np

from ._checks import check_int, unique_fields
from ._errors import InvalidTraceError, TraceTypeError
from ._trace_events import EVENT_KINDS, ReprKey, TraceEvent

FORMAT = "functional-ws/trace"
VERSION = 1


def key_to_json(key: Hashable) -> Any:
    """``key`` as JSON-able data (the module docstring says which keys go through exactly).

    Raises:
        InvalidTraceError: the key is written by ``repr`` and its ``repr`` raises.

    Example:
        >>> key_to_json(("deepseek", 3)), key_to_json(frozenset({1}))
        ({'tuple': ['deepseek', 3]}, {'repr': 'frozenset({1})'})
    """
    kind = type(key)
    if key is None or kind in (bool, str, int):
        return key
    if kind is float and math.isfinite(key):  # type: ignore[arg-type]
        return key
    if kind is tuple:
        return {"tuple": [key_to_json(k) for k in key]}  # type: ignore[attr-defined]
    if kind is ReprKey:
        return {"repr": key.text}  # type: ignore[attr-defined]
    plain = _plain_value(key)
    if plain is not _NO_PLAIN:
        return key_to_json(plain)
    try:
        return {"repr": repr(key)}
    except Exception as err:
        raise InvalidTraceError(
            f"a key of type {kind.__name__} cannot be written: its repr raised "
            f"{type(err).__name__}: {err}"
        ) from None


_NO_PLAIN = object()


def _plain_value(key: Hashable) -> Any:
    """The plain JSON-able value ``key`` equals and hashes as (a NumPy number's, a tuple
    subclass's tuple, a ``str`` subclass's str), or ``_NO_PLAIN`` (an enum keeps its name;
    a subclass with an equality or hash of its own that the plain value does not share is
    another key to a manager, so it goes by ``repr``)."""
    plain = _plain_candidate(key)  # (never of key's own type: key_to_json wrote those)
    if plain is _NO_PLAIN:
        return plain
    try:
        same = bool(plain == key) and bool(key == plain) and hash(plain) == hash(key)
    except Exception:  # (a key's own __eq__ or __hash__ may raise anything)
        same = False
    return plain if same else _NO_PLAIN


def _plain_candidate(key: Hashable) -> Any:
    if isinstance(key, enum.Enum):
        return _NO_PLAIN
    if isinstance(key, tuple):
        return tuple(key)
    if isinstance(key, str):
        return key[:]  # a slice of a str subclass is a str
    if isinstance(key, bool | np.bool_):
        return bool(key)
    if isinstance(key, numbers.Integral):
        return operator.index(key)
    if isinstance(key, float | np.floating):
        value = float(key)
        return value if math.isfinite(value) and value == key else _NO_PLAIN
    return _NO_PLAIN


def key_from_json(data: Any, where: str = "key") -> Hashable:
    """The key :func:`key_to_json` wrote (a :class:`ReprKey` for one written by ``repr``).

    Raises:
        InvalidTraceError: ``data`` is no key's JSON, naming ``where``.

    Example:
        >>> key_from_json({"tuple": ["deepseek", 3]}), key_from_json({"repr": "<X>"})
        (('deepseek', 3), <X>)
    """
    kind = type(data)
    if data is None or kind in (bool, str, int):
        return data  # type: ignore[no-any-return]
    if kind is float and math.isfinite(data):
        return data  # type: ignore[no-any-return]
    if kind is dict and len(data) == 1:
        if type(data.get("tuple")) is list:
            return tuple(
                key_from_json(k, f"{where}['tuple'][{i}]") for i, k in enumerate(data["tuple"])
            )
        if type(data.get("repr")) is str:
            return ReprKey(data["repr"])
    raise InvalidTraceError(
        f"{where} must be null, a bool, str, int or finite number, {{'tuple': [...]}} or "
        f"{{'repr': '...'}}, got {data!r}."
    )


def key_spelling(key: Hashable) -> str:
    """How a key reads in JSON, as one string: equal for a key and the key read back.

    Example:
        >>> key_spelling(("p", 2)) == key_spelling(key_from_json(key_to_json(("p", 2))))
        True
    """
    try:
        return json.dumps(key_to_json(key), sort_keys=True)
    except (ValueError, RecursionError):  # InvalidTraceError; an int of too many digits
        return f"<unspellable {id(key)}>"  # equal to no other key's spelling


def _event_to_json(event: TraceEvent) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": event.kind, "slot": list(event.slot)}
    if event.kind != "claim":
        data["views"] = [list(view) for view in event.views]
    if event.kind != "acquire":
        data["key"] = key_to_json(event.key)
    return data


def events_to_json(events: tuple[TraceEvent, ...], indent: int | str | None = None) -> str:
    """The JSON text of a trace of ``events`` (:meth:`Trace.to_json`)."""
    written = []
    for i, event in enumerate(events):
        try:
            written.append(_event_to_json(event))
        except InvalidTraceError as err:
            raise InvalidTraceError(f"trace.events[{i}]: {err}") from None
        except RecursionError:
            raise InvalidTraceError(f"trace.events[{i}]: its key is nested too deeply") from None
    data = {"format": FORMAT, "version": VERSION, "events": written}
    try:
        return json.dumps(data, indent=indent, allow_nan=False)
    except TypeError as err:  # an indent json.dumps does not take ([1], 1.5)
        raise TraceTypeError(
            f"to_json(indent={indent!r}): indent must be what json.dumps takes (None, an "
            f"int or a str): {err}"
        ) from None
    except (ValueError, RecursionError) as err:  # an int key of too many digits, nesting
        where = _which(written)
        raise InvalidTraceError(f"trace cannot be written as JSON: {where}{err}") from None


def _which(written: list[dict[str, Any]]) -> str:
    """``trace.events[i]: `` for the first event JSON cannot write, else nothing."""
    for i, event in enumerate(written):
        try:
            json.dumps(event, allow_nan=False)
        except (ValueError, RecursionError):
            return f"trace.events[{i}]'s key: "
    return ""  # pragma: no cover - the whole failed, so one event does


def events_from_json(text: str | bytes) -> tuple[TraceEvent, ...]:
    """The events of the trace whose JSON text :func:`events_to_json` wrote
    (:meth:`Trace.from_json`)."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise TraceTypeError(
            f"text must be the JSON text of a trace (str or bytes), got "
            f"{type(text).__name__} {text!r:.80}."
        )
    try:
        return _events_from_json(text)
    except RecursionError:  # JSON nested deeper than any key a trace writes
        raise InvalidTraceError("text is nested too deeply to be a trace.") from None


def _events_from_json(text: str | bytes | bytearray) -> tuple[TraceEvent, ...]:
    try:
        data = json.loads(
            text, object_pairs_hook=lambda pairs: unique_fields(pairs, InvalidTraceError)
        )
    except InvalidTraceError:
        raise
    except ValueError as err:  # JSONDecodeError, and bytes that are not UTF-8
        raise InvalidTraceError(f"text is not JSON: {err}.") from None
    if type(data) is not dict:
        raise InvalidTraceError(f"trace must be a JSON object, got {data!r:.80}.")
    version = data.get("version")
    if data.get("format") != FORMAT or type(version) is not int or version != VERSION:
        raise InvalidTraceError(
            f"trace must have format={FORMAT!r} and version={VERSION}, got "
            f"format={data.get('format')!r}, version={data.get('version')!r}."
        )
    unknown = sorted(set(data) - {"format", "version", "events"}, key=str)
    if unknown:  # (what a version-1 trace holds; nothing in it is read past the events)
        raise InvalidTraceError(
            f"trace has field(s) {', '.join(map(repr, unknown))} that a version-{VERSION} "
            "trace does not have (format, version, events)."
        )
    events = data.get("events")
    if type(events) is not list:
        raise InvalidTraceError(f"trace['events'] must be a list, got {events!r:.80}.")
    return tuple(_event_from_json(e, f"trace['events'][{i}]") for i, e in enumerate(events))


def _event_from_json(data: Any, where: str) -> TraceEvent:
    if type(data) is not dict:
        raise InvalidTraceError(f"{where} must be a JSON object, got {data!r:.80}.")
    kind = data.get("kind")
    if kind not in EVENT_KINDS:
        raise InvalidTraceError(f"{where}['kind'] must be one of {EVENT_KINDS}, got {kind!r}.")
    allowed = {"kind", "slot"} | ({"views"} if kind != "claim" else set())
    allowed |= {"key"} if kind != "acquire" else set()
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidTraceError(f"{where} has fields a {kind} does not: {unknown}.")
    missing = sorted(allowed - set(data))
    if missing:
        raise InvalidTraceError(f"{where} has no field {missing[0]!r}.")
    slot = data["slot"]
    if type(slot) is not list or len(slot) != 2:
        raise InvalidTraceError(f"{where}['slot'] must be [ubatch, lane], got {slot!r}.")
    for i, part in enumerate(slot):
        check_int(part, f"{where}['slot'][{i}]", error=InvalidTraceError)
    views = data.get("views", [])
    if type(views) is not list:
        raise InvalidTraceError(f"{where}['views'] must be a list, got {views!r:.80}.")
    pairs = []
    for i, view in enumerate(views):
        if type(view) is not list or len(view) != 2:
            raise InvalidTraceError(
                f"{where}['views'][{i}] must be [nbytes, dtype name], got {view!r}."
            )
        pairs.append(tuple(view))
    key = key_from_json(data["key"], f"{where}['key']") if "key" in data else None
    try:
        return TraceEvent(kind, (slot[0], slot[1]), tuple(pairs), key)
    except InvalidTraceError as err:
        raise InvalidTraceError(f"{where}: {str(err).removeprefix('TraceEvent: ')}") from None
