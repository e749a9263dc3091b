"""A matplotlib figure of the workspace, the same picture as the HTML rendering."""

from __future__ import annotations

from typing import Any

from ._picture import COLOURS, picture_inputs, slot_pictures
from ._render import format_bytes


def plot(obj: Any, ax: Any = None) -> Any:
    """Draw a state or a manager (anything with ``.state``) as horizontal bars, to scale.

    Args:
        obj: a :class:`WorkspaceState`, or an object with ``.state`` and optionally
            ``.last_layouts`` / ``.last_spans`` (``interop.WorkspaceManager`` has them).
        ax: a matplotlib ``Axes`` to draw into; a new figure when ``None``.

    Returns:
        The matplotlib ``Figure`` (save it with ``fig.savefig("layout.png")``).

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> from functional_ws import initial_state
        >>> fig = plot(initial_state(num_ubatches=2))
        >>> [t.get_text() for t in fig.axes[0].get_yticklabels()][::-1]  # top to bottom
        ['slot (0, 0)', 'slot (1, 0)']
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    state, layouts, spans = picture_inputs(obj)
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
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    widest = max([p.capacity for p in pictures] + [1])
    ax.xaxis.set_major_locator(MultipleLocator(2 ** max(0, (widest // 6).bit_length() - 1)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_bytes(int(x))))
    ax.set_xlabel("offset from the slot's base")
    lock = "locked" if state.locked else "unlocked"
    ax.set_title(f"workspace: {lock}, growth '{state.growth}', alignment {state.alignment}")
    kinds = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    ax.legend(handles=kinds, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    ax.margins(x=0.12)
    fig.tight_layout()
    return fig
