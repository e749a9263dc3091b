"""The workspace as a picture: per slot, coloured byte ranges, and where each one is drawn.

One computation feeds every renderer (HTML in notebooks, matplotlib for papers), so they
always agree. A picture is drawn from a state plus, optionally, what a shell remembers of
the last call per slot: the last :class:`Layout` (the views) and the last :class:`Span`.

The scale. Every bar is to scale: its length is its capacity's share of the widest. Inside
a bar, every view is drawn at least a minimum width (:func:`place`): a 256-byte view beside
a 2 MiB one would otherwise be a fraction of a pixel wide. The views that would be narrower
get the minimum, and the rest of the bar shares the remaining width to scale; a bar too
short to give each of its views the minimum gives them less, never a longer bar. The exact
offsets and sizes are in each segment's ``detail`` (the HTML's hover text).
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from .._layout import Layout, Span
from .._presenters import key_text
from .._spec import round_up
from .._state import Slot, WorkspaceState
from .._trace_events import dtype_label
from ._text import counted, exact_bytes

SegmentKind = Literal["view", "more", "padding", "requested", "free", "retained", "clobbered"]

#: Fixed colours for what is not a view. Green and red belong to the retained tail (intact,
#: clobbered), light grey to free space, mid grey to padding, sand to bytes earlier requests
#: reached: no dtype colour comes near them (a test checks the distance).
COLOURS = {
    "more": "#c6a8d8",
    "padding": "#999999",
    "requested": "#e0c97f",
    "free": "#eeeeee",
    "retained": "#1a9641",
    "clobbered": "#d7191c",
}
#: What each fixed colour means, for the colour keys.
MEANINGS = {
    "padding": "alignment padding",
    "requested": "requested earlier, no view drawn",
    "free": "free (above high water)",
    "retained": "retained span, intact",
    "clobbered": "retained span, clobbered",
    "more": "more views, not drawn one by one",
}
#: The most views of one layout drawn one by one; the rest are one ``"more"`` range (a
#: request of 20,000 views made 8 MB of HTML, each view a hundredth of a pixel wide).
MAX_DRAWN_VIEWS = 100
#: Dark colours for dtypes without one of their own, all legible under white labels and far
#: from the fixed colours above.
DTYPE_PALETTE = ("#1f4e79", "#5b6e00", "#a0306a", "#4b2a6e", "#8a3b12", "#006a4e", "#54585e")
#: Common dtypes get colours of their own, pairwise distinct (a test checks the distance),
#: so that no two of them look alike in a picture.
KNOWN_DTYPES = {
    "float32": "#0072B2",
    "bfloat16": "#D55E00",
    "float16": "#882255",
    "int32": "#6a3d9a",
    "int8": "#00686e",
    "uint8": "#a08000",
    "int64": "#3b3b3b",
    "float64": "#6b3a0a",
    "bool": "#d01c8b",
}


def dtype_name(dtype: Any) -> str:
    """A dtype's name without a ``torch.`` prefix (``torch.float32``, numpy's
    ``dtype("float32")`` and its scalar type ``np.float32`` agree), as a trace spells it.

    Example:
        >>> import numpy as np
        >>> dtype_name(np.float32), dtype_name(np.dtype("float32"))
        ('float32', 'float32')
    """
    return dtype_label(dtype)


def dtype_colour(dtype: Any) -> str:
    """A stable colour per dtype (the same in every process); ``torch.`` prefixes ignored.

    Example:
        >>> dtype_colour("float32") != dtype_colour("int32")
        True
    """
    name = dtype_name(dtype)
    if name in KNOWN_DTYPES:
        return KNOWN_DTYPES[name]
    return DTYPE_PALETTE[zlib.crc32(name.encode()) % len(DTYPE_PALETTE)]


@dataclasses.dataclass(frozen=True)
class Segment:
    """A byte range ``[start, end)`` of one slot and what it holds.

    Attributes:
        kind: what the bytes are.
        start, end: the range, in bytes from the slot's base (a zero-sized view has
            ``start == end`` and is still drawn).
        label: a one-line description (``torch.float32[100] @0``).
        colour: the fill colour.
        dtype: a view's dtype name (``torch.`` prefix dropped), else ``""``.
        detail: the exact description: sizes and offsets in bytes (the hover text).
        short: labels to print inside the bar, longest first; a renderer prints the
            first that fits whole, or none.
        over: drawn as a band over the views it overlaps (a retained span that views of
            the last request reach into), not as part of the bar's row of ranges.
    """

    kind: SegmentKind
    start: int
    end: int
    label: str
    colour: str
    dtype: str = ""
    detail: str = ""
    short: tuple[str, ...] = ()
    over: bool = False


@dataclasses.dataclass(frozen=True)
class SlotPicture:
    """Everything drawn for one slot.

    Attributes:
        slot: the ``(ubatch, lane)``.
        capacity, high_water: as in the state.
        segments: the ranges; those with ``over=False`` lie back to back from 0 to
            ``capacity``, in order; bands (``over=True``) come last.
        persistent_keys: the slot's persistent keys as displays write them
            (:func:`functional_ws._presenters.key_text`), sorted.
    """

    slot: Slot
    capacity: int
    high_water: int
    segments: tuple[Segment, ...]
    persistent_keys: tuple[str, ...] = ()

    @property
    def views(self) -> tuple[Segment, ...]:
        """The segments that are views."""
        return tuple(s for s in self.segments if s.kind == "view")


def held_bytes(picture: SlotPicture) -> bool:
    """Whether the slot held bytes: a buffer now, or a high-water mark (a slot whose growth
    failed lost its buffer, not its history). Displays that draw only some slots draw these
    first (:func:`._text.drawn_slots`) and count the others as never having held bytes."""
    return picture.capacity > 0 or picture.high_water > 0


def slot_pictures(
    state: WorkspaceState,
    layouts: Mapping[Slot, Layout] | None = None,
    spans: Mapping[Slot, Span] | None = None,
) -> list[SlotPicture]:
    """Segments per slot: views and their padding, the retained span, the rest.

    Without a layout for a slot, no views are drawn, and the bytes below the high-water
    mark are ``"requested"`` (views a state does not know of may use them), not free.
    A span remembered in ``spans`` is ``"retained"`` while the state still retains it at
    that offset, and ``"clobbered"`` once the state dropped it (a request reached into it
    or the slot was reallocated); without ``spans`` only the state's retained span is drawn.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire
        >>> from functional_ws.display import slot_pictures
        >>> s, layout = acquire(initial_state(), (0, 0), ((100,), np.dtype("float32")))
        >>> [(g.kind, g.start, g.end) for g in slot_pictures(s, {(0, 0): layout})[0].segments]
        [('view', 0, 400), ('padding', 400, 512)]
        >>> [(g.kind, g.start, g.end) for g in slot_pictures(s)[0].segments]
        [('requested', 0, 512)]
    """
    layouts, spans = layouts or {}, spans or {}
    for name, given, wanted in (("layouts", layouts, Layout), ("spans", spans, Span)):
        if not isinstance(given, Mapping) or not all(isinstance(v, wanted) for v in given.values()):
            raise TypeError(
                f"{name} must map a slot to a {wanted.__name__} (a manager keeps them as "
                f"ws.last_{name}), got {_described(given, wanted)}."
            )
    pictures = []
    for slot, s in zip(state.all_slots(), state.slots, strict=True):
        layout = layouts.get(slot)
        if layout is not None and layout.total <= s.capacity:
            tiles, used = _view_segments(layout, state.alignment), layout.total
        else:
            tiles, used = [], 0
        reached = max(used, min(s.high_water, s.capacity))
        gaps: list[tuple[SegmentKind, int, int]] = [
            ("requested", used, reached),
            ("free", reached, s.capacity),
        ]
        tail = _tail_segment(s.retained, spans.get(slot), s.capacity)
        bands = []
        for kind, start, end in gaps:
            if tail is None:
                tiles.extend(_gap(kind, start, end))
                continue
            tiles.extend(_gap(kind, start, min(end, tail.start)))
            inside = (max(start, tail.start), min(end, tail.end))
            if inside[1] > inside[0]:
                tiles.append(dataclasses.replace(tail, start=inside[0], end=inside[1]))
            tiles.extend(_gap(kind, max(start, tail.end), end))
        if tail is not None and tail.start < used:
            bands.append(dataclasses.replace(tail, end=min(tail.end, used), over=True))
        keys = tuple(sorted(map(key_text, s.persistent_keys)))
        pictures.append(SlotPicture(slot, s.capacity, s.high_water, tuple(tiles + bands), keys))
    return pictures


def _described(given: object, wanted: type) -> str:
    if not isinstance(given, Mapping):
        return f"a value of type {type(given).__name__}"
    odd = next(v for v in given.values() if not isinstance(v, wanted))
    swapped = " (layouts and spans swapped?)" if isinstance(odd, (Layout, Span)) else ""
    return f"a value of type {type(odd).__name__}{swapped}"


def _view_segments(layout: Layout, alignment: int) -> list[Segment]:
    segments = []
    drawn = layout.specs[:MAX_DRAWN_VIEWS]
    for spec, offset in zip(drawn, layout.offsets, strict=False):
        end, padded = offset + spec.nbytes, offset + round_up(spec.nbytes, alignment)
        name = dtype_name(spec.dtype)
        shape = list(spec.shape)
        detail = f"{name}{shape}: {exact_bytes(spec.nbytes)} at offset {exact_bytes(offset)}"
        segments.append(
            Segment(
                "view", offset, end, f"{spec.dtype}{shape} @{offset}", dtype_colour(spec.dtype),
                name, detail, (f"{name}{shape}", name),
            )
        )  # fmt: skip
        if padded > end:
            segments.append(_gap("padding", end, padded)[0])
    if len(layout.specs) > len(drawn):
        segments.append(_more_views(layout, len(drawn)))
    return segments


def _more_views(layout: Layout, drawn: int) -> Segment:
    """One range for the views of ``layout`` after the first ``drawn``, to its total."""
    start, rest = layout.offsets[drawn], layout.specs[drawn:]
    label = counted(len(rest), "more view")
    dtypes = ", ".join(dict.fromkeys(dtype_name(spec.dtype) for spec in rest))
    detail = (
        f"{label} of the last request ({dtypes}), not drawn one by one: "
        f"{exact_bytes(layout.total - start)} at offset {exact_bytes(start)}"
    )
    return Segment("more", start, layout.total, label, COLOURS["more"], "", detail, (label,))


def _gap(kind: SegmentKind, start: int, end: int) -> list[Segment]:
    """A range of a fixed kind, or nothing when it is empty."""
    if end <= start:
        return []
    detail = f"{MEANINGS[kind]}: {exact_bytes(end - start)} at offset {exact_bytes(start)}"
    return [Segment(kind, start, end, kind, COLOURS[kind], "", detail, (kind,))]


def _tail_segment(
    retained: tuple[Any, int] | None, span: Span | None, capacity: int
) -> Segment | None:
    if span is not None and span.offset + span.nbytes <= capacity:
        intact = retained == (span.key, span.offset)
        kind: SegmentKind = "retained" if intact else "clobbered"
        start, end = span.offset, span.offset + span.nbytes
        label = f"retained {key_text(span.key)} ({'intact' if intact else 'clobbered'})"
        view = f"{dtype_name(span.spec.dtype)}{list(span.spec.shape)}"
        detail = f"{label}: {view}, {exact_bytes(end - start)} at offset {exact_bytes(start)}"
    elif retained is not None:
        key, start = retained
        kind, end = "retained", capacity
        label = f"retained {key_text(key)}"
        detail = (
            f"{label}: from offset {exact_bytes(start)} to the end ({exact_bytes(end - start)})"
        )
    else:
        return None
    return Segment(kind, start, end, label, COLOURS[kind], "", detail, (label, kind))


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a slot's segments are drawn along its bar, in the renderer's units.

    Attributes:
        width: the bar's length: the one asked for (the sum of the steps for a slot with
            no bytes, whose zero-sized views are drawn at no width).
        spans: ``(x0, x1)`` per segment of the picture, in order.
        high_water: where the high-water mark is drawn.
    """

    width: float
    spans: tuple[tuple[float, float], ...]
    high_water: float


