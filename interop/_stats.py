"""Statistics: plain frozen records, computed on request from the state and the retired list."""

from __future__ import annotations

import dataclasses

from functional_ws import WorkspaceState
from functional_ws.display import format_bytes

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
        for s in self.slots:
            lines.append(
                f"  slot {s.slot}: capacity {format_bytes(s.capacity)}, high water "
                f"{format_bytes(s.high_water)}, {_count(s.growths, 'growth')}, pinned "
                f"{format_bytes(s.pinned_bytes)} in {_count(s.pinned_buffers, 'buffer')}, "
                f"allocator {s.allocator}"
            )
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


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
