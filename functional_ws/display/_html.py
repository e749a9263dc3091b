"""HTML rendering for notebooks: one bar per slot, a header, a colour key for what is drawn.

Sizes are in CSS pixels, so that every view can be given a minimum width (:data:`MIN_VIEW_PX`)
and every label inside a bar is printed whole or not at all (its full text is the hover text,
with the exact bytes). Only characters of the Basic Multilingual Plane, no emoji: the lock
is the word "locked".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from .._layout import Layout, Span
from .._state import Slot, WorkspaceState
from ._picture import (
    Placement,
    Segment,
    SlotPicture,
    colour_keys,
    held_bytes,
    place,
    slot_pictures,
)
from ._text import check_state, counted, describe_state, drawn_slots, exact_bytes, format_bytes

#: The widest slot's bar, in CSS pixels; the others are to scale.
BAR_PX = 560
#: The narrowest a view is drawn, in CSS pixels.
MIN_VIEW_PX = 4.0
#: Width of one character of the bars' 10 px monospace labels, with some slack.
_CHAR_PX = 6.3
#: Fixed kinds light enough to need dark text.
_LIGHT = {"free", "requested", "padding", "more"}

STYLE = (
    "<style>.fws{font:12px sans-serif;overflow-x:auto;padding:2px 0}"
    ".fws-row{display:flex;align-items:center;margin:3px 0;white-space:nowrap}"
    ".fws-name{flex:none;width:10em;font-family:monospace}"
    ".fws-bar{flex:none;position:relative;height:22px;background:#fff;border:1px solid #888}"
    ".fws-empty{border-style:dashed}"
    ".fws-seg{position:absolute;top:0;height:100%;overflow:hidden;box-sizing:border-box}"
    ".fws-view{box-shadow:inset -1px 0 #fff}"
    ".fws-band{top:auto;bottom:0;height:40%;border-top:1px solid #fff}"
    ".fws-label{display:inline-block;padding:0 3px;font:10px/22px monospace;color:#fff}"
    ".fws-dark{color:#333}"
    ".fws-hw{position:absolute;top:-4px;width:0;height:28px;border-left:2px solid #000}"
    ".fws-cap{flex:none;margin-left:8px}"
    ".fws-info{margin:0 0 3px 10em;color:#444;white-space:normal;overflow-wrap:anywhere}"
    ".fws-keys{margin-top:5px;display:flex;flex-wrap:wrap;gap:4px 12px}"
    ".fws-key{display:inline-flex;align-items:center;gap:4px}"
    ".fws-swatch{display:inline-block;width:14px;height:12px;border:1px solid #888}"
    ".fws-swatch-hw{width:0;border:none;border-left:2px solid #000}"
    ".fws-note{color:#555;margin-top:3px;white-space:normal}</style>"
)


def render_html(
    state: WorkspaceState,
    layouts: Mapping[Slot, Layout] | None = None,
    spans: Mapping[Slot, Span] | None = None,
    *,
    title: str = "WorkspaceState",
    details: Sequence[str] = (),
) -> str:
    """An HTML picture of a state, with the last layout and span per slot if given.

    Each slot is a horizontal bar, its length to scale with the largest capacity; inside
    it, every view is at least :data:`MIN_VIEW_PX` wide (less in a bar too short to give
    each of its views that much): the last layout's views (coloured by dtype),
    alignment padding, bytes earlier requests reached (up to the high-water mark), free
    space, and the retained span (green while intact, red once clobbered; a band under the
    views that reach into it); a black tick marks the high-water mark. Hovering a range
    shows its exact offset and size. The header names what is drawn, its slots, alignment,
    growth policy and lock; the colour key lists every dtype and kind drawn.

    Args:
        state: the state to draw.
        layouts: per slot, the last :class:`~functional_ws.Layout` (the views drawn); a
            manager keeps them as ``last_layouts``.
        spans: per slot, the last :class:`~functional_ws.Span` (drawn intact or
            clobbered); a manager keeps them as ``last_spans``.
        title: what the header calls the picture (a manager passes its own name).
        details: more words for the header (a manager passes its device and allocator).

    Returns:
        HTML text (a manager's ``_repr_html_`` returns it with its own plans).

    Raises:
        TypeError: ``state`` is not a :class:`~functional_ws.WorkspaceState`.

    Example:
        >>> from functional_ws import initial_state, render_html
        >>> html = render_html(initial_state())
        >>> "unlocked" in html and "slot (0, 0)" in html
        True
    """
    check_state(state, "render_html")
    pictures, left_out = drawn_slots(slot_pictures(state, layouts, spans), held_bytes)
    widest = max([p.capacity for p in pictures] + [1])
    words = ", ".join([describe_state(state), *details])
    header = f'<div class="fws-head"><b>{escape(title)}</b>: {escape(words)}</div>'
    rows = "".join(_row(p, BAR_PX * p.capacity / widest) for p in pictures)
    if left_out:
        rows += f'<div class="fws-info"><i>... {escape(left_out)}</i></div>'
    note = (
        f'<div class="fws-note">Bars to scale; inside a bar, a view narrower than '
        f"{MIN_VIEW_PX:g} px is drawn {MIN_VIEW_PX:g} px wide (less in a bar too short for "
        "that); hover a range for its exact offset and size.</div>"
    )
    return f'{STYLE}<div class="fws">{header}{rows}{colour_key(pictures)}{note}</div>'


#: The persistent keys a slot's row names (then how many more).
SHOWN_KEYS = 20


def _row(p: SlotPicture, width: float) -> str:
    placed = place(p, width, MIN_VIEW_PX)
    segments = "".join(
        _segment(seg, x0, x1) for seg, (x0, x1) in zip(p.segments, placed.spans, strict=True)
    )
    empty = " fws-empty" if not p.capacity else ""
    if p.capacity:
        caption = f"{format_bytes(p.capacity)}, high water {format_bytes(p.high_water)}"
    elif p.high_water:  # a growth failed twice: the slot lost its buffer
        caption = f"no buffer now, high water {format_bytes(p.high_water)}"
    else:
        caption = "no buffer yet"
    info = ""
    if p.persistent_keys:
        shown = p.persistent_keys[:SHOWN_KEYS]
        more = len(p.persistent_keys) - len(shown)
        keys = ", ".join(shown) + (f", ... {counted(more, 'more key')}" if more else "")
        info = (
            f'<div class="fws-info">{counted(len(p.persistent_keys), "persistent key")}: '
            f"{escape(keys)}</div>"
        )
    return (
        f'<div class="fws-row" data-slot="{escape(str(p.slot))}">'
        f'<span class="fws-name">slot {escape(str(p.slot))}</span>'
        f'<div class="fws-bar{empty}" data-capacity="{p.capacity}" '
        f'style="width:{placed.width:.2f}px">{segments}'
        f"{_high_water(p, placed)}</div>"
        f'<span class="fws-cap" title="capacity {exact_bytes(p.capacity)}, high water '
        f'{exact_bytes(p.high_water)}">{caption}</span></div>{info}'
    )


def _segment(seg: Segment, x0: float, x1: float) -> str:
    width = x1 - x0
    # A band is too low for a line of text: its words are in the hover text only.
    fits = () if seg.over else seg.short
    label = next((t for t in fits if len(t) * _CHAR_PX + 6 <= width), "")
    dark = " fws-dark" if seg.kind in _LIGHT else ""
    text = f'<span class="fws-label{dark}">{escape(label)}</span>' if label else ""
    classes = f"fws-seg fws-{seg.kind}" + (" fws-band" if seg.over else "")
    dtype = f' data-dtype="{escape(seg.dtype)}"' if seg.dtype else ""
    return (
        f'<div class="{classes}"{dtype} data-start="{seg.start}" data-end="{seg.end}" '
        f'title="{escape(seg.detail or seg.label)}" '
        f'style="left:{x0:.2f}px;width:{width:.2f}px;background:{seg.colour}">{text}</div>'
    )


def _high_water(p: SlotPicture, placed: Placement) -> str:
    if not p.capacity:
        return ""
    return (
        f'<div class="fws-hw" title="high water: {exact_bytes(p.high_water)}" '
        f'style="left:{placed.high_water - 1:.2f}px"></div>'
    )


def colour_key(pictures: Sequence[SlotPicture]) -> str:
    """The colour key of a picture: a swatch per dtype and kind drawn, and the high-water mark."""
    keys = [
        f'<span class="fws-key" data-key="{escape(key.name)}"'
        + (f' data-dtype="{escape(key.dtype)}"' if key.dtype else "")
        + f' title="{escape(key.meaning)}"><span class="fws-swatch" '
        f'style="background:{key.colour}"></span>{escape(key.dtype or key.meaning)}</span>'
        for key in colour_keys(pictures)
    ]
    if any(p.capacity for p in pictures):
        keys.append(
            '<span class="fws-key" data-key="high water" title="the largest request so far">'
            '<span class="fws-swatch fws-swatch-hw"></span>high water</span>'
        )
    return f'<div class="fws-keys">{"".join(keys)}</div>'
