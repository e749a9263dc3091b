"""The workspace over time: per slot, capacity, high water and the retained span over a
sequence of states (a recorded history's), growths marked; as SVG and as a matplotlib figure.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from html import escape
from typing import Any

from .._state import Slot, WorkspaceState
from ._figure import literal, new_figure
from ._picture import COLOURS
from ._text import counted, exact_bytes, format_bytes

#: Line colours: capacity, high water and the growth marks.
CAPACITY_COLOUR, HIGH_WATER_COLOUR, GROWTH_COLOUR = "#0072B2", "#000000", "#D55E00"
_SVG_WIDTH, _SVG_ROW, _LEFT, _RIGHT = 560, 64, 86, 12


@dataclasses.dataclass(frozen=True)
class SlotTimeline:
    """One slot over a sequence of states.

    Attributes:
        slot: the ``(ubatch, lane)``.
        capacity, high_water: per state, in bytes.
        retained: per state, the retained span's start (it runs to the capacity), or
            ``None`` where nothing is retained.
        growths: the indices of the states whose slot was (re)allocated since the state
            before (more growths than before).
    """

    slot: Slot
    capacity: tuple[int, ...]
    high_water: tuple[int, ...]
    retained: tuple[int | None, ...]
    growths: tuple[int, ...]


def timelines(states: Sequence[WorkspaceState]) -> list[SlotTimeline]:
    """Per slot of the first state, its figures in every state of ``states``.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire
        >>> s0 = initial_state()
        >>> s1, _ = acquire(s0, (0, 0), ((100,), np.dtype("float32")))
        >>> t = timelines([s0, s1, s1])[0]
        >>> t.capacity, t.growths
        ((0, 512, 512), (1,))
    """
    if not states:
        return []
    result = []
    for index, slot in enumerate(states[0].all_slots()):
        slots = [s.slots[index] for s in states if index < len(s.slots)]
        growths = tuple(
            i + 1 for i, (a, b) in enumerate(itertools.pairwise(slots))
            if b.growths > a.growths
        )  # fmt: skip
        result.append(
            SlotTimeline(
                slot,
                tuple(s.capacity for s in slots),
                tuple(s.high_water for s in slots),
                tuple(None if s.retained is None else s.retained[1] for s in slots),
                growths,
            )
        )
    return result


def timeline_html(states: Sequence[WorkspaceState], calls: Sequence[str] = ()) -> str:
    """An SVG picture of :func:`timelines`: one strip per slot, the calls along the x axis.

    Every strip shares one byte scale (the largest capacity). Capacity is a blue step
    line, high water a dashed black one, the retained span a green band from its start
    to the capacity, and each growth an orange dot; hovering a call shows its figures.

    Args:
        states: the states, in order (a history's ``[r.state for r in history]``).
        calls: a name per state, for the hover text (``"start"``, ``"lock()"``, ...).

    Returns:
        HTML text (an ``<svg>`` element and its key).

    Example:
        >>> from functional_ws import initial_state
        >>> "<svg" in timeline_html([initial_state(), initial_state()])
        True
    """
    lines = timelines(states)
    if not lines:
        return "<i>no states recorded</i>"
    n = len(states)
    top = max(max(t.capacity) for t in lines) or 1
    plot_width = _SVG_WIDTH - _LEFT - _RIGHT
    step = plot_width / max(n, 1)
    height = _SVG_ROW * len(lines) + 24

    def x(i: float) -> float:
        return _LEFT + i * step

    parts = []
    for row, t in enumerate(lines):
        y0, y1 = row * _SVG_ROW + 8, row * _SVG_ROW + _SVG_ROW - 6

        def y(v: int, y0: float = y0, y1: float = y1) -> float:
            return y1 - (y1 - y0) * v / top

        parts.append(
            f'<text x="4" y="{(y0 + y1) / 2 + 4:.1f}" font-size="11">slot {escape(str(t.slot))}'
            f'</text><line x1="{_LEFT}" x2="{_LEFT + plot_width}" y1="{y1}" y2="{y1}" '
            f'stroke="#bbb"/>'
        )
        for i, start in enumerate(t.retained):
            if start is not None and t.capacity[i] > start:
                parts.append(
                    f'<rect x="{x(i):.1f}" y="{y(t.capacity[i]):.1f}" width="{step:.1f}" '
                    f'height="{y(start) - y(t.capacity[i]):.1f}" fill="{COLOURS["retained"]}" '
                    f'fill-opacity="0.35"/>'
                )
        for values, colour, dash in (
            (t.capacity, CAPACITY_COLOUR, ""),
            (t.high_water, HIGH_WATER_COLOUR, ' stroke-dasharray="4 3"'),
        ):
            points = " ".join(
                f"{x(i):.1f},{y(v):.1f} {x(i + 1):.1f},{y(v):.1f}" for i, v in enumerate(values)
            )
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" '
                f'stroke-width="1.5"{dash}/>'
            )
        parts += [
            f'<circle cx="{x(i + 0.5):.1f}" cy="{y(t.capacity[i]):.1f}" r="3" '
            f'fill="{GROWTH_COLOUR}"/>'
            for i in t.growths
        ]
        for i in range(len(t.capacity)):
            call = calls[i] if i < len(calls) else f"state {i}"
            start = t.retained[i]
            retained = "" if start is None else f", retained from {exact_bytes(start)}"
            parts.append(
                f'<rect x="{x(i):.1f}" y="{y0}" width="{step:.1f}" height="{y1 - y0}" '
                f'fill="transparent"><title>{i}: {escape(call)}: capacity '
                f"{exact_bytes(t.capacity[i])}, high water {exact_bytes(t.high_water[i])}"
                f"{retained}</title></rect>"
            )
    axis = height - 8
    parts.append(
        f'<text x="{_LEFT}" y="{axis}" font-size="10">call 0</text>'
        f'<text x="{_LEFT + plot_width}" y="{axis}" font-size="10" text-anchor="end">'
        f"call {n - 1}</text>"
        f'<text x="{_LEFT - 4}" y="14" font-size="10" text-anchor="end">'
        f"{format_bytes(top)}</text>"
    )
    svg = (
        f'<svg class="fws-timeline" width="{_SVG_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_SVG_WIDTH} {height}" font-family="sans-serif" '
        f'role="img" aria-label="capacity over {counted(n, "state")}">{"".join(parts)}</svg>'
    )
    key = (
        '<div style="font:11px sans-serif;color:#444">'
        f'<span style="color:{CAPACITY_COLOUR}">capacity</span> (solid), high water (dashed), '
        f'<span style="color:{COLOURS["retained"]}">retained span</span> (band), '
        f'<span style="color:{GROWTH_COLOUR}">growth</span> (dot); one byte scale for every '
        "slot; hover a call for its figures</div>"
    )
    return f"<div>{svg}{key}</div>"


def plot_timeline(states: Sequence[WorkspaceState], calls: Sequence[str] = ()) -> Any:
    """A matplotlib figure of :func:`timelines`: one strip per slot, sharing both axes.

    Args:
        states: the states, in order (a history's ``[r.state for r in history]``).
        calls: a name per state; the x axis is labelled with them when there are at most
            12 states, each name short enough to print whole, else with the call numbers.

    Returns:
        A matplotlib ``Figure`` that pyplot does not keep (a notebook shows it once).

    Raises:
        ImportError: matplotlib is not installed (``pip install 'functional-ws[plot]'``).
        ValueError: ``states`` is empty.

    Example:
        >>> from functional_ws import initial_state
        >>> fig = plot_timeline([initial_state(num_ubatches=2)] * 3)
        >>> [ax.get_ylabel() for ax in fig.axes]
        ['slot (0, 0)', 'slot (1, 0)']
    """
    lines = timelines(states)
    if not lines:
        raise ValueError("plot_timeline needs at least one state, got none.")
    from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

    fig = new_figure((9, 0.6 + 1.4 * len(lines)), "plot_timeline")
    axes = fig.subplots(len(lines), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    n = len(states)
    for ax, t in zip(axes, lines, strict=True):
        xs = list(range(n + 1))  # call i spans [i, i + 1)
        ax.step(xs, (*t.capacity, t.capacity[-1]), where="post", color=CAPACITY_COLOUR,
                label="capacity")  # fmt: skip
        ax.step(xs, (*t.high_water, t.high_water[-1]), where="post", color=HIGH_WATER_COLOUR,
                linestyle="--", linewidth=1, label="high water")  # fmt: skip
        label: str | None = "retained span"
        for i, start in enumerate(t.retained):
            if start is not None:
                ax.fill_between([i, i + 1], start, t.capacity[i], color=COLOURS["retained"],
                                alpha=0.35, linewidth=0, label=label)  # fmt: skip
                label = None
        if t.growths:
            ax.plot([i + 0.5 for i in t.growths], [t.capacity[i] for i in t.growths], "o",
                    color=GROWTH_COLOUR, markersize=5, label="growth")  # fmt: skip
        ax.set_ylabel(f"slot {t.slot}", fontsize=8)
        ax.tick_params(labelsize=7)
    top = max(max(t.capacity) for t in lines) or 1
    # Power-of-two steps, at most about four ticks, in binary units.
    axes[0].yaxis.set_major_locator(MultipleLocator(2 ** max(0, (top // 4 - 1).bit_length())))
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(max(0, int(v)))))
    axes[0].set_ylim(0, top * 1.1)
    axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    last = axes[-1]
    last.set_xlim(0, max(n, 1))
    if len(calls) >= n and n <= 12 and all(len(c) <= 32 for c in calls[:n]):
        last.set_xticks([i + 0.5 for i in range(n)])
        last.set_xticklabels([literal(c) for c in calls[:n]], rotation=30, ha="right", fontsize=7)
    else:
        last.xaxis.set_major_locator(MaxNLocator(integer=True))
        last.set_xlabel("call (its index in the history)")
    axes[0].set_title(f"capacity over {counted(n, 'state')}", fontsize=9)
    fig.tight_layout()
    return fig
