"""Transitions that size slots: reservations, saved plans, and what a failed growth leaves.

They use the rules of :mod:`functional_ws._ops` (the one place each rule is written:
``fit`` for layouts, ``_grow`` for who grows and when growth is refused), over several slots
at once. Pure, like every transition: a refused call changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._errors import (
    InvalidPlanError,
    InvalidSpecError,
)
from ._layout import Growth
from ._ops import (
    _grow,
    _policy_targets,
    _validated,
    fit,
    initial_state,
    lock,
    unlock,
)
from ._spec import (
    as_spec,
    is_spec_like,
)
from ._state import (
    Slot,
    WorkspaceState,
    make_slot,
    with_slots,
)


def _reservation_bytes(requests: Iterable[Any], alignment: int) -> int:
    """The bytes a slot needs so that each of ``requests`` fits without growth."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
        raise InvalidSpecError(f"requests must be a list of requests, got {requests!r}.")
    needed = 0
    for i, request in enumerate(requests):
        if is_spec_like(request):
            needed = max(needed, as_spec(request, f"requests[{i}]").nbytes)
        elif isinstance(request, (tuple, list)):
            checked = _validated(request, f"requests[{i}]")
            empty = initial_state(alignment=alignment)  # fit's total: the one layout rule
            total = fit(empty, 0, [c.nbytes for c in checked], argname="requests")[2]
            needed = max(needed, total)
        else:
            raise InvalidSpecError(
                f"requests[{i}] must be a (shape, dtype) pair or a list of them, got {request!r}."
            )
    return needed


def _slot_indices(state: WorkspaceState, slots: Iterable[Slot] | None) -> Sequence[int]:
    if slots is None:
        return range(len(state.slots))
    if not isinstance(slots, Iterable) or isinstance(slots, (str, bytes)):
        raise InvalidSpecError(f"slots must be a list of (ubatch, lane) pairs, got {slots!r}.")
    return [state.index(tuple(s) if isinstance(s, list) else s) for s in slots]


def reserve(
    state: WorkspaceState, requests: Iterable[Any], slots: Iterable[Slot] | None = None
) -> tuple[WorkspaceState, Growth]:
    """Grow ``slots`` (default: all) so that every request fits without growth.

    The worst-case reservation vLLM users asked for (#48179, #42275): reserve every
    request as the locked calls will make it, then :func:`lock`, and none of them can fail
    for lack of space. Idempotent.

    Args:
        state: the current state.
        requests: each is a sequence of pairs (one ``acquire`` call's views, padded as
            acquire pads: ``[pair]`` for a single view) or one bare ``(shape, dtype)``
            pair, which reserves its exact bytes (what a retained span of it needs; a
            single view of it needs its bytes rounded up to the alignment, so write
            ``[pair]`` for that).
        slots: the ``(ubatch, lane)`` pairs to reserve in; ``None`` for all. The growth
            policy applies: under ``"ubatches"`` a slot grows with its lane's ubatch slots.

    Returns:
        ``(new_state, growth)``: the growth lists the buffers to reallocate.

    Raises:
        InvalidSpecError: a malformed request or slot list.
        WorkspaceLockedError: locked and a slot would have to grow.
        CapacityLimitError: a slot would grow above ``max_capacity``.

    Example:
        >>> import numpy as np
        >>> from functional_ws import acquire, initial_state, lock, retain
        >>> s, growth = reserve(initial_state(num_ubatches=2), [((1024,), np.dtype("float16"))])
        >>> [s.capacity(slot) for slot in s.all_slots()], growth
        ([2048, 2048], (((0, 0), 2048), ((1, 0), 2048)))
    """
    needed = _reservation_bytes(requests, state.alignment)
    chosen = _slot_indices(state, slots)
    new_slots = list(state.slots)
    growth: Growth = ()
    for index in chosen:
        if new_slots[index].capacity < needed:
            growth += _grow(state, new_slots, _policy_targets(state, index), needed)
    return (with_slots(state, tuple(new_slots)) if growth else state), growth


