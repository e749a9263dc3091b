"""The workspace's whole state: two frozen dataclasses registered as JAX pytrees.

Field decisions (see STYLE.md, "Immutable state done well"):

* Numbers a user may want to map over or plot are pytree *leaves*: per slot ``capacity``,
  ``high_water`` and ``growths``.
* Everything that fixes the structure or is an arbitrary hashable is *static* metadata:
  ``num_ubatches``, ``num_lanes``, ``alignment``, ``growth``, ``locked`` and per slot the
  ``retained`` span and the ``persistent_keys``. Keys are arbitrary Python objects, so they
  can never be array leaves; the lock flag and policy are configuration, not data.

No validation runs in ``__init__``: JAX rebuilds pytrees with placeholder leaves, so the
constructors stay plain. :func:`functional_ws.initial_state` and ``from_dict`` validate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any, Literal

import jax

from ._errors import InvalidSlotError, LaneNotConfiguredError, UbatchNotConfiguredError

#: A slot is an ``(ubatch, lane)`` pair.
Slot = tuple[int, int]
#: How growth spreads: ``"slot"`` grows only the requesting slot (the original);
#: ``"ubatches"`` grows every ubatch slot of the requesting lane to the same size.
GrowthPolicy = Literal["slot", "ubatches"]
GROWTH_POLICIES: tuple[str, ...] = ("slot", "ubatches")


@dataclasses.dataclass(frozen=True)
class SlotState:
    """What the planner knows about one ``(ubatch, lane)`` slot.

    Attributes:
        capacity: bytes of the slot's buffer (0 before its first growth).
        high_water: the largest number of bytes any request in this slot asked for.
        growths: how many times the slot's buffer was (re)allocated.
        retained: ``(key, start)`` of the span the last :func:`retain` handed out, or
            ``None`` once a request reached into it or the slot was reallocated.
        persistent_keys: the persistent keys claimed in this slot.
    """

    capacity: int = 0
    high_water: int = 0
    growths: int = 0
    retained: tuple[Hashable, int] | None = None
    persistent_keys: frozenset[Hashable] = frozenset()


@dataclasses.dataclass(frozen=True)
class WorkspaceState:
    """The manager's whole state, immutable and hashable; equality is by value.

    Build one with :func:`functional_ws.initial_state`; every transition returns a new one.
    Slots are stored ubatch-major, as the original indexed its buffers:
    ``slots[ubatch * num_lanes + lane]``.

    Example:
        >>> from functional_ws import initial_state
        >>> s = initial_state(num_ubatches=2)
        >>> s.capacity((1, 0))
        0
        >>> s == initial_state(num_ubatches=2), hash(s) == hash(initial_state(num_ubatches=2))
        (True, True)
    """

    num_ubatches: int
    num_lanes: int
    alignment: int = 256
    growth: GrowthPolicy = "slot"
    locked: bool = False
    slots: tuple[SlotState, ...] = ()

    def index(self, slot: Slot) -> int:
        """Position of ``slot`` in :attr:`slots`, validating it.

        Raises:
            InvalidSlotError: (``ValueError``) not an ``(ubatch, lane)`` pair of ints, or a
                negative index.
            LaneNotConfiguredError: (``RuntimeError``) ``lane >= num_lanes``.
            UbatchNotConfiguredError: (``RuntimeError``) ``ubatch >= num_ubatches``.
        """
        if not isinstance(slot, tuple) or len(slot) != 2:
            raise InvalidSlotError(f"slot must be an (ubatch, lane) pair, got {slot!r}.")
        ubatch, lane = slot
        for name, value in (("ubatch", ubatch), ("lane", lane)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidSlotError(f"Workspace {name} must be an int, got {value!r}.")
            if value < 0:
                raise InvalidSlotError(f"Workspace {name} must be non-negative, got {value}.")
        if lane >= self.num_lanes:
            raise LaneNotConfiguredError(
                f"Workspace lane {lane} is not configured; manager has {self.num_lanes} lane(s)."
            )
        if ubatch >= self.num_ubatches:
            raise UbatchNotConfiguredError(
                f"Workspace ubatch {ubatch} is not configured; manager has "
                f"{self.num_ubatches} ubatch slot(s)."
            )
        return ubatch * self.num_lanes + lane

    def slot_of(self, index: int) -> Slot:
        """The ``(ubatch, lane)`` stored at ``slots[index]``."""
        return divmod(index, self.num_lanes)

    def all_slots(self) -> tuple[Slot, ...]:
        """Every ``(ubatch, lane)`` pair, in storage order."""
        return tuple(self.slot_of(i) for i in range(len(self.slots)))

    def capacity(self, slot: Slot) -> int:
        """Bytes the buffer of ``slot`` holds (0 before its first growth)."""
        return self.slots[self.index(slot)].capacity

    def to_dict(self) -> dict[str, Any]:
        """This state's plan as JSON-able data (see :func:`functional_ws.to_dict`)."""
        from ._plan import to_dict

        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkspaceState:
        """The state a plan describes (see :func:`functional_ws.from_dict`)."""
        from ._plan import from_dict

        return from_dict(data)

    def _repr_html_(self) -> str:
        from ._html import render_html

        return render_html(self)

    def __str__(self) -> str:
        from ._render import render

        return render(self)


jax.tree_util.register_dataclass(
    SlotState,
    data_fields=["capacity", "high_water", "growths"],
    meta_fields=["retained", "persistent_keys"],
)
jax.tree_util.register_dataclass(
    WorkspaceState,
    data_fields=["slots"],
    meta_fields=["num_ubatches", "num_lanes", "alignment", "growth", "locked"],
)
