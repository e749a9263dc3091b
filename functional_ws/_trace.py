"""What a run asked of its workspace: the requests, in order, each in its slot.

A :class:`Trace` is plain data, a tuple of :class:`~functional_ws.TraceEvent`: per event
its kind, its ``(ubatch, lane)`` slot, the byte count and dtype of each view, and the key.
Planning depends on a request only through its byte counts (the dtype is kept for
reading), so a trace is all :func:`functional_ws.worst_case` and
:func:`functional_ws.replay` need to size a workspace and to prove the size, with no
memory touched. Traces come from a recording (``interop.History.trace()``), from a
function that says what a workload asks for (built with :meth:`Trace.acquire`,
:meth:`Trace.retain` and :meth:`Trace.claim`), or from JSON (:meth:`Trace.from_json`; the
rules for keys are in ``_trace_json.py``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import jax

from ._build import fast_constructor
from ._errors import InvalidSlotError, TraceTypeError
from ._ops import _check_key, _validated
from ._presenters import Presented
from ._spec import as_spec, quick_spec
from ._state import Slot
from ._trace_events import EVENT_KINDS, TraceEvent, check_slot, dtype_label, short
from ._trace_json import events_from_json, events_to_json


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class Trace(Presented):
    """The requests a run made, in order: immutable, hashable, plain data.

    Build one by appending (each method returns a new trace), by adding traces
    (``warmup + serving``), from a recording (``interop.History.trace()``) or from
    :meth:`from_json`. ``print(trace)`` lists the events; a notebook shows a table.

    Attributes:
        events: the :class:`TraceEvent` of each request, in call order.

    Example:
        >>> import numpy as np
        >>> from functional_ws import Trace
        >>> t = Trace().acquire((0, 0), ((64, 32), np.float16), ((64,), np.int32))
        >>> t = t.retain((0, 0), ("deepseek", 3), ((256,), np.float32)).claim((0, 0), "scales")
        >>> t
        Trace(3 events in slot (0, 0): 1 acquire, 1 retain, 1 claim)
        >>> Trace.from_json(t.to_json()) == t
        True
    """

    events: tuple[TraceEvent, ...] = ()

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself

    def __post_init__(self) -> None:
        if type(self.events) is not tuple:
            raise TraceTypeError(
                f"Trace: events must be a tuple of TraceEvent, got {type(self.events).__name__} "
                f"{short(self.events)}."
            )
        for i, event in enumerate(self.events):
            if not isinstance(event, TraceEvent):
                raise TraceTypeError(
                    f"Trace: events[{i}] must be a TraceEvent, got {short(event)}."
                )

    # ----- building -----

    def acquire(self, slot: Slot, *specs: Any) -> Trace:
        """This trace and one ``get_simultaneous(*specs)`` in ``slot``.

        Args:
            slot: ``(ubatch, lane)``.
            *specs: ``(shape, dtype)`` pairs, validated as :func:`functional_ws.acquire`
                validates them.

        Returns:
            A new trace.

        Raises:
            InvalidSlotError: (``ValueError``) ``slot`` is not a pair of non-negative ints.
            InvalidSpecError: (``ValueError``) a malformed pair, naming it.
        """
        slot = check_slot(slot, "slot", InvalidSlotError)
        views = tuple((s.nbytes, dtype_label(s.dtype)) for s in _validated(specs, "specs"))
        return self._then(TraceEvent("acquire", slot, views))

    def retain(self, slot: Slot, key: Hashable, spec: Any) -> Trace:
        """This trace and one ``get_retained(key, shape, dtype)`` in ``slot``.

        Raises:
            InvalidSlotError: a bad slot.
            InvalidSpecError: a malformed ``(shape, dtype)`` or an unhashable key.
        """
        slot = check_slot(slot, "slot", InvalidSlotError)
        _check_key(key, "key")
        checked = quick_spec(spec) or as_spec(spec, "spec")
        view = ((checked.nbytes, dtype_label(checked.dtype)),)
        return self._then(TraceEvent("retain", slot, view, key))

    def claim(self, slot: Slot, key: Hashable) -> Trace:
        """This trace and one claim of the persistent ``key`` in ``slot``
        (``get_persistent_resource(key, ...)``; ``get_persistent(key, ...)`` claims
        ``(torch.Tensor, key)``).

        Raises:
            InvalidSlotError: a bad slot.
            InvalidSpecError: an unhashable key.
        """
        slot = check_slot(slot, "slot", InvalidSlotError)
        _check_key(key, "key")
        return self._then(TraceEvent("claim", slot, (), key))

    def _then(self, event: TraceEvent) -> Trace:
        return _trusted((*self.events, event))

    def __add__(self, other: Trace) -> Trace:
        """The events of this trace, then those of ``other``."""
        if not isinstance(other, Trace):
            return NotImplemented
        return _trusted(self.events + other.events)

    # ----- reading -----

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self.events)

    @property
    def slots(self) -> tuple[Slot, ...]:
        """The slots the events were made in, sorted."""
        return tuple(sorted({e.slot for e in self.events}))

    def __repr__(self) -> str:
        kinds: Counter[str] = Counter(e.kind for e in self.events)
        counts = ", ".join(f"{kinds[k]} {k}" for k in EVENT_KINDS if kinds[k])
        slots = self.slots
        text = f"{len(self.events)} event{'' if len(self.events) == 1 else 's'}"
        if len(slots) > _NAMED_SLOTS:  # (a repr, a header: one line, whatever the trace)
            text += f" in {len(slots):,} slots, {slots[0]} to {slots[-1]}"
        elif slots:
            text += f" in slot{'s' if len(slots) > 1 else ''} {', '.join(map(str, slots))}"
        return f"Trace({text}: {counts})" if counts else f"Trace({text})"

    # ----- JSON -----

    def to_json(self, *, indent: int | str | None = None) -> str:
        """The trace as JSON text (format ``functional-ws/trace``, version 1).

        Keys are written exactly when they are ``None``, a bool, a str, an int, a finite
        float or a tuple of those (nested tuples too); any other key is written as its
        ``repr`` and read back as a :class:`ReprKey` (see :meth:`from_json`).

        Args:
            indent: as :func:`json.dumps` (``None``, an int or a str).

        Raises:
            TraceTypeError: (``TypeError``) ``indent`` is of another type.
            InvalidTraceError: (``ValueError``) a key JSON cannot write (an int of more
                digits than Python converts, nesting too deep), naming its event.
        """
        return events_to_json(self.events, indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        """The trace that :meth:`to_json` wrote.

        A key written by its ``repr`` comes back as a :class:`ReprKey` holding that text:
        it equals no live object, but :func:`functional_ws.replay` matches a claim's
        :class:`ReprKey` with a persistent key of the same ``repr``, so a trace read back
        replays as the trace that was written against a state holding the keys it was
        recorded with. Keys equal to one another but spelled apart (an ``IntEnum`` or
        ``StrEnum`` member and its plain value, ``1+0j`` and ``1``) match live, but not
        once read back: claim a persistent key under one spelling.

        Raises:
            TraceTypeError: (``TypeError``) ``text`` is not a str or bytes.
            InvalidTraceError: (``ValueError``) not JSON, another format or version, or an
                event that is malformed, naming the field and its value.

        Example:
            >>> Trace.from_json('{"format": "functional-ws/trace", "version": 1, "events": []}')
            Trace(0 events)
        """
        return cls(events_from_json(text))


#: The most slots a trace's one-line summary names; past it, their count and the range.
_NAMED_SLOTS = 8

#: ``Trace(events)`` for events already checked, without checking each again: appending one
#: event to a trace of n would otherwise cost n checks, and building it n squared.
_trusted: Callable[[tuple[TraceEvent, ...]], Trace] = fast_constructor(Trace)
