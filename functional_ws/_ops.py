"""Pure transitions: each takes a :class:`WorkspaceState` and returns a new one.

None of them mutates its input. A refused call raises, and since nothing was mutated the
caller still holds the old state: "a failed call loses nothing" comes for free.

The identity protocol the shell relies on: when a call changes nothing, the very same
state object is returned (``new is state``), and a replayed plan that needs no growth is
the very same plan object the caller passed (``layout is memoised``). So a shell can
memoise plans per request and skip work on identity alone.

Each rule is written once: :func:`fit` (views back to back, each rounded up to the
alignment, and who grows), :func:`_after_acquire` (a request drops the retained span it
reaches into and raises the high-water mark), :func:`_after_retain` (the span at the end,
and whether it is intact) and :func:`_grow` (who grows, and when growth is refused).
:func:`acquire` validates its requests and runs :func:`fit`, which plans from byte counts
alone; the replayed transitions share the same rules, and so do the transitions that size
several slots at once (reservations, plans, what a failed growth leaves: ``_growth.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from ._errors import (
    CapacityLimitError,
    InvalidShapeError,
    InvalidSlotError,
    InvalidSpecError,
    PersistentKeyLockedError,
    UnhashableKeyError,
    WorkspaceLockedError,
)
from ._layout import Growth, Layout, Span, make_layout
from ._presenters import safe_repr
from ._spec import (
    MAX_BYTES,
    ViewSpec,
    _checked_spec,
    as_spec,
    quick_spec,
)
from ._state import (
    GrowthPolicy,
    Slot,
    SlotState,
    WorkspaceState,
    check_config,
    make_slot,
    with_slot,
    with_slots,
)


def initial_state(
    num_ubatches: int = 1,
    num_lanes: int = 1,
    *,
    alignment: int = 256,
    growth: GrowthPolicy = "slot",
    max_capacity: int | None = None,
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
        max_capacity: the most bytes a slot may ever hold (the torch shell passes the
            device's total memory); a growth above it is refused. ``None``: no limit.

    Returns:
        The state.

    Raises:
        InvalidConfigError: (``ValueError``) a count below one ("at least one") or so large
            that the slots would not fit in memory, a bad alignment, an unknown policy or a
            bad ``max_capacity``.

    Example:
        >>> s = initial_state(num_ubatches=2, num_lanes=1)
        >>> len(s.slots), s.alignment, s.growth, s.locked
        (2, 256, 'slot', False)
    """
    check_config(num_ubatches, num_lanes, alignment, growth, max_capacity)
    return WorkspaceState(
        num_ubatches=num_ubatches,
        num_lanes=num_lanes,
        alignment=alignment,
        growth=growth,
        slots=(SlotState(),) * (num_ubatches * num_lanes),
        max_capacity=max_capacity,
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


# ----- the rules, each written once -----


def _after_acquire(current: SlotState, total: int) -> SlotState:
    """The slot after a request for ``total`` bytes from its start (which fits).

    The request drops the retained span when it reaches past the span's start, and raises
    the high-water mark. Returns ``current`` itself when nothing changes.
    """
    retained = current.retained
    if retained is not None and total > retained[1]:
        retained = None
    elif total <= current.high_water:
        return current
    return make_slot(
        current.capacity,
        max(current.high_water, total),
        current.growths,
        retained,
        current.persistent_keys,
    )


def interchangeable_keys(a: Hashable, b: Hashable) -> bool:
    """Whether keys ``a`` and ``b`` are one key for every later comparison: the same object,
    or equal values of one exact type (tuples, named ones too, part by part). Equal keys of
    different types may compare differently with a third (``np.float32(2**24)`` equals both
    ``2**24`` and ``2**24 + 1``, which differ; ``np.int64(1) == (1, 2)`` raises), so a
    retained slot remembers the latest of them, as the original does.

    Example:
        >>> import numpy as np
        >>> interchangeable_keys(("kv", 3.0), ("kv", 3.0)), interchangeable_keys(np.int64(1), 1)
        (True, False)
    """
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return len(a) == len(b) and all(map(interchangeable_keys, a, b))
    try:
        return bool(a == b)
    except Exception:  # an equality that raises: not known to be one key
        return False


def _after_retain(
    current: SlotState, key: Hashable, nbytes: int, alignment: int
) -> tuple[SlotState, int, bool]:
    """The slot after a retain of ``nbytes`` under ``key`` (which fits), the span's start,
    and whether the span is intact (the previous retain was the same key at the same start,
    and nothing reached into it or reallocated the slot since).

    The slot remembers the latest key, as the original does: a key equal to the last one
    but not interchangeable with it (:func:`interchangeable_keys`: another type) replaces it
    (equality need not be transitive: after ``np.float32(2**24)`` then ``2**24 + 1``, the
    key ``2**24`` is another one)."""
    start = (current.capacity - nbytes) & -alignment  # rounded down to the alignment
    intact = current.retained == (key, start)
    if intact and nbytes <= current.high_water and interchangeable_keys(current.retained[0], key):  # type: ignore[index]
        return current, start, True
    after = make_slot(
        current.capacity,
        max(current.high_water, nbytes),
        current.growths,
        (key, start),
        current.persistent_keys,
    )
    return after, start, intact


def _policy_targets(state: WorkspaceState, index: int) -> Iterable[int]:
    """The slots that grow when slot ``index`` must: itself, or its lane's ubatch slots."""
    if state.growth == "slot":
        return (index,)
    return range(index % state.num_lanes, len(state.slots), state.num_lanes)


def _grow(
    state: WorkspaceState,
    slots: list[SlotState],
    targets: Iterable[int],
    required: int,
    requester: int | None = None,
) -> Growth:
    """Grow each of ``targets`` in ``slots`` (a private copy) to hold ``required`` bytes.

    A slot that already holds that much is left alone; a grown slot gets a new buffer, so
    nothing is retained in it. Refused when locked, or above the capacity limit. The slot
    at ``requester``, when given, is the one a request of ``required`` bytes grows: its
    high-water mark rises to ``required`` (what :func:`_after_acquire` makes of a slot with
    nothing retained), so the request's slot is built once.

    Returns:
        The growth performed.
    """
    growth = []
    num_lanes = state.num_lanes
    for i in targets:
        old = slots[i]
        if old.capacity >= required:
            continue
        if state.locked:
            raise WorkspaceLockedError.for_request(state.slot_of(i), required, old.capacity)
        if state.max_capacity is not None and required > state.max_capacity:
            raise CapacityLimitError(state.slot_of(i), required, state.max_capacity)
        high_water = old.high_water
        if i == requester and required > high_water:
            high_water = required
        slots[i] = make_slot(required, high_water, old.growths + 1, None, old.persistent_keys)
        growth.append((divmod(i, num_lanes), required))  # state.slot_of(i), without a call
    return tuple(growth)


def _validated(requests: Sequence[Any], argname: str) -> tuple[ViewSpec, ...]:
    """Each ``(shape, dtype)`` request validated, named ``argname[i]`` in errors."""
    return tuple(
        quick_spec(request) or as_spec(request, f"{argname}[{i}]")
        for i, request in enumerate(requests)
    )


# ----- transitions -----


def acquire(state: WorkspaceState, slot: Slot, *specs: Any) -> tuple[WorkspaceState, Layout]:
    """Plan views for one ``get_simultaneous(*specs)`` call in ``slot``.

    Views lie back to back from the slot's start, each taking its size rounded up to the
    alignment. If the slot is too small it grows to exactly the bytes needed (never
    shrinking). A request that reaches past the start of the retained span drops it.

    Args:
        state: the current state.
        slot: ``(ubatch, lane)``.
        *specs: ``(shape, dtype)`` pairs; a dtype is anything with a positive integer
            ``itemsize`` (torch, NumPy and JAX dtypes, NumPy and JAX scalar types).

    Returns:
        ``(new_state, layout)``; ``layout.growth`` lists the buffers to reallocate.

    Raises:
        InvalidSpecError: (``ValueError``) a malformed spec.
        WorkspaceLockedError: (``AssertionError``) locked and the slot is too small.
        CapacityLimitError: (``RuntimeError``) the slot would grow above ``max_capacity``.
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
    index = state.index(slot)  # a bad slot is refused before the specs are looked at
    checked = _validated(specs, "specs")
    new, offsets, total, growth = fit(state, index, [s.nbytes for s in checked], argname="specs")
    return new, make_layout(slot, index, checked, offsets, total, state.alignment, growth)


def replay_acquire(
    state: WorkspaceState, layout: Layout, hint: WorkspaceState | None = None
) -> tuple[WorkspaceState, Layout]:
    """:func:`acquire` again with the specs of an earlier ``layout``, skipping validation.

    Equal to ``acquire(state, layout.slot, *layout.specs)`` for every state (a property
    test pins this). Where the slot already fits the request (the usual case), it costs a
    few comparisons and returns ``layout`` itself when ``layout`` carries no growth: the
    memoised hot path of the shell, which caches layouts per ``(slot, request)``.

    ``hint``: a state the caller holds (the result of this replay last time); when the new
    state equals it, ``hint`` itself is returned, so a shell that caches replays by the
    identity of their input sees states that alternate (a tail retained, then a request
    that reaches into it) converge to two objects, and replays nothing more.

    Example:
        >>> import numpy as np
        >>> from functional_ws import acquire, initial_state
        >>> from functional_ws.fast_paths import replay_acquire
        >>> spec = ((4,), np.dtype("int32"))
        >>> s, layout = acquire(initial_state(), (0, 0), spec)
        >>> replay_acquire(s, layout) == (s, layout.without_growth()) == acquire(s, (0, 0), spec)
        True
    """
    i = layout.index
    slots = state.slots
    if not _same_geometry(state, layout) or layout.total > slots[i].capacity:
        return acquire(state, layout.slot, *layout.specs)
    current = slots[i]
    after = _after_acquire(current, layout.total)
    if layout.growth:
        layout = layout.without_growth()
    return _changed(state, i, current, after, hint), layout


def fit(
    state: WorkspaceState, index: int, nbytes: Iterable[int], *, argname: str = "nbytes"
) -> tuple[WorkspaceState, tuple[int, ...], int, Growth]:
    """:func:`acquire` of views of ``nbytes`` bytes each in the slot at ``index``, in plain
    values.

    A plan depends on a request only through the byte count of each view: this is the
    transition :func:`acquire` runs once it has validated its slot and its ``(shape,
    dtype)`` pairs, for a shell that validated them itself (the torch façade's miss path: a
    request never seen before, whose views it carves and does not keep). No
    :class:`Layout` is built.

    Args:
        state: the current state.
        index: the slot's position in ``state.slots`` (``state.index((ubatch, lane))``).
        nbytes: the exact bytes of each view, in call order.
        argname: how errors name the request (:func:`acquire` passes ``"specs"``).

    Returns:
        ``(new_state, offsets, total, growth)``: what :func:`acquire` returns, the layout's
        fields spelled out.

    Raises:
        InvalidSlotError: (``ValueError``) ``index`` is not a slot's position.
        InvalidSpecError: a byte count that is not a non-negative int, or views that need
            ``2**63`` bytes or more together.
        WorkspaceLockedError, CapacityLimitError: as :func:`acquire`.

    Example:
        >>> import numpy as np
        >>> from functional_ws import acquire, initial_state
        >>> from functional_ws.fast_paths import fit
        >>> s, _ = acquire(initial_state(), (0, 0), ((1000,), np.dtype("uint8")))
        >>> new, offsets, total, growth = fit(s, 0, [40, 40])
        >>> offsets, total, growth
        ((0, 256), 512, ())
        >>> new == acquire(s, (0, 0), *[((10,), np.dtype("float32"))] * 2)[0]
        True
    """
    slots = state.slots
    if type(index) is not int or not 0 <= index < len(slots):
        raise InvalidSlotError(
            f"index must be a slot's position, an int from 0 to {len(slots) - 1}, got {index!r}."
        )
    pad, mask = state.alignment - 1, -state.alignment
    offsets = []
    total = 0
    for n in nbytes:  # the layout rule: back to back, each rounded up to the alignment
        if type(n) is not int or n < 0:
            raise InvalidSpecError(
                f"{argname}: a view's byte count must be a non-negative int, got {n!r}."
            )
        offsets.append(total)
        total += (n + pad) & mask
    if total >= MAX_BYTES:
        raise InvalidShapeError(
            f"{argname}: the views need {total} bytes together, which is not below 2**63."
        )
    current = slots[index]
    if total <= current.capacity:  # it fits: the usual case
        if total <= current.high_water and current.retained is None:
            return state, tuple(offsets), total, ()  # _after_acquire would change nothing
        after = _after_acquire(current, total)
        new = state if after is current else with_slot(state, index, after)
        return new, tuple(offsets), total, ()
    grown = list(slots)
    targets = (index,) if state.growth == "slot" else _policy_targets(state, index)
    growth = _grow(state, grown, targets, total, requester=index)
    return with_slots(state, tuple(grown)), tuple(offsets), total, growth


def fit_plain(
    state: WorkspaceState,
    index: int,
    requests: Sequence[Any],
    nbytes: Sequence[int],
    argname: str = "requests",
) -> tuple[WorkspaceState, tuple[int, ...], Layout, Growth]:
    """:func:`acquire` of ``requests`` in the slot at ``index``, for a shell that checked
    them itself: each is a ``(shape, dtype)`` pair whose shape is a ``tuple`` of
    non-negative ``int`` dims and whose ``nbytes`` entry is its dtype's ``itemsize`` times
    their product (neither is checked again; the byte counts are, as :func:`fit` checks
    them). What a shell that memoises a request it has seen before plans it with;
    ``argname`` names the request in errors.

    Returns:
        ``(new_state, offsets, layout, growth)``: :func:`acquire`'s state and layout, with
        the layout's offsets and growth spelled out.

    Example:
        >>> import numpy as np
        >>> from functional_ws import acquire, initial_state
        >>> from functional_ws.fast_paths import fit_plain
        >>> s = initial_state()
        >>> requests = (((10,), np.dtype("float32")), ((3,), np.dtype("int8")))
        >>> new, offsets, layout, growth = fit_plain(s, 0, requests, [40, 3])
        >>> (new, layout) == acquire(s, (0, 0), *requests)
        True
    """
    new, offsets, total, growth = fit(state, index, nbytes, argname=argname)
    specs = tuple(
        _checked_spec(shape, dtype, dtype.itemsize, n)
        for (shape, dtype), n in zip(requests, nbytes, strict=True)
    )
    slot = divmod(index, state.num_lanes)  # state.slot_of(index), fit checked the index
    layout = make_layout(slot, index, specs, offsets, total, state.alignment, growth)
    return new, offsets, layout, growth


def layout_of(state: WorkspaceState, slot: Slot, specs: Sequence[Any]) -> Layout:
    """The layout :func:`acquire` gives ``specs`` in ``slot`` of ``state``, as a slot that
    already holds it sees it (no growth): what a picture of a request served without a
    :class:`Layout` draws (a layout depends on the state only through its alignment).

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state
        >>> from functional_ws.fast_paths import layout_of
        >>> layout_of(initial_state(), (0, 0), [((10,), np.dtype("float32"))] * 2).offsets
        (0, 256)
    """
    return acquire(unlock(state), slot, *specs)[1].without_growth()


def _changed(
    state: WorkspaceState,
    index: int,
    current: SlotState,
    after: SlotState,
    hint: WorkspaceState | None,
) -> WorkspaceState:
    """``state`` with slot ``index`` (``current``) replaced by ``after``: ``state`` itself when
    nothing changed, ``hint`` when it is that state, else a new one."""
    if after is current:
        return state
    if hint is not None and _is(hint, state, index, after):
        return hint
    return with_slot(state, index, after)


def _is(hint: WorkspaceState, state: WorkspaceState, index: int, slot: SlotState) -> bool:
    """Whether ``hint`` equals ``state`` with slot ``index`` replaced by ``slot`` (cheaply:
    the other slots must be the very same objects, which they are when ``hint`` came from
    ``state``'s ancestors by replays of this slot)."""
    mine, theirs = hint.slots, state.slots
    if len(mine) != len(theirs) or mine[index] != slot:
        return False
    if hint.locked is not state.locked or hint.max_capacity != state.max_capacity:
        return False
    for j, other in enumerate(theirs):
        if j != index and mine[j] is not other:
            return False
    return (hint.num_lanes, hint.alignment, hint.growth) == (
        state.num_lanes,
        state.alignment,
        state.growth,
    )


def _same_geometry(state: WorkspaceState, plan: Layout | Span) -> bool:
    """Whether ``plan`` was made for a workspace laid out as ``state`` is (its slot at its
    index, its alignment), so that replaying it needs no validation."""
    ubatch, lane = plan.slot
    return (
        plan.alignment == state.alignment
        and lane < state.num_lanes
        and plan.index == ubatch * state.num_lanes + lane
        and plan.index < len(state.slots)
    )


def _check_key(key: Hashable, argname: str) -> None:
    try:
        hash(key)
    except TypeError:
        raise UnhashableKeyError(f"{argname} must be hashable, got {safe_repr(key)}.") from None


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
        CapacityLimitError: the slot would grow above ``max_capacity``.

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
    checked = quick_spec(spec) or as_spec(spec, "spec")
    nbytes = checked.nbytes
    slots = list(state.slots)
    growth = _grow(state, slots, _policy_targets(state, index), nbytes)
    current = slots[index]
    after, start, intact = _after_retain(current, key, nbytes, state.alignment)
    span = Span(slot, index, checked, key, start, state.alignment, growth)
    if after is current and not growth:
        return state, span, intact
    slots[index] = after
    return with_slots(state, tuple(slots)), span, intact


def forget_retained(state: WorkspaceState, slot: Slot, key: Hashable) -> WorkspaceState:
    """The state once a retained view of ``key`` in ``slot`` may not have reached its bytes
    (the call that made it was interrupted after planning, or the view is a tensor that
    holds none, such as a fake one): the slot retains nothing, so the next :func:`retain`
    there is not intact. ``state`` itself where the slot does not retain ``key``.

    Args:
        state: the current state.
        slot: ``(ubatch, lane)``.
        key: the key whose span to forget (another key's span is kept).

    Example:
        >>> import numpy as np
        >>> u8 = np.dtype("uint8")
        >>> s, _, _ = retain(initial_state(), (0, 0), "kv", ((100,), u8))
        >>> s = forget_retained(s, (0, 0), "kv")
        >>> s.slots[0].retained, retain(s, (0, 0), "kv", ((100,), u8))[2]
        (None, False)
        >>> forget_retained(s, (0, 0), "kv") is s
        True
    """
    index = state.index(slot)
    current = state.slots[index]
    if current.retained is None or current.retained[0] != key:
        return state
    slots = list(state.slots)
    slots[index] = make_slot(
        current.capacity, current.high_water, current.growths, None, current.persistent_keys
    )
    return with_slots(state, tuple(slots))


def replay_retain(
    state: WorkspaceState, span: Span, hint: WorkspaceState | None = None
) -> tuple[WorkspaceState, Span, bool]:
    """:func:`retain` again with the key and spec of an earlier ``span``, skipping validation.

    Equal to ``retain(state, span.slot, span.key, span.spec)`` for every state; returns
    ``span`` itself when the slot fits it at the same offset and ``span`` carries no growth.
    ``hint`` as for :func:`replay_acquire`.
    """
    i = span.index
    nbytes = span.spec.nbytes
    slots = state.slots
    if not _same_geometry(state, span) or nbytes > slots[i].capacity:
        return retain(state, span.slot, span.key, span.spec)
    if state.growth != "slot" and any(
        nbytes > slots[j].capacity for j in _policy_targets(state, i)
    ):  # retain grows the lane's other ubatch slots too (a failed growth emptied one)
        return retain(state, span.slot, span.key, span.spec)
    current = slots[i]
    after, start, intact = _after_retain(current, span.key, nbytes, state.alignment)
    if start != span.offset:
        span = Span(span.slot, i, span.spec, span.key, start, span.alignment)
    elif span.growth:
        span = span.without_growth()
    return _changed(state, i, current, after, hint), span, intact


def claim(
    state: WorkspaceState, slot: Slot, key: Hashable, *, admitted: bool = False
) -> tuple[WorkspaceState, bool]:
    """Claim a persistent key in ``slot``.

    ``admitted``: the call was let in by a claim made before the resource was created (the
    original checks the lock once, before it calls the factory): the key is claimed even
    if the state was locked since.

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
        >>> claim(lock(s), (0, 0), "handle", admitted=True)[1]
        True
    """
    index = state.index(slot)
    _check_key(key, "key")
    current = state.slots[index]
    if key in current.persistent_keys:
        return state, False
    if state.locked and not admitted:
        raise PersistentKeyLockedError(key, state.slot_of(index))
    new = dataclasses.replace(current, persistent_keys=current.persistent_keys | {key})
    return with_slot(state, index, new), True