def apply_plan(state: WorkspaceState, plan: WorkspaceState) -> tuple[WorkspaceState, Growth]:
    """Reserve in every slot the capacity ``plan`` lists, and lock if the plan was locked.

    Each slot grows to exactly its planned capacity (the growth policy does not spread
    it: the plan already says what every slot needs); slots that hold more keep it. A
    slot whose high-water mark is above its capacity (the plan was saved while the slot
    held no buffer: a growth in flight, or one that failed) grows to its high-water mark,
    the largest request it served, which a restart needs again.

    Args:
        state: the current state.
        plan: a state read back with :func:`functional_ws.from_dict`, made for the same
            number of ubatches and lanes and the same alignment.

    Returns:
        ``(new_state, growth)``.

    Raises:
        InvalidPlanError: (``ValueError``) the plan was made for another configuration, or
            is no state.
        WorkspaceLockedError: ``state`` is locked and a slot would have to grow.
        CapacityLimitError: a slot would grow above ``max_capacity``.

    Example:
        >>> import numpy as np
        >>> from functional_ws import acquire, initial_state, lock, retain
        >>> warm, _ = acquire(initial_state(), (0, 0), ((1000,), np.dtype("uint8")))
        >>> fresh, growth = apply_plan(initial_state(), lock(warm))
        >>> fresh.capacity((0, 0)), fresh.locked, growth
        (1024, True, (((0, 0), 1024),))
        >>> in_flight = after_failed_growth(warm, warm, {(0, 0): 0})  # a growth's slot, bare
        >>> apply_plan(initial_state(), in_flight)[1]  # saved mid-growth
        (((0, 0), 1024),)
    """
    if not isinstance(plan, WorkspaceState):
        raise InvalidPlanError(
            f"plan must be a WorkspaceState (a saved plan read back with "
            f"functional_ws.from_dict), got {type(plan).__name__} {plan!r:.80}."
        )
    for name in ("num_ubatches", "num_lanes", "alignment"):
        if getattr(plan, name) != getattr(state, name):
            raise InvalidPlanError(
                f"the plan has {name}={getattr(plan, name)}, but this workspace has "
                f"{name}={getattr(state, name)}."
            )
    new_slots = list(state.slots)
    growth: Growth = ()
    for index, planned in enumerate(plan.slots):
        needed = max(planned.capacity, planned.high_water)
        growth += _grow(state, new_slots, (index,), needed)
    new = with_slots(state, tuple(new_slots)) if growth else state
    return (lock(new) if plan.locked else new), growth


