"""Text and HTML for the core's small values: a layout, a span, a diff and its changes.

Sizes are in binary units (:func:`format_bytes`), with the exact bytes on hover in HTML.
"""

from __future__ import annotations

from html import escape
from typing import Any

from .._diff import Change, Diff
from .._layout import Growth, Layout, Span
from .._presenters import key_text
from .._spec import round_up
from ._picture import dtype_colour, dtype_name
from ._text import counted, exact_bytes, first_and_last, format_bytes

_TABLE = (
    "<style>.fws-value{font:12px sans-serif}"
    ".fws-table{border-collapse:collapse;font:12px sans-serif}"
    ".fws-table td,.fws-table th{padding:1px 8px;border-bottom:1px solid #ddd;text-align:left;"
    "vertical-align:top}.fws-table .fws-num{text-align:right}"
    ".fws-dot{display:inline-block;width:10px;height:10px;margin-right:4px}</style>"
)
_BYTE_FIELDS = ("capacity", "high_water", "max_capacity")


def _growth_text(growth: Growth) -> str:
    if not growth:
        return "no growth"
    return "grows " + ", ".join(f"slot {slot} to {format_bytes(n)}" for slot, n in growth)


def layout_text(layout: Layout) -> str:
    """A layout in words: its slot, total, growth and one line per view.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire
        >>> _, layout = acquire(initial_state(), (0, 0), ((100,), np.dtype("float32")),
        ...                     ((3,), np.dtype("int8")))
        >>> print(layout)  # doctest: +NORMALIZE_WHITESPACE
        Layout of slot (0, 0): 2 views, 768 B with padding (alignment 256),
          grows slot (0, 0) to 768 B
          float32[100] @0: 400 B
          int8[3] @512: 3 B
    """
    lines = [
        f"Layout of slot {layout.slot}: {counted(len(layout.specs), 'view')}, "
        f"{format_bytes(layout.total)} with padding (alignment {layout.alignment}), "
        f"{_growth_text(layout.growth)}"
    ]
    lines += [
        f"  {dtype_name(spec.dtype)}{list(spec.shape)} @{offset}: {format_bytes(spec.nbytes)}"
        for spec, offset in zip(layout.specs, layout.offsets, strict=True)
    ]
    return "\n".join(lines)


#: The most views a layout's table lists (the first and last half); ``str(layout)`` lists all.
SHOWN_VIEWS = 200


def layout_html(layout: Layout) -> str:
    """A layout as a table: one row per view (dtype, shape, offset, size, padding), at most
    :data:`SHOWN_VIEWS` of them, the first and the last."""
    rows = []
    count, half = len(layout.specs), SHOWN_VIEWS // 2
    for i in first_and_last(count, SHOWN_VIEWS):  # a line for the views between
        if i is None:
            rows.append(
                f'<tr><td></td><td colspan="5"><i>... {counted(count - SHOWN_VIEWS, "view")} '
                f"not shown (views {half} to {count - half - 1}; print(layout) lists every "
                "view)</i></td></tr>"
            )
            continue
        spec, offset = layout.specs[i], layout.offsets[i]
        padding = round_up(spec.nbytes, layout.alignment) - spec.nbytes
        name = dtype_name(spec.dtype)
        rows.append(
            f'<tr><td class="fws-num">{i}</td><td><span class="fws-dot" '
            f'style="background:{dtype_colour(spec.dtype)}"></span>{escape(name)}</td>'
            f"<td>{escape(str(list(spec.shape)))}</td>{_bytes_cell(offset)}"
            f"{_bytes_cell(spec.nbytes)}{_bytes_cell(padding)}</tr>"
        )
    head = (
        f"<b>Layout</b> of slot {escape(str(layout.slot))}: "
        f"{counted(len(layout.specs), 'view')}, {format_bytes(layout.total)} with padding "
        f"(alignment {layout.alignment}), {escape(_growth_text(layout.growth))}"
    )
    return (
        f'{_TABLE}<div class="fws-value">{head}</div><table class="fws-table"><tr><th>view</th>'
        f"<th>dtype</th><th>shape</th><th>offset</th><th>size</th><th>padding</th></tr>"
        f"{''.join(rows)}</table>"
    )


