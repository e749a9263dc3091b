"""HTML rendering for notebooks: one bar per slot, to scale, with a header and a legend."""

from __future__ import annotations

from html import escape
from typing import Any

from ._picture import COLOURS, picture_inputs, slot_pictures
from ._render import format_bytes


def render_html(obj: Any) -> str:
    """An HTML picture of a state or a manager (anything with ``.state``).

    Each slot is a horizontal bar scaled to the largest capacity: the last layout's views
    (coloured by dtype, labelled with dtype, shape and offset), alignment padding, free
    space and the retained tail (green while intact, red once clobbered); a black tick marks
    the high-water mark. The header gives the lock state and growth policy.

    Example:
        >>> from functional_ws import initial_state
        >>> html = render_html(initial_state())
        >>> "unlocked" in html and "slot (0, 0)" in html
        True
    """
    state, layouts, spans = picture_inputs(obj)
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
