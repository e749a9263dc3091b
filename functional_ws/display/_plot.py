"""A matplotlib figure of the workspace, the same picture as the HTML rendering."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._layout import Layout, Span
from .._state import Slot, WorkspaceState
from ._html import _check_state
from ._picture import COLOURS, slot_pictures
from ._text import format_bytes

#: What the picture marks besides byte ranges, for the legend.
HIGH_WATER = "high water: the largest request"
CAPACITY = "capacity: the figure at each bar's end"


def plot(
    state: WorkspaceState,
    layouts: Mapping[Slot, Layout] | None = None,
    spans: Mapping[Slot, Span] | None = None,
    *,
    ax: Any = None,
) -> Any:
    """Draw a state as horizontal bars, one per slot, to scale (the HTML picture's twin).

    Args:
        state: the state to draw.
        layouts: per slot, the last layout (its views are drawn); ``ws.last_layouts``.
        spans: per slot, the last retained span (drawn intact or clobbered);
            ``ws.last_spans``. ``interop.WorkspaceManager.plot()`` passes all three.
        ax: a matplotlib ``Axes`` to draw into; a new figure when ``None``.

    Returns:
        The matplotlib ``Figure`` (save it with ``fig.savefig("layout.png")``).

    Raises:
        ImportError: matplotlib is not installed (``pip install 'functional-ws[plot]'``).
        TypeError: ``state`` is not a :class:`~functional_ws.WorkspaceState`.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> from functional_ws import initial_state, plot
        >>> fig = plot(initial_state(num_ubatches=2))
        >>> [t.get_text() for t in fig.axes[0].get_yticklabels()][::-1]  # top to bottom
        ['slot (0, 0)', 'slot (1, 0)']
    """
    _check_state(state, "plot")
    try:
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter, MultipleLocator
    except ImportError as err:
        raise ImportError(
            "functional_ws.plot needs matplotlib, which is not installed: "
            "pip install 'functional-ws[plot]'"
        ) from err
    pictures = slot_pictures(state, layouts, spans)
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.6 + 0.55 * len(pictures)))
    else:
        fig = ax.figure
    for row, p in enumerate(pictures):
        y = len(pictures) - 1 - row
        ax.barh(y, p.capacity, left=0, height=0.6, color="white", edgecolor="#888")
        for seg in p.segments:
            ax.barh(
                y, seg.end - seg.start, left=seg.start, height=0.6, color=seg.colour,
                edgecolor="white", linewidth=0.5, hatch="//" if seg.kind == "padding" else None,
            )  # fmt: skip
            if seg.kind == "view" and (seg.end - seg.start) > 0.12 * max(p.capacity, 1):
                ax.text((seg.start + seg.end) / 2, y, seg.label, ha="center", va="center",
                        fontsize=7, color="white", clip_on=True)  # fmt: skip
        if p.capacity:
            ax.plot([p.high_water] * 2, [y - 0.4, y + 0.4], color="black", linewidth=1.5)
        ax.text(p.capacity, y, f" {format_bytes(p.capacity)}", va="center", fontsize=8)
    ax.set_yticks(range(len(pictures)))
    ax.set_yticklabels([f"slot {p.slot}" for p in reversed(pictures)])
    widest = max([p.capacity for p in pictures] + [1])
    # Power-of-two steps, at most about five ticks, so the byte labels never run together.
    ax.xaxis.set_major_locator(MultipleLocator(2 ** max(0, (widest // 5 - 1).bit_length())))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_bytes(int(x))))
    ax.set_xlabel("offset from the slot's base")
    lock = "locked" if state.locked else "unlocked"
    ax.set_title(f"workspace: {lock}, growth '{state.growth}', alignment {state.alignment}")
    kinds: list[Any] = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    dtypes = {seg.dtype: seg.colour for p in pictures for seg in p.segments if seg.dtype}
    kinds += [Patch(color=c, label=f"view: {d}") for d, c in dtypes.items()]
    kinds.append(Line2D([0], [0], color="black", linewidth=1.5, label=HIGH_WATER))
    kinds.append(Line2D([], [], linestyle="none", label=CAPACITY))
    ax.legend(handles=kinds, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    ax.margins(x=0.12)
    fig.tight_layout()
    return fig
