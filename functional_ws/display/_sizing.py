"""Text and HTML for sizing: a trace, its events, and the shortfalls a replay finds.

Sizes in binary units (:func:`format_bytes`), exact bytes on hover in HTML; a key whose
``repr`` raises shows a placeholder, never an error.
"""

from __future__ import annotations

from html import escape

from .._presenters import clipped, key_text
from .._sizing import Shortfall
from .._trace import Trace
from .._trace_events import TraceEvent
from ._picture import dtype_colour
from ._text import counted, exact_bytes, format_bytes

#: The most events ``print(trace)`` lists and a notebook's table shows.
SHOWN = 30
SHOWN_HTML = 200
#: The views an event lists, in text and HTML (then how many more, and their bytes).
SHOWN_VIEWS = 16
_STYLE = (
    "<style>.fws-trace{font:12px sans-serif}.fws-trace table{border-collapse:collapse}"
    ".fws-trace td,.fws-trace th{padding:1px 8px;border-bottom:1px solid #ddd;text-align:left;"
    "vertical-align:top}.fws-dot{display:inline-block;width:10px;height:10px;"
    "margin-right:4px}</style>"
)


def event_text(event: TraceEvent) -> str:
    """An event in words, sizes in binary units.

    Example:
        >>> from functional_ws import TraceEvent
        >>> print(TraceEvent("acquire", (0, 0), ((8192, "bfloat16"), (40, "int32"))))
        get_simultaneous(8.00 KiB bfloat16, 40 B int32) in slot (0, 0)
    """
    shown, more = _shown_views(event)
    views = ", ".join([f"{format_bytes(n)} {clipped(dtype)}" for n, dtype in shown] + more)
    if event.kind == "acquire":
        return f"get_simultaneous({views}) in slot {event.slot}"
    if event.kind == "retain":
        return f"get_retained({key_text(event.key)}, {views}) in slot {event.slot}"
    return f"persistent key {key_text(event.key)} in slot {event.slot}"


def trace_text(trace: Trace) -> str:
    """A trace: its summary, then one line per event (the first :data:`SHOWN`).

    Example:
        >>> import numpy as np
        >>> from functional_ws import Trace
        >>> print(Trace().acquire((0, 0), ((100,), np.float32)).claim((1, 0), "scales"))
        Trace(2 events in slots (0, 0), (1, 0): 1 acquire, 1 claim)
            0  get_simultaneous(400 B float32) in slot (0, 0)
            1  persistent key 'scales' in slot (1, 0)
    """
    lines = [repr(trace)]
    lines += [f"  {i:3d}  {event_text(e)}" for i, e in enumerate(trace.events[:SHOWN])]
    if len(trace.events) > SHOWN:
        lines.append(f"  ... {counted(len(trace.events) - SHOWN, 'more event')}")
    return "\n".join(lines)


def _shown_views(event: TraceEvent) -> tuple[tuple[tuple[int, str], ...], list[str]]:
    """The views an event's line lists, and a phrase for the others (none, or one saying
    how many and their bytes): a request of 20,000 views stays a line."""
    shown = event.views[:SHOWN_VIEWS]
    rest = event.views[SHOWN_VIEWS:]
    if not rest:
        return shown, []
    nbytes = sum(n for n, _ in rest)
    return shown, [f"... {counted(len(rest), 'more view')} ({format_bytes(nbytes)})"]


def _views_html(event: TraceEvent) -> str:
    shown, more = _shown_views(event)
    return ", ".join(
        [
            f'<span class="fws-dot" style="background:{dtype_colour(dtype)}"></span>'
            f'<span title="{exact_bytes(n)}">{format_bytes(n)}</span> {escape(clipped(dtype))}'
            for n, dtype in shown
        ]
        + [escape(phrase) for phrase in more]
    )


def trace_html(trace: Trace) -> str:
    """A trace as a table: per event its number, call, slot, views and key."""
    rows = []
    for i, event in enumerate(trace.events[:SHOWN_HTML]):
        key = "" if event.kind == "acquire" else escape(key_text(event.key))
        rows.append(
            f"<tr><td>{i}</td><td><code>{event.call}</code></td><td>{escape(str(event.slot))}</td>"
            f"<td>{_views_html(event)}</td><td>{key}</td></tr>"
        )
    more = len(trace.events) - SHOWN_HTML
    tail = f"<div><i>... {counted(more, 'more event')}</i></div>" if more > 0 else ""
    return (
        f'{_STYLE}<div class="fws-trace"><div><b>{escape(repr(trace))}</b></div>'
        '<div style="max-height:24em;overflow-y:auto"><table><tr><th>#</th><th>call</th>'
        f"<th>slot</th><th>views</th><th>key</th></tr>{''.join(rows)}</table></div>{tail}</div>"
    )


def shortfall_text(shortfall: Shortfall) -> str:
    """A shortfall in one line: the event, the bytes it needs and the capacity it finds.

    Example:
        >>> from functional_ws import Shortfall, TraceEvent
        >>> event = TraceEvent("acquire", (0, 0), ((6144, "float16"),))
        >>> print(Shortfall(3, event, 6144, 5888, (((0, 0), 6144),)))
        event 3, get_simultaneous(6.00 KiB float16) in slot (0, 0): needs 6.00 KiB,
          finds 5.75 KiB (256 B short)
    """
    head = f"event {shortfall.index}, {event_text(shortfall.event)}"
    if shortfall.event.kind == "claim":
        return f"{head}: a new key, which a locked workspace refuses"
    return (
        f"{head}: needs {format_bytes(shortfall.needed)}, finds "
        f"{format_bytes(shortfall.capacity)} ({_short_by(shortfall)})"
    )


def _short_by(shortfall: Shortfall) -> str:
    """How much the slot lacks, or, where it fits and only the other slots of its lane
    must grow with it (``growth="ubatches"``), which ones.

    Example:
        >>> from functional_ws import Shortfall, TraceEvent
        >>> event = TraceEvent("retain", (1, 0), ((100, "uint8"),), "kv")
        >>> print(_short_by(Shortfall(0, event, 100, 1024, (((0, 0), 100),))))
        it fits; slot (0, 0) grows with it to 100 B: growth="ubatches" keeps a lane's slots in step
    """
    if shortfall.missing or not shortfall.growth:
        return f"{format_bytes(shortfall.missing)} short"
    grown = ", ".join(
        f"slot {slot} grows with it to {format_bytes(nbytes)}"
        for slot, nbytes in shortfall.growth
        if slot != shortfall.slot
    )
    return f'it fits; {grown}: growth="ubatches" keeps a lane\'s slots in step'


def shortfall_html(shortfall: Shortfall) -> str:
    """A shortfall as one line of HTML, exact bytes on hover."""
    head = (
        f"<b>event {shortfall.index}</b>, <code>{shortfall.call}</code> in slot "
        f"{escape(str(shortfall.slot))}: {_views_html(shortfall.event)}"
    )
    if shortfall.event.kind == "claim":
        body = (
            f"the new key {escape(key_text(shortfall.event.key))}, which a locked workspace refuses"
        )
    else:
        body = (
            f'needs <span title="{exact_bytes(shortfall.needed)}">'
            f"{format_bytes(shortfall.needed)}</span>, finds "
            f'<span title="{exact_bytes(shortfall.capacity)}">'
            f"{format_bytes(shortfall.capacity)}</span> "
            f'(<b style="color:#b00">{escape(_short_by(shortfall))}</b>)'
        )
    return f'<div style="font:12px sans-serif">{head}: {body}</div>'
