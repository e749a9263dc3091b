"""Pure transitions: each takes a :class:`WorkspaceState` and returns a new one.

None of them mutates its input. A refused call raises, and since nothing was mutated the
caller still holds the old state: "a failed call loses nothing" comes for free. When a call
changes nothing, the very same state object is returned, so callers can memoise on identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from ._errors import InvalidSpecError, PersistentKeyLockedError, WorkspaceLockedError
from ._layout import Growth, Layout, Span
from ._spec import MAX_BYTES, ViewSpec, as_spec, is_spec_like, round_down, round_up
from ._state import GROWTH_POLICIES, GrowthPolicy, Slot, SlotState, WorkspaceState


def initial_state(
    num_ubatches: int = 1,
    num_lanes: int = 1,
    *,
    alignment: int = 256,
    growth: GrowthPolicy = "slot",
) -> WorkspaceState:
    """An empty, unlocked workspace with ``num_ubatches * num_lanes`` slots.

    Args:
        num_ubatches: ubatch slots (vLLM's dual-batch overlap uses 2).
        num_lanes: independent execution lanes per ubatch.
        alignment: byte alignment of every view offset, a power of two.
        growth: ``"slot"`` grows only the requesting slot (the original's behaviour; other
            slots keep their buffers, so views into them stay valid); ``"ubatches"`` grows
            every ubatch slot of the requesting lane to the same size, so they stay in sync
            and a later ubatch never grows mid-step, at the price of reallocating slots
            that may still have views outstanding.

    Returns:
        The state.

    Raises:
        InvalidSpecError: (``ValueError``) a count below one ("at least one"), a bad
            alignment or an unknown policy.

    Example:
        >>> s = initial_state(num_ubatches=2, num_lanes=1)
        >>> len(s.slots), s.alignment, s.growth, s.locked
        (2, 256, 'slot', False)
    """
    for name, value in (("num_ubatches", num_ubatches), ("num_lanes", num_lanes)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidSpecError(f"{name} must be an int, got {value!r}.")
        if value < 1:
            raise InvalidSpecError(f"{name} must be at least one, got {value}.")
    if (
        not isinstance(alignment, int)
        or isinstance(alignment, bool)
        or alignment < 1
        or alignment & (alignment - 1)
    ):
        raise InvalidSpecError(f"alignment must be a positive power of two, got {alignment!r}.")
    if growth not in GROWTH_POLICIES:
        raise InvalidSpecError(f"growth must be one of {GROWTH_POLICIES}, got {growth!r}.")
    return WorkspaceState(
        num_ubatches=num_ubatches,
        num_lanes=num_lanes,
        alignment=alignment,
        growth=growth,
        slots=(SlotState(),) * (num_ubatches * num_lanes),
    )


def lock(state: WorkspaceState) -> WorkspaceState:
    """The state with growth and new persistent keys forbidden.

    Example:
        >>> lock(initial_state()).locked
        True
    """
    return state if state.locked else dataclasses.replace(state, locked=True)


def unlock(state: WorkspaceState) -> WorkspaceState:
    """The state with growth allowed again.

    Example:
        >>> unlock(lock(initial_state())) == initial_state()
        True
    """
    return dataclasses.replace(state, locked=False) if state.locked else state


def _grow(state: WorkspaceState, slots: list[SlotState], index: int, required: int) -> Growth:
    """Grow ``slots`` in place (a private copy) so slot ``index`` holds ``required`` bytes.

    Applies the state's growth policy; refuses when locked. Returns the growth performed.
    """
    current = slots[index].capacity
    if state.locked:
        raise WorkspaceLockedError.for_request(state.slot_of(index), required, current)
    if state.growth == "slot":
        targets: Iterable[int] = (index,)
    else:  # "ubatches": every ubatch slot of the same lane
        lane = index % state.num_lanes
        targets = range(lane, len(slots), state.num_lanes)
    growth = []
    for i in targets:
        old = slots[i]
        if old.capacity < required:
            # A new buffer: nothing is retained in it yet.
            slots[i] = dataclasses.replace(
                old, capacity=required, growths=old.growths + 1, retained=None
            )
            growth.append((state.slot_of(i), required))
    return tuple(growth)


def _request_bytes(specs: Sequence[ViewSpec], alignment: int) -> tuple[tuple[int, ...], int]:
    """Offsets of back-to-back views and the total bytes they take."""
    offsets = []
    total = 0
    for spec in specs:
        offsets.append(total)
        total += round_up(spec.nbytes, alignment)
    if total >= MAX_BYTES:
        raise InvalidSpecError(
            f"specs: the views need {total} bytes together, which is not below 2**63."
        )
    return tuple(offsets), total


def acquire(state: WorkspaceState, slot: Slot, *specs: Any) -> tuple[WorkspaceState, Layout]:
    """Plan views for one ``get_simultaneous(*specs)`` call in ``slot``.

    Views lie back to back from the slot's start, each taking its size rounded up to the
    alignment. If the slot is too small it grows to exactly the bytes needed (never
    shrinking). A request that reaches past the start of the retained span drops it.

    Args:
        state: the current state.
        slot: ``(ubatch, lane)``.
        *specs: ``(shape, dtype)`` pairs.

    Returns:
        ``(new_state, layout)``; ``layout.growth`` lists the buffers to reallocate.

    Raises:
        InvalidSpecError: (``ValueError``) a malformed spec.
        WorkspaceLockedError: (``AssertionError``) locked and the slot is too small.
        LaneNotConfiguredError, UbatchNotConfiguredError, InvalidSlotError: a bad slot.

    Example:
        >>> import numpy as np
        >>> f32, i8 = np.dtype("float32"), np.dtype("int8")
        >>> s, layout = acquire(initial_state(), (0, 0), ((10,), f32), ((3,), i8))
        >>> layout.offsets, layout.total, layout.growth
        ((0, 256), 512, (((0, 0), 512),))
        >>> s.capacity((0, 0))
        512
    """
    index = state.index(slot)
    checked = tuple(as_spec(spec, f"specs[{i}]") for i, spec in enumerate(specs))
    offsets, total = _request_bytes(checked, state.alignment)
    slots = list(state.slots)
    growth: Growth = ()
    if total > slots[index].capacity:
        growth = _grow(state, slots, index, total)
    current = slots[index]
    retained = current.retained
    if retained is not None and total > retained[1]:
        retained = None
    if retained is not current.retained or total > current.high_water:
        slots[index] = dataclasses.replace(
            current, retained=retained, high_water=max(current.high_water, total)
        )
    layout = Layout(slot, index, checked, offsets, total, state.alignment, growth)
    if slots == list(state.slots):
        return state, layout
    return dataclasses.replace(state, slots=tuple(slots)), layout


def replay_acquire(state: WorkspaceState, layout: Layout) -> tuple[WorkspaceState, Layout]:
    """:func:`acquire` again with the specs of an earlier ``layout``, skipping validation.

    Equal to ``acquire(state, layout.slot, *layout.specs)`` for every state (a property
    test pins this), but on the usual path (no growth) it costs a few comparisons: this is
    the memoised hot path of the shell, which caches layouts per ``(slot, specs)``.

    Example:
        >>> import numpy as np
        >>> spec = ((4,), np.dtype("int32"))
        >>> s, layout = acquire(initial_state(), (0, 0), spec)
        >>> replay_acquire(s, layout) == (s, layout.without_growth()) == acquire(s, (0, 0), spec)
        True
    """
    i = layout.index
    slots = state.slots
    if layout.alignment != state.alignment or i >= len(slots) or layout.slot != state.slot_of(i):
        return acquire(state, layout.slot, *layout.specs)
    current = slots[i]
    total = layout.total
    if total > current.capacity:
        return acquire(state, layout.slot, *layout.specs)
    if layout.growth:
        layout = layout.without_growth()
    retained = current.retained
    if total <= current.high_water and (retained is None or total <= retained[1]):
        return state, layout
    if retained is not None and total > retained[1]:
        retained = None
    new = dataclasses.replace(current, retained=retained, high_water=max(current.high_water, total))
    return dataclasses.replace(state, slots=(*slots[:i], new, *slots[i + 1 :])), layout


def _check_key(key: Hashable, argname: str) -> None:
    try:
        hash(key)
    except TypeError:
        raise InvalidSpecError(f"{argname} must be hashable, got {key!r}.") from None


def retain(
    state: WorkspaceState, slot: Slot, key: Hashable, spec: Any
) -> tuple[WorkspaceState, Span, bool]:
    """Plan the original's ``get_retained(key, shape, dtype)``: a span at the slot's end.

    The span starts at ``capacity - nbytes`` rounded down to the alignment. ``intact`` is
    true exactly when the previous retain in this slot used the same ``key`` and start,
    no :func:`acquire` since reached into the span, and the slot was not reallocated.

    Args:
        state: the current state.
        slot: ``(ubatch, lane)``.
        key: any hashable naming the caller; another key takes the span over.
        spec: ``(shape, dtype)``.

    Returns:
        ``(new_state, span, intact)``.

    Raises:
        InvalidSpecError: a malformed spec or an unhashable key.
        WorkspaceLockedError: locked and the slot is too small.

    Example:
        >>> import numpy as np
        >>> u8 = np.dtype("uint8")
        >>> s, _ = acquire(initial_state(), (0, 0), ((1000,), u8))
        >>> s, span, intact = retain(s, (0, 0), "kv", ((100,), u8))
        >>> span.offset, intact
        (768, False)
        >>> retain(s, (0, 0), "kv", ((100,), u8))[2]
        True
    """
    index = state.index(slot)
    _check_key(key, "key")
    checked = as_spec(spec, "spec")
    nbytes = checked.nbytes
    slots = list(state.slots)
    growth: Growth = ()
    if nbytes > slots[index].capacity:
        growth = _grow(state, slots, index, nbytes)
    current = slots[index]
    start = round_down(current.capacity - nbytes, state.alignment)
    marker = (key, start)
    intact = current.retained == marker
    if not intact or nbytes > current.high_water:
        slots[index] = dataclasses.replace(
            current, retained=marker, high_water=max(current.high_water, nbytes)
        )
    span = Span(slot, index, checked, key, start, state.alignment, growth)
    if slots == list(state.slots):
        return state, span, intact
    return dataclasses.replace(state, slots=tuple(slots)), span, intact


def replay_retain(state: WorkspaceState, span: Span) -> tuple[WorkspaceState, Span, bool]:
    """:func:`retain` again with the key and spec of an earlier ``span``, skipping validation.

    Equal to ``retain(state, span.slot, span.key, span.spec)`` for every state.
    """
    i = span.index
    slots = state.slots
    if span.alignment != state.alignment or i >= len(slots) or span.slot != state.slot_of(i):
        return retain(state, span.slot, span.key, span.spec)
    current = slots[i]
    nbytes = span.spec.nbytes
    if nbytes > current.capacity:
        return retain(state, span.slot, span.key, span.spec)
    start = round_down(current.capacity - nbytes, state.alignment)
    if start != span.offset or span.growth:
        span = dataclasses.replace(span, offset=start, growth=())
    marker = (span.key, start)
    intact = current.retained == marker
    if intact and nbytes <= current.high_water:
        return state, span, True
    new = dataclasses.replace(current, retained=marker, high_water=max(current.high_water, nbytes))
    return dataclasses.replace(state, slots=(*slots[:i], new, *slots[i + 1 :])), span, intact


def claim(state: WorkspaceState, slot: Slot, key: Hashable) -> tuple[WorkspaceState, bool]:
    """Claim a persistent key in ``slot``.

    Returns:
        ``(new_state, is_new)``: ``is_new`` is false (and the state unchanged) when the key
        was claimed before; the shell creates the resource only when it is true.

    Raises:
        PersistentKeyLockedError: (``AssertionError``, "was not allocated during warmup")
            locked and the key is new in this slot.
        InvalidSpecError: an unhashable key.

    Example:
        >>> s, new = claim(initial_state(), (0, 0), "scales")
        >>> new, claim(s, (0, 0), "scales")[1]
        (True, False)
    """
    index = state.index(slot)
    _check_key(key, "key")
    current = state.slots[index]
    if key in current.persistent_keys:
        return state, False
    if state.locked:
        raise PersistentKeyLockedError(key, state.slot_of(index))
    new = dataclasses.replace(current, persistent_keys=current.persistent_keys | {key})
    slots = state.slots
    return dataclasses.replace(state, slots=(*slots[:index], new, *slots[index + 1 :])), True


def reserve(
    state: WorkspaceState, requests: Iterable[Any], slots: Iterable[Slot] | None = None
) -> WorkspaceState:
    """Grow ``slots`` (default: all) so that every request fits without growth.

    The worst-case reservation vLLM users asked for (#48179, #42275): reserve before
    :func:`lock` and no locked call can fail for lack of space.

    Args:
        state: the current state.
        requests: each is one ``(shape, dtype)`` pair (a single view, or a retained span)
            or a sequence of pairs (one ``acquire`` call's views, padded as acquire pads).
        slots: the ``(ubatch, lane)`` pairs to reserve in; ``None`` for all.

    Returns:
        The new state; compare capacities with the old one for the growth to carry out.

    Raises:
        InvalidSpecError: a malformed request.
        WorkspaceLockedError: locked and a slot would have to grow.

    Example:
        >>> import numpy as np
        >>> s = reserve(initial_state(num_ubatches=2), [((1024,), np.dtype("float16"))])
        >>> [s.capacity(slot) for slot in s.all_slots()]
        [2048, 2048]
    """
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
        raise InvalidSpecError(f"requests must be a list of requests, got {requests!r}.")
    needed = 0
    for i, request in enumerate(requests):
        if is_spec_like(request):
            needed = max(needed, as_spec(request, f"requests[{i}]").nbytes)
        elif isinstance(request, (tuple, list)):
            checked = [as_spec(s, f"requests[{i}][{j}]") for j, s in enumerate(request)]
            needed = max(needed, _request_bytes(checked, state.alignment)[1])
        else:
            raise InvalidSpecError(
                f"requests[{i}] must be a (shape, dtype) pair or a list of them, got {request!r}."
            )
    chosen: Sequence[int]
    if slots is None:
        chosen = range(len(state.slots))
    elif isinstance(slots, Iterable) and not isinstance(slots, (str, bytes)):
        chosen = [state.index(tuple(s) if isinstance(s, list) else s) for s in slots]
    else:
        raise InvalidSpecError(f"slots must be a list of (ubatch, lane) pairs, got {slots!r}.")
    new_slots = list(state.slots)
    for index in chosen:
        if new_slots[index].capacity < needed:
            _grow(state, new_slots, index, needed)
    if new_slots == list(state.slots):
        return state
    return dataclasses.replace(state, slots=tuple(new_slots))


def growth_between(old: WorkspaceState, new: WorkspaceState) -> Growth:
    """The buffers a shell must reallocate to go from ``old`` to ``new``.

    Example:
        >>> import numpy as np
        >>> s = initial_state(num_ubatches=2)
        >>> growth_between(s, reserve(s, [((8,), np.dtype("uint8"))], slots=[(1, 0)]))
        (((1, 0), 8),)
    """
    return tuple(
        (new.slot_of(i), b.capacity)
        for i, (a, b) in enumerate(zip(old.slots, new.slots, strict=True))
        if b.growths != a.growths
    )
