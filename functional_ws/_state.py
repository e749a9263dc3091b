"""The workspace's whole state: two frozen dataclasses, registered as pytrees with no leaves.

This module is the floor of the package: it imports only the errors, the integer check, the
presenter registry and the constructor builder, and every other module builds on it.

What the pytree is for. Workspace planning is decided at trace time, like shapes: a
capacity, an offset, a lock flag or a persistent key is never an array a computation
reads. So the classes are registered with ``jax.tree_util.register_static``: a pytree with
no leaves, its whole value static metadata (as equinox marks ints ``field(static=True)``).
``jax.jit`` then treats a state argument as part of its cache key: a jitted function can
take a state, call ``acquire``/``retain``/``lock`` at trace time and return the new state;
equal states hit jit's cache; and a 3 GiB capacity stays a Python int, where an int leaf
would become an int32 tracer that overflows with x64 off (and an ``if`` on it would raise
``TracerBoolConversionError``).

    >>> import jax, numpy as np
    >>> import functional_ws as fws
    >>> @jax.jit
    ... def plan(state):
    ...     state, layout = fws.acquire(state, (0, 0), ((3 * 2**30,), np.dtype("uint8")))
    ...     return state
    >>> plan(fws.initial_state()).capacity((0, 0))  # 3 GiB, x64 off
    3221225472
    >>> jax.tree_util.tree_leaves(fws.initial_state())
    []

No validation runs in ``__init__``: :func:`functional_ws.initial_state` and
:func:`functional_ws.from_dict` validate, and every transition returns states it built
from valid ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import Literal

import jax

from ._build import fast_constructor, fast_replacer
from ._checks import check_int
from ._errors import (
    InvalidConfigError,
    InvalidConfigTypeError,
    InvalidSlotError,
    InvalidSlotTypeError,
    LaneNotConfiguredError,
    UbatchNotConfiguredError,
)
from ._presenters import Presented, robust_repr

#: A slot is an ``(ubatch, lane)`` pair.
Slot = tuple[int, int]
#: How growth spreads: ``"slot"`` grows only the requesting slot (the original);
#: ``"ubatches"`` grows every ubatch slot of the requesting lane to the same size.
GrowthPolicy = Literal["slot", "ubatches"]
GROWTH_POLICIES: tuple[str, ...] = ("slot", "ubatches")
#: At most this many ``(ubatch, lane)`` slots (vLLM uses two ubatches and a few lanes).
MAX_SLOTS = 2**16


@jax.tree_util.register_static
@robust_repr
@dataclasses.dataclass(frozen=True, slots=True)
class SlotState:
    """What the planner knows about one ``(ubatch, lane)`` slot.

    Attributes:
        capacity: bytes of the slot's buffer (0 while it has none).
        high_water: the largest number of bytes any request in this slot asked for.
        growths: how many times the slot's buffer was (re)allocated.
        retained: ``(key, start)`` of the span the last retain handed out, or ``None`` once
            a request reached into it or the slot was reallocated.
        persistent_keys: the persistent keys claimed in this slot.
    """

    capacity: int = 0
    high_water: int = 0
    growths: int = 0
    retained: tuple[Hashable, int] | None = None
    persistent_keys: frozenset[Hashable] = frozenset()


@jax.tree_util.register_static
@robust_repr
@dataclasses.dataclass(frozen=True, slots=True)
class WorkspaceState(Presented):
    """The manager's whole state, immutable and hashable; equality is by value.

    Build one with :func:`functional_ws.initial_state`; every transition returns a new one.
    Slots are stored ubatch-major, as the original indexed its buffers:
    ``slots[ubatch * num_lanes + lane]``.

    Attributes:
        num_ubatches: ubatch slots.
        num_lanes: lanes per ubatch.
        alignment: byte alignment of every view offset.
        growth: the growth policy (``"slot"`` or ``"ubatches"``).
        locked: whether growth and new persistent keys are refused.
        slots: one :class:`SlotState` per ``(ubatch, lane)``.
        max_capacity: the most bytes one slot may hold (the shell passes the device's total
            memory), or ``None`` for no limit. A growth above it can never succeed and is
            refused before anything is released.

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
    max_capacity: int | None = None

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself

    def index(self, slot: Slot) -> int:
        """Position of ``slot`` in :attr:`slots`, validating it.

        Raises:
            InvalidSlotError: (``ValueError``) not an ``(ubatch, lane)`` pair of ints, or a
                negative index.
            LaneNotConfiguredError: (``RuntimeError``) ``lane >= num_lanes``.
            UbatchNotConfiguredError: (``RuntimeError``) ``ubatch >= num_ubatches``.
        """
        if type(slot) is tuple and len(slot) == 2:
            ubatch, lane = slot
            if (
                type(ubatch) is int
                and type(lane) is int
                and 0 <= lane < self.num_lanes
                and 0 <= ubatch < self.num_ubatches
            ):
                return ubatch * self.num_lanes + lane
        return self._explain_index(slot)

    def _explain_index(self, slot: object) -> int:
        if not isinstance(slot, tuple) or len(slot) != 2:
            raise InvalidSlotError(f"slot must be an (ubatch, lane) pair, got {slot!r}.")
        ubatch, lane = slot
        check_int(
            ubatch, "Workspace ubatch", error=InvalidSlotError, type_error=InvalidSlotTypeError
        )
        check_int(lane, "Workspace lane", error=InvalidSlotError, type_error=InvalidSlotTypeError)
        if lane >= self.num_lanes:
            raise LaneNotConfiguredError(
                f"Workspace lane {lane} is not configured; manager has {self.num_lanes} "
                f"lane(s). Ask for more lanes when you build it: num_lanes={lane + 1} "
                "(WorkspaceManager(..., num_lanes=...), init_workspace_manager(..., "
                "num_lanes=...) or initial_state(num_lanes=...))."
            )
        if ubatch >= self.num_ubatches:
            raise UbatchNotConfiguredError(
                f"Workspace ubatch {ubatch} is not configured; manager has "
                f"{self.num_ubatches} ubatch slot(s). Ask for more when you build it: "
                f"num_ubatches={ubatch + 1}."
            )
        return int(ubatch) * self.num_lanes + int(lane)

    def slot_of(self, index: int) -> Slot:
        """The ``(ubatch, lane)`` stored at ``slots[index]``."""
        return divmod(index, self.num_lanes)

    def all_slots(self) -> tuple[Slot, ...]:
        """Every ``(ubatch, lane)`` pair, in storage order."""
        return tuple(self.slot_of(i) for i in range(len(self.slots)))

    def capacity(self, slot: Slot) -> int:
        """Bytes the buffer of ``slot`` holds (0 while it has none)."""
        return self.slots[self.index(slot)].capacity


