"""A trivially correct model of a workspace: one ``bytearray`` per slot.

The state machine applies every operation to the system under test and to this model,
then compares. The model knows nothing about the planner's internals: only the rules of
the original API (back-to-back padded views, exact growth, retained span at the end).

Byte values carry meaning: fresh memory after a (re)allocation is ``0x00``, patterns written
into retained spans use ``0x01..0x7f`` and scribbles over acquired views use ``0x80..0xff``,
so "the span's bytes are unchanged" can be decided exactly by comparing bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

FRESH = 0x00


def _round_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _round_down(n: int, alignment: int) -> int:
    return n // alignment * alignment


@dataclasses.dataclass
class RetainedRecord:
    """What the last retain in a slot wrote: key, start, size and the pattern."""

    key: Hashable
    start: int
    pattern: bytes
    reached: bool = False  # an acquire reached past `start` (decides empty spans only)


@dataclasses.dataclass
class SlotModel:
    """One slot: its bytes, its retained record, its keys and counters."""

    memory: bytearray = dataclasses.field(default_factory=bytearray)
    retained: RetainedRecord | None = None
    keys: set[Hashable] = dataclasses.field(default_factory=set)
    high_water: int = 0
    growths: int = 0

    @property
    def capacity(self) -> int:
        return len(self.memory)

    def reallocate(self, nbytes: int) -> None:
        self.memory = bytearray([FRESH]) * nbytes
        self.retained = None
        self.growths += 1


@dataclasses.dataclass
class WorkspaceModel:
    """The whole workspace: slots stored ubatch-major, as the planner stores them."""

    num_ubatches: int
    num_lanes: int
    alignment: int
    growth: str
    locked: bool = False
    slots: list[SlotModel] = dataclasses.field(default_factory=list)
    counter: int = 0

    def __post_init__(self) -> None:
        if not self.slots:
            self.slots = [SlotModel() for _ in range(self.num_ubatches * self.num_lanes)]

    def index(self, slot: tuple[int, int]) -> int:
        return slot[0] * self.num_lanes + slot[1]

    def request_bytes(self, nbytes: list[int]) -> tuple[list[int], int]:
        """Offsets and total of back-to-back views, each padded to the alignment."""
        offsets, total = [], 0
        for n in nbytes:
            offsets.append(total)
            total += _round_up(n, self.alignment)
        return offsets, total

    def growth_targets(self, index: int, required: int) -> list[int]:
        """Slots that must grow for slot ``index`` to hold ``required`` bytes."""
        if self.slots[index].capacity >= required:
            return []
        if self.growth == "slot":
            return [index]
        lane = index % self.num_lanes
        group = range(lane, len(self.slots), self.num_lanes)
        return [i for i in group if self.slots[i].capacity < required]

    def grow(self, targets: list[int], required: int) -> None:
        for i in targets:
            self.slots[i].reallocate(required)

    def scribble(self, index: int, offset: int, nbytes: int, view_number: int) -> None:
        """An acquired view is written all over (by a caller of ``get_simultaneous``)."""
        self.slots[index].memory[offset : offset + nbytes] = (
            bytes([0x80 | (view_number & 0x7F)]) * nbytes
        )

    def note_reach(self, index: int, total: int) -> None:
        record = self.slots[index].retained
        if record is not None and total > record.start:
            record.reached = True

    def expected_intact(self, index: int, key: Hashable, start: int) -> bool:
        """Whether the previous retain's bytes are provably what it left."""
        record = self.slots[index].retained
        if record is None or record.key != key or record.start != start:
            return False
        now = bytes(self.slots[index].memory[start : start + len(record.pattern)])
        if record.pattern:
            return now == record.pattern
        return not record.reached

    def retained_start(self, index: int, nbytes: int) -> int:
        return _round_down(self.slots[index].capacity - nbytes, self.alignment)

    def next_pattern(self, nbytes: int) -> bytes:
        """A fresh pattern of ``nbytes`` bytes in ``0x01..0x7f``, different from the last one."""
        self.counter += 1
        return bytes(((self.counter + j) % 0x7F) + 1 for j in range(nbytes))

    def write_pattern(self, index: int, key: Hashable, start: int, nbytes: int) -> bytes:
        """Fill a retained span with a fresh pattern (bytes ``0x01..0x7f``) and record it."""
        pattern = self.next_pattern(nbytes)
        self.slots[index].memory[start : start + nbytes] = pattern
        self.slots[index].retained = RetainedRecord(key, start, pattern)
        return pattern
