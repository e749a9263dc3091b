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
from ._text import check_state, counted, drawn_slots, exact_bytes, format_bytes

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
    for state in states:
        check_state(state, "a timeline")
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


#: The most calls given a hover box of their own per slot (beyond it, a run of calls that
#: changed nothing in the slot shares one), as at most ``MAX_DRAWN`` slots are drawn: a
#: long recording on many slots stays a picture, not megabytes of SVG.
MAX_HOVERS = 200


def _runs(values: Sequence[Any]) -> list[tuple[int, int]]:
    """``[start, stop)`` of each run of equal consecutive values.

    Example:
        >>> _runs([0, 0, 5, 5, 5, 0])
        [(0, 2), (2, 5), (5, 6)]
    """
    runs, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            runs.append((start, i))
            start = i
    return runs


def _held_bytes(line: SlotTimeline) -> bool:
    """Whether the slot held bytes in any state: a capacity, or a high-water mark (a slot
    that lost its buffer in a failed growth has the one without the other)."""
    return any(line.capacity) or any(line.high_water)


def _top(lines: Sequence[SlotTimeline]) -> int:
    """The scale's top: the largest capacity or high-water mark drawn (at least 1)."""
    return max(max(*t.capacity, *t.high_water) for t in lines) or 1


def timeline_html(states: Sequence[WorkspaceState], calls: Sequence[str] = ()) -> str:
    """An SVG picture of :func:`timelines`: one strip per slot, the calls along the x axis.

    Every strip shares one byte scale (the largest capacity). Capacity is a blue step
    line, high water a dashed black one, the retained span a green band from its start
    to the capacity, and each growth an orange dot; hovering a call shows its figures.
    At most ``MAX_DRAWN`` slots are drawn (those that held bytes first), and past
    :data:`MAX_HOVERS` calls the calls that changed nothing in a slot share one hover box
    there.

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
    lines, note = drawn_slots(lines, _held_bytes)
    left_out = f"<div><i>... {escape(note)}</i></div>" if note else ""
    n = len(states)
    top = _top(lines)
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
        figures = list(zip(t.capacity, t.high_water, t.retained, strict=True))
        for a, b in _runs(figures):  # one band per run of the same span
            capacity, _, start = figures[a]
            if start is not None and capacity > start:
                parts.append(
                    f'<rect x="{x(a):.1f}" y="{y(capacity):.1f}" width="{(b - a) * step:.1f}" '
                    f'height="{y(start) - y(capacity):.1f}" fill="{COLOURS["retained"]}" '
                    f'fill-opacity="0.35"/>'
                )
        for values, colour, dash in (
            (t.capacity, CAPACITY_COLOUR, ""),
            (t.high_water, HIGH_WATER_COLOUR, ' stroke-dasharray="4 3"'),
        ):
            points = " ".join(  # a step line: a point where each run starts and ends
                f"{x(a):.1f},{y(values[a]):.1f} {x(b):.1f},{y(values[a]):.1f}"
                for a, b in _runs(values)
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
        hovers = [(i, i + 1) for i in range(n)] if n <= MAX_HOVERS else _runs(figures)
        for a, b in hovers:
            capacity, high_water, start = figures[a]
            call = calls[a] if a < len(calls) else f"state {a}"
            what = f"{a}: {call}"  # a run starts where the slot changed (or at the start)
            if b - a > 1:
                what += f" (and the {counted(b - a - 1, 'call')} to {b - 1}: no change here)"
            retained = "" if start is None else f", retained from {exact_bytes(start)}"
            parts.append(
                f'<rect x="{x(a):.1f}" y="{y0}" width="{(b - a) * step:.1f}" '
                f'height="{y1 - y0}" fill="transparent"><title>{escape(what)}: capacity '
                f"{exact_bytes(capacity)}, high water {exact_bytes(high_water)}"
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
    return f"<div>{svg}{left_out}{key}</div>"


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
    lines, note = drawn_slots(lines, _held_bytes)
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
        figures = list(zip(t.retained, t.capacity, strict=True))
        for first, stop in _runs(figures):  # a band per run, not per call (16,000 calls: 30 s)
            start, capacity = figures[first]
            if start is not None:
                ax.fill_between([first, stop], start, capacity, color=COLOURS["retained"],
                                alpha=0.35, linewidth=0, label=label)  # fmt: skip
                label = None
        if t.growths:
            ax.plot([i + 0.5 for i in t.growths], [t.capacity[i] for i in t.growths], "o",
                    color=GROWTH_COLOUR, markersize=5, label="growth")  # fmt: skip
        ax.set_ylabel(f"slot {t.slot}", fontsize=8)
        ax.tick_params(labelsize=7)
    top = _top(lines)
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
    title = f"capacity over {counted(n, 'state')}" + (f"; {note}" if note else "")
    axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