#: ``SlotState(...)`` from fields already valid, positionally, without ``__init__`` (the
#: transitions build one on every state change; ``_build.py`` says why and how).
make_slot: Callable[
    [int, int, int, tuple[Hashable, int] | None, frozenset[Hashable]], SlotState
] = fast_constructor(SlotState)
#: ``state`` with other ``slots``, built as :data:`make_slot` builds.
with_slots: Callable[[WorkspaceState, tuple[SlotState, ...]], WorkspaceState] = fast_replacer(
    WorkspaceState, "slots"
)


def with_slot(state: WorkspaceState, index: int, slot: SlotState) -> WorkspaceState:
    """``state`` with ``slot`` at ``index`` (:func:`with_slots` for one slot, in one call:
    every state change that touches one slot builds one)."""
    slots = state.slots
    return with_slots(state, (*slots[:index], slot, *slots[index + 1 :]))


def check_config(
    num_ubatches: object,
    num_lanes: object,
    alignment: object,
    growth: object,
    max_capacity: object = None,
    *,
    error: type[Exception] = InvalidConfigError,
    type_error: type[Exception] = InvalidConfigTypeError,
    where: str = "",
) -> None:
    """Refuse a configuration no workspace can have, naming the field and its value.

    Args:
        num_ubatches, num_lanes: counts of at least one, at most :data:`MAX_SLOTS` slots.
        alignment: a positive power of two.
        growth: one of :data:`GROWTH_POLICIES`.
        max_capacity: ``None`` or a positive int.
        error: the exception class (plans raise ``InvalidPlanError``).
        type_error: the class for a number that is not an ``int`` (``num_lanes=2.0``): a
            ``TypeError`` too by default, as the original raises.
        where: a prefix for field names (``"plan"`` makes them ``plan['num_lanes']``).

    Raises:
        ``error``: naming the field and its value.
    """

    def name(field: str) -> str:
        return f"{where}[{field!r}]" if where else field

    ubatches = check_int(
        num_ubatches, name("num_ubatches"), minimum=1, error=error, type_error=type_error
    )
    lanes = check_int(num_lanes, name("num_lanes"), minimum=1, error=error, type_error=type_error)
    if ubatches * lanes > MAX_SLOTS:
        raise error(
            f"{name('num_ubatches')} x {name('num_lanes')} = {ubatches} x {lanes} slots is "
            f"more than the {MAX_SLOTS} a workspace may have."
        )
    check_int(
        alignment, name("alignment"), minimum=1, maximum=2**30, error=error, type_error=type_error
    )
    assert isinstance(alignment, int)
    if alignment & (alignment - 1):
        raise error(f"{name('alignment')} must be a positive power of two, got {alignment!r}.")
    if growth not in GROWTH_POLICIES:
        raise error(f"{name('growth')} must be one of {GROWTH_POLICIES}, got {growth!r}.")
    if max_capacity is not None:
        check_int(max_capacity, name("max_capacity"), minimum=1, error=error, type_error=type_error)
