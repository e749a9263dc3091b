"""A matplotlib figure of the workspace, the same picture as the HTML rendering."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._layout import Layout, Span
from .._state import Slot, WorkspaceState
from ._figure import literal, new_figure
from ._picture import colour_keys, held_bytes, place, slot_pictures
from ._text import check_state, describe_state, drawn_slots, format_bytes

#: What the picture marks besides byte ranges, for the legend.
HIGH_WATER = "high water: the largest request"
CAPACITY = "capacity: the figure at each bar's end"
#: The narrowest a view is drawn, as a fraction of the widest bar (7 px of a 700 px axis).
MIN_VIEW_FRACTION = 0.01
#: Width of one character of a 7-point label, in points, with some slack.
_CHAR_POINTS = 4.6


def plot(
    state: WorkspaceState,
    layouts: Mapping[Slot, Layout] | None = None,
    spans: Mapping[Slot, Span] | None = None,
    *,
    ax: Any = None,
    title: str = "WorkspaceState",
    details: Sequence[str] = (),
) -> Any:
    """Draw a state as horizontal bars, one per slot (the HTML picture's twin).

    Bars are to scale, each ending at its capacity; inside a bar, every view is drawn at
    least :data:`MIN_VIEW_FRACTION` of the widest bar (less in a bar too short to give each
    of its views that much) and the rest of the bar shares what is left; the axis is in
    bytes from the slot's base.

    Args:
        state: the state to draw.
        layouts: per slot, the last layout (its views are drawn); ``ws.last_layouts``.
        spans: per slot, the last retained span (drawn intact or clobbered);
            ``ws.last_spans``. ``interop.WorkspaceManager.plot()`` passes all three.
        ax: a matplotlib ``Axes`` to draw into; a new figure when ``None``.
        title: what the title calls the picture (a manager passes its own name).
        details: more words for the title (a manager passes its device).

    Returns:
        The matplotlib ``Figure`` (save it with ``fig.savefig("layout.png")``). A new
        figure is not left on pyplot's list of figures: as a notebook cell's last line it
        shows once, and ``plt.show()`` does not show it again. For a window from a script,
        draw into axes of your own: ``fig, ax = plt.subplots(); plot(..., ax=ax);
        plt.show()``.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'functional-ws[plot]'``).
        TypeError: ``state`` is not a :class:`~functional_ws.WorkspaceState`.

    Example:
        >>> from functional_ws import initial_state, plot
        >>> fig = plot(initial_state(num_ubatches=2))
        >>> [t.get_text() for t in fig.axes[0].get_yticklabels()][::-1]  # top to bottom
        ['slot (0, 0)', 'slot (1, 0)']
    """
    check_state(state, "plot")
    pictures, note = drawn_slots(slot_pictures(state, layouts, spans), held_bytes)
    if note:
        details = [*details, note]
    if ax is None:
        fig = new_figure((10, 0.9 + 0.55 * len(pictures)), "functional_ws.plot")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    widest = max([p.capacity for p in pictures] + [1])
    placements = [place(p, p.capacity, MIN_VIEW_FRACTION * widest) for p in pictures]
    ends = [placed.width for placed in placements]
    for row, (p, placed) in enumerate(zip(pictures, placements, strict=True)):
        y = len(pictures) - 1 - row
        ax.barh(y, placed.width, left=0, height=0.6, color="white", edgecolor="#888")
        for seg, (x0, x1) in zip(p.segments, placed.spans, strict=True):
            low, height = (y - 0.3, 0.24) if seg.over else (y - 0.3, 0.6)
            ax.barh(
                low, x1 - x0, left=x0, height=height, align="edge", color=seg.colour,
                edgecolor="white", linewidth=0.5, hatch="//" if seg.kind == "padding" else None,
            )  # fmt: skip
        if p.capacity:
            ax.plot([placed.high_water] * 2, [y - 0.4, y + 0.4], color="black", linewidth=1.5)
        ax.text(placed.width, y, f" {format_bytes(p.capacity)}", va="center", fontsize=8)
    ax.set_yticks(range(len(pictures)))
    ax.set_yticklabels([f"slot {p.slot}" for p in reversed(pictures)])
    longest = max([*ends, 1.0])
    # Power-of-two steps, at most about five ticks, so the byte labels never run together.
    ax.xaxis.set_major_locator(MultipleLocator(2 ** max(0, (int(longest) // 5 - 1).bit_length())))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_bytes(int(x))))
    ax.set_xlim(0, longest * 1.14)  # the axis starts at 0 B; room for the capacities
    ax.set_xlabel(
        f"offset from the slot's base (views narrower than {MIN_VIEW_FRACTION:.0%} of the "
        "axis widened)"
    )
    ax.set_title(literal(", ".join([title + ": " + describe_state(state), *details])), fontsize=9)
    handles: list[Any] = [
        Patch(color=key.colour, label=literal(f"view: {key.dtype}") if key.dtype else key.meaning)
        for key in colour_keys(pictures)
    ]
    handles.append(Line2D([0], [0], color="black", linewidth=1.5, label=HIGH_WATER))
    handles.append(Line2D([], [], linestyle="none", label=CAPACITY))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    fig.tight_layout()
    _label_views(ax, pictures, placements)
    return fig


def _label_views(ax: Any, pictures: Sequence[Any], placements: Sequence[Any]) -> None:
    """Print inside each view the longest of its labels that fits whole (none if none does)."""
    left, right = ax.get_xlim()
    points = ax.get_position().width * ax.figure.get_figwidth() * 72
    per_point = (right - left) / points
    for row, (p, placed) in enumerate(zip(pictures, placements, strict=True)):
        y = len(pictures) - 1 - row
        for seg, (x0, x1) in zip(p.segments, placed.spans, strict=True):
            if seg.kind != "view":
                continue
            room = (x1 - x0) / per_point - 4
            label = next((t for t in seg.short if len(t) * _CHAR_POINTS <= room), "")
            if label:
                ax.text((x0 + x1) / 2, y + 0.06, literal(label), ha="center", va="center",
                        fontsize=7, color="white")  # fmt: skip
