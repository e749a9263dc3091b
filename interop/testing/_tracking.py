"""What the machine remembers per slot between calls, beside the byte model."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

import torch

from ._config import Spec
from ._memory import Buffer

#: Said of a call whose views lie in a buffer its slot had before another one.
STALE_HINT = (
    " (not a new buffer: the slot had it before another one; views of a buffer the slot "
    "replaced are stale: were views kept past a growth?)"
)

#: ``(first byte address, end address, description)`` of memory handed out.
Range = tuple[int, int, str]


@dataclasses.dataclass
class PersistentTensor:
    """A tensor ``get_persistent`` returned, its spec and the pattern the machine wrote."""

    tensor: torch.Tensor
    spec: Spec
    pattern: bytes
    call: str


class Resource:
    """What the machine's factories make for ``get_persistent_resource``: easy to tell apart."""

    def __init__(self, key: Hashable, slot: tuple[int, int], serial: int) -> None:
        self.key, self.slot, self.serial = key, slot, serial

    def __repr__(self) -> str:
        return f"<resource #{self.serial} for {self.key!r} in slot {self.slot}>"


@dataclasses.dataclass
class SlotTrack:
    """One slot: its buffer, what it served, what is handed out, its persistent objects.

    Attributes:
        buffer: the buffer its latest views lie in, or ``None`` before any.
        served: the most bytes one call needed in that buffer (its capacity is at least this).
        acquired: the views of its latest ``get_simultaneous``.
        retained: its retained span, if any.
        retained_spec: the shape and dtype its last ``get_retained`` asked for (in this
            buffer).
        last_retained: the key, shape and dtype of its last ``get_retained`` (in any buffer).
        requests: ``get_simultaneous`` calls since then (in any buffer).
        since: the largest padded ``get_simultaneous`` request since then (in this buffer).
        history: the calls in this slot since the retained pattern was written.
        tensors: persistent tensors by key.
        resources: persistent resources by key.
        regrown: the core planned a new buffer for the slot that no view has shown yet
            (only with ``core_state``).
        earlier: the slot's buffers before ``buffer``, the latest :data:`EARLIER` of them
            (weakly held: a view met in one that lives on is a stale view).
    """

    buffer: Buffer | None = None
    served: int = 0
    acquired: list[Range] = dataclasses.field(default_factory=list)
    retained: Range | None = None
    retained_spec: Spec | None = None
    last_retained: tuple[Hashable, Spec] | None = None
    requests: int = 0
    since: int = 0
    history: list[str] = dataclasses.field(default_factory=list)
    tensors: dict[Hashable, PersistentTensor] = dataclasses.field(default_factory=dict)
    resources: dict[Hashable, Any] = dataclasses.field(default_factory=dict)
    regrown: bool = False
    earlier: list[Buffer] = dataclasses.field(default_factory=list)

    #: How many earlier buffers :attr:`earlier` keeps.
    EARLIER = 8

    def earlier_holding(self, storage: Any) -> Buffer | None:
        """The earlier buffer of this slot that ``storage`` is, if any (still alive)."""
        return next((b for b in reversed(self.earlier) if b.holds(storage)), None)

    def live_ranges(self) -> list[Range]:
        """The latest views and the retained span, while their buffer lives."""
        if self.buffer is None or not self.buffer.alive():
            return []
        return self.acquired + ([self.retained] if self.retained else [])

    def new_buffer(self, buffer: Buffer, need: int) -> None:
        """Forget everything about the old buffer (noted in :attr:`earlier`)."""
        if self.buffer is not None:
            self.earlier = [*self.earlier[-self.EARLIER + 1 :], self.buffer]
        self.buffer, self.served = buffer, need
        self.acquired, self.retained, self.history = [], None, []
        self.retained_spec, self.since = None, 0


def overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    """How many bytes two half-open address ranges share."""
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))