def after_failed_growth(
    old: WorkspaceState,
    new: WorkspaceState,
    held: Mapping[Slot, int],
    *,
    current: WorkspaceState | None = None,
) -> WorkspaceState:
    """The state after carrying out the growth from ``old`` to ``new`` failed part-way.

    A shell releases a slot's old buffer before allocating the new one (the original's
    order, which keeps a growth's peak at the new size). When an allocation then fails, the
    shell tries to allocate the old capacity again and reports, per slot it touched, the
    capacity of the buffer the slot holds now; this says what the state becomes:

    * a slot that got its new buffer is grown, as planned (nothing retained in it);
    * a slot whose old capacity was allocated again keeps that capacity, counts one more
      allocation, and has nothing retained (its bytes are new);
    * a slot left without a buffer (``0``) has capacity 0 and nothing retained;
    * every slot the shell did not touch is exactly as in ``old``.

    High-water marks stay as in ``old``: the failed call served nothing. The lock, the
    persistent keys and the configuration are ``old``'s.

    Args:
        old: the state before the transition that planned the growth.
        new: the state that transition returned.
        held: per slot the shell touched, the capacity its buffer has now: ``new``'s,
            ``old``'s, or 0.
        current: the state now, when other calls changed it while the shell carried the
            growth out (the touched slots held no buffer meanwhile): the other slots and the
            workspace-wide fields are then ``current``'s. ``None``: ``old``'s.

    Returns:
        The state that describes the buffers as they are.

    Raises:
        ValueError: a capacity in ``held`` that is none of those three.

    Example:
        >>> import numpy as np
        >>> from functional_ws import acquire, initial_state, lock, retain
        >>> s, _ = acquire(initial_state(), (0, 0), ((512,), np.dtype("uint8")))
        >>> s, span, _ = retain(s, (0, 0), "kv", ((100,), np.dtype("uint8")))
        >>> planned, layout = acquire(s, (0, 0), ((10**6,), np.dtype("uint8")))
        >>> restored = after_failed_growth(s, planned, {(0, 0): 512})
        >>> restored.capacity((0, 0)), restored.slots[0].retained, restored.slots[0].growths
        (512, None, 2)
    """
    base = old if current is None else current
    slots = list(base.slots)
    for slot, capacity in held.items():
        index = old.index(slot)
        before, planned = old.slots[index], new.slots[index]
        if type(capacity) is not int:  # (a float or a NumPy int: a state to_dict refuses)
            raise ValueError(f"held[{slot!r}] must be an int, got {capacity!r}.")
        if capacity == planned.capacity and planned.growths > before.growths:
            growths = planned.growths
        elif capacity == before.capacity and capacity > 0:
            growths = before.growths + 1
        elif capacity == 0:
            growths = before.growths
        else:
            raise ValueError(
                f"held[{slot!r}] must be the planned capacity {planned.capacity}, the old "
                f"capacity {before.capacity} or 0, got {capacity!r}."
            )
        slots[index] = make_slot(capacity, before.high_water, growths, None, before.persistent_keys)
    return with_slots(base, tuple(slots))


def rebase(
    old: WorkspaceState, new: WorkspaceState, current: WorkspaceState
) -> WorkspaceState | None:
    """``new``, planned on ``old``, put onto ``current``, which other calls made of ``old``
    meanwhile; ``None`` when they changed what ``new`` changes.

    A three-way merge, field by field: a slot (or the lock) that the transition left as
    ``old`` had it is ``current``'s; one it changed is ``new``'s, where ``current`` still
    has ``old``'s (compared by identity: a transition keeps the slots it does not touch).
    So calls in different slots never make each other plan again, and a shell that grew a
    slot while other calls went on (the slot held no buffer meanwhile, so none could change
    it) installs its growth over what they did: a lock taken meanwhile stays, as the
    original checks the lock before it releases anything.

    Args:
        old: the state the transition planned on.
        new: what it returned.
        current: the state now.

    Returns:
        The merged state (``current`` itself when ``new`` changed nothing), or ``None``.

    Example:
        >>> import numpy as np
        >>> from functional_ws import acquire, initial_state, lock
        >>> s = initial_state(num_ubatches=2)
        >>> planned, _ = acquire(s, (0, 0), ((1000,), np.dtype("uint8")))
        >>> meanwhile = lock(acquire(s, (1, 0), ((10,), np.dtype("uint8")))[0])
        >>> merged = rebase(s, planned, meanwhile)
        >>> merged.capacity((0, 0)), merged.capacity((1, 0)), merged.locked
        (1024, 256, True)
        >>> rebase(s, planned, acquire(s, (0, 0), ((10,), np.dtype("uint8")))[0]) is None
        True
    """
    if current is old:
        return new
    if new.locked is old.locked:
        locked = current.locked
    elif current.locked is old.locked:
        locked = new.locked
    else:
        return None
    slots = list(current.slots)
    changed = False
    for i, (before, after) in enumerate(zip(old.slots, new.slots, strict=True)):
        if after is before:
            continue
        if current.slots[i] is not before:
            return None  # both changed this slot
        slots[i] = after
        changed = True
    merged = with_slots(current, tuple(slots)) if changed else current
    return lock(merged) if locked else unlock(merged)
