"""Statistics: plain frozen records, computed on request from the state and the retired list."""

from __future__ import annotations

import dataclasses
from html import escape
from typing import Any

from functional_ws import WorkspaceState
from functional_ws._presenters import bounded_text
from functional_ws.display import counted, exact_bytes, format_bytes
from functional_ws.display._text import first_and_last

from ._retired import RetiredBuffer


@dataclasses.dataclass(frozen=True)
class SlotStats:
    """One ``(ubatch, lane)`` slot.

    Attributes:
        slot: the ``(ubatch, lane)`` pair.
        capacity: bytes of the slot's current buffer.
        high_water: the largest request the slot served, in bytes.
        growths: how many times the slot's buffer was (re)allocated.
        pinned_bytes: bytes of this slot's retired buffers that live views still hold.
        pinned_buffers: how many such buffers there are.
        allocator: who provides the slot's buffers (``"torch"``, ``"jax"`` or a callable's
            name): where its bytes are accounted (torch's ``memory_allocated()`` or JAX's
            memory stats, or the pool's).
    """

    slot: tuple[int, int]
    capacity: int
    high_water: int
    growths: int
    pinned_bytes: int
    pinned_buffers: int
    allocator: str = "torch"

    def __str__(self) -> str:
        return (
            f"slot {self.slot}: capacity {format_bytes(self.capacity)}, high water "
            f"{format_bytes(self.high_water)}, {counted(self.growths, 'growth')}, pinned "
            f"{format_bytes(self.pinned_bytes)} in {counted(self.pinned_buffers, 'buffer')}, "
            f"allocator {self.allocator}"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(bounded_text(str(self)))

    def _repr_html_(self) -> str:
        return _table([self], total=None)


@dataclasses.dataclass(frozen=True)
class WorkspaceStats:
    """The whole manager: whether it is locked and one :class:`SlotStats` per slot."""

    locked: bool
    slots: tuple[SlotStats, ...]

    @property
    def capacity(self) -> int:
        """Bytes of all current buffers."""
        return sum(s.capacity for s in self.slots)

    @property
    def pinned_bytes(self) -> int:
        """Bytes of retired buffers still held by live views, over all slots."""
        return sum(s.pinned_bytes for s in self.slots)

    def __str__(self) -> str:
        lines = [
            f"WorkspaceStats: {'LOCKED' if self.locked else 'unlocked'}, capacity "
            f"{format_bytes(self.capacity)}, retired but pinned {format_bytes(self.pinned_bytes)}"
        ]
        lines += [f"  {s}" for s in self.slots]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"WorkspaceStats({'locked' if self.locked else 'unlocked'}, "
            f"{counted(len(self.slots), 'slot')}, capacity {format_bytes(self.capacity)}, "
            f"pinned {format_bytes(self.pinned_bytes)})"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(bounded_text(str(self)))

    def _repr_html_(self) -> str:
        head = (
            f"<div><b>WorkspaceStats</b>: {'locked' if self.locked else 'unlocked'}, capacity "
            f"{format_bytes(self.capacity)}, retired but pinned {format_bytes(self.pinned_bytes)}"
            "</div>"
        )
        return f'<div style="font:12px sans-serif">{head}{_table(self.slots, self)}</div>'


#: The slots the HTML table lists: the first and the last half of this many.
SHOWN_SLOTS = 100
_COLUMNS = ("slot", "capacity", "high water", "growths", "pinned", "pinned buffers", "allocator")


def _table(slots: Any, total: WorkspaceStats | None) -> str:
    """The slots as an HTML table, sizes in binary units (exact bytes on hover)."""

    pad = "padding:1px 8px"

    def size(n: int) -> str:
        return f'<td style="{pad};text-align:right" title="{exact_bytes(n)}">{format_bytes(n)}</td>'

    def count(n: int) -> str:
        return f'<td style="{pad};text-align:right">{n}</td>'

    rows = []
    for i in first_and_last(len(slots), SHOWN_SLOTS):
        if i is None:  # a line for the slots between
            left_out = len(slots) - SHOWN_SLOTS
            rows.append(f'<tr><td colspan="7" style="{pad}"><i>... {left_out} slots not shown'
                        " (print() lists every one)</i></td></tr>")  # fmt: skip
            continue
        s = slots[i]
        rows.append(
            f'<tr><td style="{pad}">{escape(str(s.slot))}</td>{size(s.capacity)}'
            f"{size(s.high_water)}{count(s.growths)}{size(s.pinned_bytes)}"
            f'{count(s.pinned_buffers)}<td style="{pad}">{escape(s.allocator)}</td></tr>'
        )
    if total is not None and len(total.slots) > 1:
        rows.append(
            f'<tr><td style="{pad}"><i>all</i></td>{size(total.capacity)}<td></td><td></td>'
            f"{size(total.pinned_bytes)}<td></td><td></td></tr>"
        )
    head = "".join(f'<th style="padding:1px 8px">{c}</th>' for c in _COLUMNS)
    return (
        '<table style="border-collapse:collapse;font:12px sans-serif"><tr>'
        f"{head}</tr>{''.join(rows)}</table>"
    )


def collect(
    state: WorkspaceState, pinned: list[RetiredBuffer], allocator: str = "torch"
) -> WorkspaceStats:
    """The statistics of a manager in ``state`` whose retired buffers ``pinned`` are alive,
    its buffers provided by ``allocator``."""
    slots = []
    for slot, s in zip(state.all_slots(), state.slots, strict=True):
        mine = [r.nbytes for r in pinned if r.slot == slot]
        slots.append(
            SlotStats(slot, s.capacity, s.high_water, s.growths, sum(mine), len(mine), allocator)
        )
    return WorkspaceStats(state.locked, tuple(slots))