def span_text(span: Span) -> str:
    """A retained span in words.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, retain
        >>> print(retain(initial_state(), (0, 0), "kv", ((300,), np.dtype("uint8")))[1])
        Span 'kv' of slot (0, 0): uint8[300] @0, 300 B (alignment 256), grows slot (0, 0) to 300 B
    """
    return (
        f"Span {key_text(span.key)} of slot {span.slot}: {_span_view(span)} @{span.offset}, "
        f"{format_bytes(span.nbytes)} (alignment {span.alignment}), {_growth_text(span.growth)}"
    )


def _span_view(span: Span) -> str:
    return f"{dtype_name(span.spec.dtype)}{list(span.spec.shape)}"


def span_html(span: Span) -> str:
    """A retained span as one line of HTML, exact bytes on hover."""
    return (
        f'<div style="font:12px sans-serif"><b>Span</b> {escape(key_text(span.key))} of slot '
        f"{escape(str(span.slot))}: "
        f'<span class="fws-dot" style="display:inline-block;width:10px;height:10px;'
        f'background:{dtype_colour(span.spec.dtype)}"></span>{escape(_span_view(span))} at '
        f'<span title="{exact_bytes(span.offset)}">offset {format_bytes(span.offset)}</span>, '
        f'<span title="{exact_bytes(span.nbytes)}">{format_bytes(span.nbytes)}</span> '
        f"(alignment {span.alignment}), {escape(_growth_text(span.growth))}</div>"
    )


def _value_text(field: str, value: Any) -> str:
    if field in _BYTE_FIELDS and isinstance(value, int):
        return format_bytes(value)
    if field == "retained":
        if value is None:
            return "none"
        key, start = value
        return f"{key_text(key)} at offset {format_bytes(start)}"
    return repr(value)


def _value_title(field: str, value: Any) -> str:
    if field in _BYTE_FIELDS and isinstance(value, int):
        return exact_bytes(value)
    if field == "retained" and value is not None:
        return f"offset {exact_bytes(value[1])}"
    return repr(value)


def change_text(change: Change) -> str:
    """One change in words, sizes in binary units.

    Example:
        >>> from functional_ws import Change
        >>> print(Change((0, 0), "capacity", 0, 266240))
        slot (0, 0): capacity 0 B → 260.00 KiB
    """
    where = "workspace" if change.slot is None else f"slot {change.slot}"
    before, after = change.before, change.after
    if change.field == "persistent_keys":
        added = sorted(map(key_text, after - before))
        removed = sorted(map(key_text, before - after))
        parts = [f"+{k}" for k in added] + [f"-{k}" for k in removed]
        return f"{where}: persistent_keys {' '.join(parts)}"
    return (
        f"{where}: {change.field} {_value_text(change.field, before)} → "
        f"{_value_text(change.field, after)}"
    )


def diff_text(changes: Diff) -> str:
    """One line per change, or ``no differences``."""
    return "\n".join(map(change_text, changes)) if changes else "no differences"


def diff_html(changes: Diff) -> str:
    """A table of changes: where, field, before, after (exact bytes on hover)."""
    if not changes:
        return "<i>no differences</i>"
    rows = []
    for c in changes:
        where = "workspace" if c.slot is None else f"slot {c.slot}"
        if c.field == "persistent_keys":
            before = ", ".join(sorted(map(key_text, c.before))) or "none"
            after = ", ".join(sorted(map(key_text, c.after))) or "none"
            cells = f"<td>{escape(before)}</td><td>{escape(after)}</td>"
        else:
            cells = "".join(
                f'<td title="{escape(_value_title(c.field, v))}">'
                f"{escape(_value_text(c.field, v))}</td>"
                for v in (c.before, c.after)
            )
        rows.append(f"<tr><td>{escape(where)}</td><td>{escape(c.field)}</td>{cells}</tr>")
    return (
        f'{_TABLE}<table class="fws-table"><tr><th>where</th><th>field</th><th>before</th>'
        f"<th>after</th></tr>{''.join(rows)}</table>"
    )


def _bytes_cell(n: int) -> str:
    return f'<td class="fws-num" title="{exact_bytes(n)}">{format_bytes(n)}</td>'
