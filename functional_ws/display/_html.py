"""HTML rendering for notebooks: one bar per slot, to scale, with a header and a legend."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from .._layout import Layout, Span
from .._state import Slot, WorkspaceState
from ._picture import COLOURS, slot_pictures
from ._text import format_bytes


def render_html(
    state: WorkspaceState,
    layouts: Mapping[Slot, Layout] | None = None,
    spans: Mapping[Slot, Span] | None = None,
) -> str:
    """An HTML picture of a state, with the last layout and span per slot if given.

    Each slot is a horizontal bar scaled to the largest capacity: the last layout's views
    (coloured by dtype, labelled with dtype, shape and offset), alignment padding, free
    space and the retained tail (green while intact, red once clobbered); a black tick marks
    the high-water mark. The header gives the lock state and growth policy.

    Args:
        state: the state to draw.
        layouts: per slot, the last :class:`~functional_ws.Layout` (the views drawn); a
            manager keeps them as ``last_layouts``.
        spans: per slot, the last :class:`~functional_ws.Span` (drawn intact or
            clobbered); a manager keeps them as ``last_spans``.

    Returns:
        HTML text (a manager's ``_repr_html_`` returns it with its own plans).

    Example:
        >>> from functional_ws import initial_state, render_html
        >>> html = render_html(initial_state())
        >>> "unlocked" in html and "slot (0, 0)" in html
        True
    """
    _check_state(state, "render_html")
    pictures = slot_pictures(state, layouts, spans)
    scale = max([p.capacity for p in pictures] + [1])
    lock = "🔒 locked" if state.locked else "unlocked"
    header = (
        f"<b>WorkspaceState</b>: {state.num_ubatches} ubatch(es) × {state.num_lanes} lane(s), "
        f"alignment {state.alignment}, growth <code>{escape(state.growth)}</code>, {lock}"
    )
    rows = []
    for p in pictures:
        width = 100.0 * p.capacity / scale
        bars = []
        for seg in p.segments:
            left = 100.0 * seg.start / max(p.capacity, 1)
            size = 100.0 * (seg.end - seg.start) / max(p.capacity, 1)
            text = escape(seg.label) if size > 12 else ""
            bars.append(
                f'<div class="fws-seg fws-{seg.kind}" title="{escape(seg.label)} '
                f'[{seg.start}, {seg.end})" style="left:{left:.3f}%;width:{size:.3f}%;'
                f'background:{seg.colour}">{text}</div>'
            )
        if p.capacity:
            mark = 100.0 * p.high_water / p.capacity
            bars.append(
                f'<div class="fws-hw" title="high water {p.high_water} B" '
                f'style="left:{min(mark, 100):.3f}%"></div>'
            )
        rows.append(
            f'<div class="fws-row"><span class="fws-name">slot {p.slot}</span>'
            f'<div class="fws-bar" style="width:{width:.3f}%">{"".join(bars)}</div>'
            f'<span class="fws-cap">{format_bytes(p.capacity)} '
            f"(high water {format_bytes(p.high_water)})</span></div>"
        )
    legend = " ".join(
        f'<span style="background:{c};padding:0 6px">{k}</span>' for k, c in COLOURS.items()
    )
    return (
        "<style>.fws-row{display:flex;align-items:center;margin:2px 0;font:12px monospace}"
        ".fws-name{width:8em}.fws-bar{position:relative;height:22px;background:#fff;"
        "border:1px solid #888;flex:none;max-width:70%}.fws-wrap{width:100%}"
        ".fws-seg{position:absolute;top:0;height:100%;overflow:hidden;white-space:nowrap;"
        "color:#fff;font-size:10px;line-height:22px;box-sizing:border-box;"
        "border-right:1px solid #fff}.fws-free{color:#555}"
        ".fws-hw{position:absolute;top:-3px;height:28px;border-left:2px solid #000}"
        ".fws-cap{margin-left:8px}</style>"
        f'<div class="fws-wrap"><div>{header}</div>{"".join(rows)}'
        f'<div style="font:11px sans-serif;margin-top:4px">{legend} '
        "| view colours by dtype | ▏high water</div></div>"
    )


def _check_state(state: object, who: str) -> None:
    if not isinstance(state, WorkspaceState):
        raise TypeError(
            f"{who} draws a WorkspaceState, got {type(state).__name__}. For a manager, call "
            f"ws.plot() (or display the manager itself), or pass ws.state, ws.last_layouts, "
            f"ws.last_spans."
        )
