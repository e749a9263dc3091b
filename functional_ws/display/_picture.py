"""The workspace as a picture: per slot, coloured byte ranges to scale.

One computation feeds every renderer (HTML in notebooks, matplotlib for papers), so they
always agree. A picture is drawn from a state plus, optionally, what a shell remembers of
the last call per slot: the last :class:`Layout` (the views) and the last :class:`Span`.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Any, Literal

from .._layout import Layout, Span
from .._spec import round_up
from .._state import Slot, WorkspaceState

SegmentKind = Literal["view", "padding", "retained", "clobbered", "free"]

#: Fixed colours for what is not a view. Green and red belong to the retained tail (intact,
#: clobbered), light grey to free space, mid grey to padding: no dtype colour comes near them
#: (a test checks the distance).
COLOURS = {
    "padding": "#999999",
    "free": "#eeeeee",
    "retained": "#1a9641",
    "clobbered": "#d7191c",
}
#: Dark colours for dtypes, all legible under white labels, from the blue, purple, brown and
#: orange families only (Okabe-Ito and Tol's palettes), so a view never looks like the tail.
DTYPE_PALETTE = ("#0072B2", "#332288", "#882255", "#AA4499", "#7f3b08", "#994F00", "#1f4e79")
#: Common dtypes get colours of their own, so that they never share one in a picture.
KNOWN_DTYPES = {
    "float32": "#0072B2",
    "bfloat16": "#D55E00",
    "float16": "#882255",
    "int32": "#6a3d9a",
    "int8": "#332288",
    "uint8": "#AA4499",
    "int64": "#7f3b08",
    "float64": "#994F00",
    "bool": "#1f4e79",
}


def dtype_name(dtype: Any) -> str:
    """A dtype's name without a ``torch.`` prefix (``torch.float32`` and numpy's agree)."""
    return str(dtype).removeprefix("torch.")


def dtype_colour(dtype: Any) -> str:
    """A stable colour per dtype (the same in every process); ``torch.`` prefixes ignored.

    Example:
        >>> dtype_colour("float32") != dtype_colour("int32")
        True
    """
    name = str(dtype).removeprefix("torch.")
    if name in KNOWN_DTYPES:
        return KNOWN_DTYPES[name]
    return DTYPE_PALETTE[zlib.crc32(name.encode()) % len(DTYPE_PALETTE)]


@dataclasses.dataclass(frozen=True)
class Segment:
    """A byte range ``[start, end)`` of one slot and what it holds.

    Attributes:
        kind: what the bytes are.
        start, end: the range, in bytes from the slot's base.
        label: text for a tooltip or the bar.
        colour: the fill colour.
        dtype: a view's dtype name (``torch.`` prefix dropped), else ``""``.
    """

    kind: SegmentKind
    start: int
    end: int
    label: str
    colour: str
    dtype: str = ""


@dataclasses.dataclass(frozen=True)
class SlotPicture:
    """Everything drawn for one slot."""

    slot: Slot
    capacity: int
    high_water: int
    segments: tuple[Segment, ...]


def slot_pictures(
    state: WorkspaceState,
    layouts: Mapping[Slot, Layout] | None = None,
    spans: Mapping[Slot, Span] | None = None,
) -> list[SlotPicture]:
    """Segments per slot: views and their padding, the retained span, free space.

    A span remembered in ``spans`` is "retained" while the state still retains it at that
    offset, and "clobbered" once the state dropped it (a request reached into it or the slot
    was reallocated); without ``spans`` only the state's retained span is drawn.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire
        >>> from functional_ws.display import slot_pictures
        >>> s, layout = acquire(initial_state(), (0, 0), ((100,), np.dtype("float32")))
        >>> [(g.kind, g.start, g.end) for g in slot_pictures(s, {(0, 0): layout})[0].segments]
        [('view', 0, 400), ('padding', 400, 512)]
    """
    layouts, spans = layouts or {}, spans or {}
    pictures = []
    for slot, s in zip(state.all_slots(), state.slots, strict=True):
        segments: list[Segment] = []
        layout = layouts.get(slot)
        used = 0
        if layout is not None and layout.total <= s.capacity:
            for spec, offset in zip(layout.specs, layout.offsets, strict=True):
                end, padded = offset + spec.nbytes, offset + round_up(spec.nbytes, state.alignment)
                label = f"{spec.dtype}{list(spec.shape)} @{offset}"
                if end > offset:
                    name = str(spec.dtype).removeprefix("torch.")
                    colour = dtype_colour(spec.dtype)
                    segments.append(Segment("view", offset, end, label, colour, name))
                if padded > end:
                    segments.append(Segment("padding", end, padded, "padding", COLOURS["padding"]))
            used = layout.total
        tail = _tail_segment(s.retained, spans.get(slot), s.capacity)
        # Free space: what neither the views nor the tail cover.
        gaps = [(used, s.capacity)]
        if tail is not None:
            gaps = [(used, min(tail.start, s.capacity)), (max(used, tail.end), s.capacity)]
        segments.extend(
            Segment("free", start, end, "free", COLOURS["free"])
            for start, end in gaps
            if end > start
        )
        if tail is not None:
            segments.append(tail)
        pictures.append(SlotPicture(slot, s.capacity, s.high_water, tuple(segments)))
    return pictures


def _tail_segment(
    retained: tuple[Any, int] | None, span: Span | None, capacity: int
) -> Segment | None:
    if span is not None and span.offset + span.nbytes <= capacity:
        intact = retained == (span.key, span.offset)
        kind: SegmentKind = "retained" if intact else "clobbered"
        label = f"retained {span.key!r} ({'intact' if intact else 'clobbered'})"
        return Segment(kind, span.offset, span.offset + span.nbytes, label, COLOURS[kind])
    if retained is not None:
        key, start = retained
        return Segment("retained", start, capacity, f"retained {key!r}", COLOURS["retained"])
    return None