def place(picture: SlotPicture, width: float, min_view: float) -> Placement:
    """Lay a slot's segments along a bar of ``width``, each view and retained span at least
    ``min_view`` wide (a 125 KiB tail beside 64 MiB of scratch is seen, and its colour).

    The views and spans that would be narrower than ``min_view`` to scale get exactly
    ``min_view`` (a span drawn over views, a band, too, kept inside the bar),
    and every other range shares what is left of ``width`` in proportion to its bytes, so
    a bar still starts at offset 0 and ends at its capacity. The bar is never lengthened:
    it stays to scale beside the others. In a bar too short for its views
    (``width < 2 * min_view * views``) the minimum is ``width / (2 * views)`` instead, so
    the narrow views take at most half of it.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire
        >>> u8 = np.dtype("uint8")
        >>> s, layout = acquire(initial_state(), (0, 0), ((2**20,), u8), ((1,), u8))
        >>> p = slot_pictures(s, {(0, 0): layout})[0]
        >>> [(round(x0, 1), round(x1, 1)) for x0, x1 in place(p, 100, 4).spans]
        [(0.0, 96.0), (96.0, 100.0), (100.0, 100.0)]
        >>> [(round(x0, 1), round(x1, 1)) for x0, x1 in place(p, 4, 4).spans]  # too short
        [(0.0, 3.0), (3.0, 4.0), (4.0, 4.0)]
    """
    tiles = [i for i, s in enumerate(picture.segments) if not s.over]
    views = [i for i in tiles if picture.segments[i].kind in _KEPT_VISIBLE]
    if views:
        min_view = min(min_view, width / (2 * len(views)))
    sizes = {i: picture.segments[i].end - picture.segments[i].start for i in tiles}
    small: set[int] = set()
    while True:  # the narrow views only grow in number, so this ends
        rest = picture.capacity - sum(sizes[i] for i in small)
        scale = (width - min_view * len(small)) / rest if rest > 0 else 0.0
        narrow = {i for i in views if sizes[i] * scale < min_view}
        if narrow <= small:
            break
        small |= narrow
    spans: dict[int, tuple[float, float]] = {}
    points: list[tuple[int, float]] = []  # (offset, x) at every tile boundary
    x = 0.0
    for i in tiles:
        seg = picture.segments[i]
        step = min_view if i in small else sizes[i] * scale
        spans[i] = (x, x + step)
        points += [(seg.start, x), (seg.end, x + step)]
        x += step
    for i, seg in enumerate(picture.segments):
        if seg.over:
            x0, x1 = _position(points, seg.start, last=True), _position(points, seg.end)
            if x1 - x0 < min_view and seg.end > seg.start:
                x0 = max(0.0, min(x0, x - min_view))
                x1 = x0 + min(min_view, x)
            spans[i] = (x0, x1)
    return Placement(
        width if picture.capacity else x,  # the sum of the steps, without its rounding
        tuple(spans[i] for i in range(len(picture.segments))),
        _position(points, min(picture.high_water, picture.capacity)),
    )


#: The kinds of segment drawn at least the minimum width: views and retained spans.
_KEPT_VISIBLE = ("view", "more", "retained", "clobbered")


def _position(points: Sequence[tuple[int, float]], offset: int, last: bool = False) -> float:
    """Where ``offset`` is drawn: between the boundaries around it, to scale; at a boundary
    shared by zero-sized views, before them (or after them with ``last``)."""
    at = [x for o, x in points if o == offset]
    if at:
        return max(at) if last else min(at)
    for (o0, x0), (o1, x1) in itertools.pairwise(points):
        if o0 < offset < o1:
            return x0 + (x1 - x0) * (offset - o0) / (o1 - o0)
    return points[-1][1] if points else 0.0


class ColourKey(NamedTuple):
    """One entry of a colour key: ``dtype`` is the dtype's name for a view's colour, else ``""``."""

    name: str
    colour: str
    meaning: str
    dtype: str


def colour_keys(pictures: Sequence[SlotPicture]) -> list[ColourKey]:
    """The colour key of a picture: every dtype drawn (in order of first appearance), then
    every fixed kind drawn.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire
        >>> s, layout = acquire(initial_state(), (0, 0), ((100,), np.dtype("int32")))
        >>> [key.name for key in colour_keys(slot_pictures(s, {(0, 0): layout}))]
        ['int32', 'padding']
    """
    dtypes: dict[str, str] = {}
    kinds: set[str] = set()
    for p in pictures:
        for seg in p.segments:
            if seg.kind == "view":
                dtypes.setdefault(seg.dtype, seg.colour)
            else:
                kinds.add(seg.kind)
    keys = [ColourKey(d, colour, f"a view of dtype {d}", d) for d, colour in dtypes.items()]
    keys += [ColourKey(k, COLOURS[k], MEANINGS[k], "") for k in COLOURS if k in kinds]
    return keys
