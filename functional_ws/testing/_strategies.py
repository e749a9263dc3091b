"""Hypothesis strategies for workspace requests (shapes, dtypes, specs, slots and keys), for
the traces a run makes and for the states the core's transitions reach.

Small sizes by default so that shrinking ends on readable examples. The core's state machine
(:class:`functional_ws.testing.WorkspaceMachine`) draws its calls from these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .._errors import CapacityLimitError, PersistentKeyLockedError, WorkspaceLockedError
from .._growth import after_failed_growth, reserve
from .._ops import acquire, claim, initial_state, lock, retain, unlock
from .._state import GROWTH_POLICIES, MAX_SLOTS, Slot, WorkspaceState
from .._trace import Trace
from ._checks import check_count, check_dtype_pool, check_hashables, order_check

#: NumPy dtypes with 1, 2, 4, 8 and 16 byte items.
DEFAULT_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(name)
    for name in ("uint8", "int8", "float16", "int32", "float32", "float64", "complex128")
)


def dtypes(pool: Sequence[Any] = DEFAULT_DTYPES) -> st.SearchStrategy[Any]:
    """Dtypes drawn from ``pool``, shrinking towards its first.

    Args:
        pool: any objects with an ``itemsize`` (NumPy, torch or JAX dtypes).

    Returns:
        A strategy of elements of ``pool``.

    Raises:
        TypeError: ``pool`` is not a sequence, or holds something without an int ``itemsize``.
        ValueError: ``pool`` is empty.

    Example:
        >>> from hypothesis import find
        >>> find(dtypes(), lambda d: d.itemsize > 4)
        dtype('float64')
    """
    return st.sampled_from(check_dtype_pool("dtypes", "pool", pool))


def shapes(
    *, max_dims: int = 3, max_side: int = 40, min_side: int = 0
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes: tuples of non-negative ints, zero-sized dimensions and ``()`` included.

    Args:
        max_dims: the most dimensions.
        max_side: the largest size of one dimension.
        min_side: the smallest size of one dimension (``1`` leaves out empty shapes).

    Returns:
        A strategy of tuples, shrinking towards ``()``.

    Raises:
        TypeError: an argument is not an int.
        ValueError: a negative argument, or ``min_side > max_side``.

    Example:
        >>> from hypothesis import find
        >>> find(shapes(max_dims=2, max_side=4), lambda s: len(s) == 2 and sum(s) > 5)
        (2, 4)
    """
    check_count("shapes", "max_dims", max_dims, floor=0)
    check_count("shapes", "max_side", max_side, floor=0)
    check_count("shapes", "min_side", min_side, floor=0)
    order_check("shapes", "min_side", min_side, "max_side", max_side)
    return st.lists(st.integers(min_side, max_side), min_size=0, max_size=max_dims).map(tuple)


def specs(
    *,
    dtype_pool: Sequence[Any] = DEFAULT_DTYPES,
    max_dims: int = 3,
    max_side: int = 40,
    min_side: int = 0,
) -> st.SearchStrategy[tuple[tuple[int, ...], Any]]:
    """``(shape, dtype)`` pairs, as ``get_simultaneous`` takes them.

    Args:
        dtype_pool: the dtypes to draw from (see :func:`dtypes`).
        max_dims: see :func:`shapes`.
        max_side: see :func:`shapes`.
        min_side: see :func:`shapes`.

    Returns:
        A strategy of pairs.

    Raises:
        TypeError: see :func:`dtypes` and :func:`shapes`.
        ValueError: see :func:`dtypes` and :func:`shapes`.

    Example:
        >>> from hypothesis import find
        >>> find(specs(), lambda spec: len(spec[0]) == 1 and spec[1].itemsize == 4)
        ((0,), dtype('int32'))
    """
    sizes = shapes(max_dims=max_dims, max_side=max_side, min_side=min_side)
    return st.tuples(sizes, dtypes(dtype_pool))


def spec_lists(
    *, min_size: int = 1, max_size: int = 4, **kwargs: Any
) -> st.SearchStrategy[list[tuple[tuple[int, ...], Any]]]:
    """The argument list of one ``get_simultaneous`` call.

    Args:
        min_size: the fewest pairs (``0`` allows the empty call).
        max_size: the most pairs.
        **kwargs: passed to :func:`specs`.

    Returns:
        A strategy of lists of ``(shape, dtype)`` pairs.

    Raises:
        TypeError: a size is not an int, or see :func:`specs`.
        ValueError: a negative size, ``min_size > max_size``, or see :func:`specs`.

    Example:
        >>> from hypothesis import find
        >>> find(spec_lists(max_size=2), lambda specs: len(specs) == 2)
        [((), dtype('uint8')), ((), dtype('uint8'))]
    """
    check_count("spec_lists", "min_size", min_size, floor=0)
    check_count("spec_lists", "max_size", max_size, floor=0)
    order_check("spec_lists", "min_size", min_size, "max_size", max_size)
    return st.lists(specs(**kwargs), min_size=min_size, max_size=max_size)


def slots(num_ubatches: int, num_lanes: int) -> st.SearchStrategy[Slot]:
    """``(ubatch, lane)`` pairs of a workspace with the given counts.

    Args:
        num_ubatches: ubatch slots of the workspace.
        num_lanes: lanes per ubatch.

    Returns:
        A strategy of pairs, shrinking towards ``(0, 0)``.

    Raises:
        TypeError: a count is not an int.
        ValueError: a count is below one.

    Example:
        >>> from hypothesis import find
        >>> find(slots(2, 3), lambda slot: slot[1] == 2)
        (0, 2)
    """
    check_count("slots", "num_ubatches", num_ubatches, floor=1)
    check_count("slots", "num_lanes", num_lanes, floor=1)
    return st.tuples(st.integers(0, num_ubatches - 1), st.integers(0, num_lanes - 1))


def keys(names: Sequence[Hashable] = ("a", "b", "c")) -> st.SearchStrategy[Hashable]:
    """Keys for retained spans and persistent resources, from a small pool (so they repeat).

    Args:
        names: the pool.

    Returns:
        A strategy of elements of ``names``, shrinking towards the first.

    Raises:
        TypeError: ``names`` is a string or not a sequence, or holds an unhashable key.
        ValueError: ``names`` is empty.

    Example:
        >>> from hypothesis import find
        >>> find(keys(), lambda key: key != "a")
        'b'
    """
    return st.sampled_from(check_hashables("keys", "names", names))


#: Keys a trace's retains and claims draw from: a str, vLLM's tuple spelling, an int.
TRACE_KEYS: tuple[Hashable, ...] = ("a", ("deepseek", 3), 7)


def traces(
    num_ubatches: int = 1,
    num_lanes: int = 1,
    *,
    max_events: int = 12,
    key_pool: Sequence[Hashable] = TRACE_KEYS,
    **kwargs: Any,
) -> st.SearchStrategy[Trace]:
    """Traces of a workspace with the given counts: acquires, retains and claims, mixed.

    Args:
        num_ubatches: ubatch slots of the workspace.
        num_lanes: lanes per ubatch.
        max_events: the most events.
        key_pool: the keys retains and claims draw from (see :func:`keys`).
        **kwargs: passed to :func:`specs` (``dtype_pool``, ``max_dims``, ``max_side``...).

    Returns:
        A strategy of :class:`functional_ws.Trace`, shrinking towards the empty trace.

    Raises:
        TypeError: a count is not an int, or see :func:`keys` and :func:`specs`.
        ValueError: a count below one (``max_events`` below zero), or see :func:`keys`.

    Example:
        >>> from hypothesis import find
        >>> find(traces(), lambda t: len(t) == 2 and t.events[1].kind == "claim")
        Trace(2 events in slot (0, 0): 1 acquire, 1 claim)
    """
    check_count("traces", "max_events", max_events, floor=0)
    where = slots(num_ubatches, num_lanes)
    key = keys(key_pool)
    acquire = st.tuples(st.just("acquire"), where, spec_lists(min_size=0, **kwargs))
    retain = st.tuples(st.just("retain"), where, key, specs(**kwargs))
    claim = st.tuples(st.just("claim"), where, key)
    return st.lists(st.one_of(acquire, retain, claim), max_size=max_events).map(_built)


def _built(steps: list[tuple[Any, ...]]) -> Trace:
    trace = Trace()
    for kind, slot, *rest in steps:
        if kind == "acquire":
            trace = trace.acquire(slot, *rest[0])
        elif kind == "retain":
            trace = trace.retain(slot, rest[0], rest[1])
        else:
            trace = trace.claim(slot, rest[0])
    return trace


#: The transitions :func:`states` draws from (sorted: a deterministic replay's order).
_STEPS = (
    "acquire",
    "claim",
    "emptied",
    "failed_growth",
    "lock",
    "reserve",
    "retain",
    "unlock",
)
_REFUSALS = (WorkspaceLockedError, PersistentKeyLockedError, CapacityLimitError)


def states(
    num_ubatches: int = 2, num_lanes: int = 1, *, max_steps: int = 8
) -> st.SearchStrategy[WorkspaceState]:
    """States the core's transitions reach: what a shell may hold, or save as a plan.

    Each starts from :func:`functional_ws.initial_state` (its alignment, growth policy and
    capacity limit drawn) and applies up to ``max_steps`` transitions, each one of:
    ``acquire``, ``retain``, ``claim``, ``reserve``, ``lock``, ``unlock``; a growth in
    flight (the slot's buffer released: :func:`functional_ws.after_failed_growth` with the slot
    at 0); and a growth that failed
    (:func:`functional_ws.after_failed_growth`, each growing slot holding its planned
    capacity, its old one or nothing, and sometimes another call's state as ``current``).
    A transition the state refuses (locked, above the limit) is skipped.

    Args:
        num_ubatches: ubatch slots of the workspace.
        num_lanes: lanes per ubatch.
        max_steps: the most transitions.

    Returns:
        A strategy of :class:`~functional_ws.WorkspaceState`, shrinking towards the
        initial state.

    Raises:
        TypeError: an argument is not an int.
        ValueError: a count below one, more than ``2**16`` slots (a workspace's most), or a
            negative ``max_steps``.

    Example:
        >>> from hypothesis import given, settings
        >>> from functional_ws import from_dict, to_dict
        >>> @settings(max_examples=20)
        ... @given(states())
        ... def test_a_plan_reads_back(state):
        ...     assert [s.high_water for s in from_dict(to_dict(state)).slots] == [
        ...         s.high_water for s in state.slots
        ...     ]
        >>> test_a_plan_reads_back()
    """
    check_count("states", "num_ubatches", num_ubatches, floor=1)
    check_count("states", "num_lanes", num_lanes, floor=1)
    check_count("states", "max_steps", max_steps, floor=0)
    if num_ubatches * num_lanes > MAX_SLOTS:
        raise ValueError(
            f"states(num_ubatches={num_ubatches}, num_lanes={num_lanes}): a workspace has at "
            f"most {MAX_SLOTS} slots"
        )
    return _states(num_ubatches, num_lanes, max_steps)


@st.composite
def _states(draw: st.DrawFn, num_ubatches: int, num_lanes: int, max_steps: int) -> WorkspaceState:
    state = initial_state(
        num_ubatches,
        num_lanes,
        alignment=draw(st.sampled_from((16, 256))),
        growth=draw(st.sampled_from(GROWTH_POLICIES)),
        max_capacity=draw(st.sampled_from((None, 1 << 16))),
    )
    slot_of = slots(num_ubatches, num_lanes)
    steps = [draw(st.sampled_from(_STEPS)) for _ in range(draw(st.integers(0, max_steps)))]
    lost: bool = draw(st.booleans())
    if steps and lost:  # often near the end: a buffer lost, as a plan sees it
        at = draw(st.integers(max(0, len(steps) - 2), len(steps) - 1))
        steps[at] = draw(st.sampled_from(("emptied", "failed_growth")))
    for step in steps:
        with contextlib.suppress(*_REFUSALS):  # refused: a failed transition changes nothing
            state = _step(draw, state, step, draw(slot_of), slot_of)
    return state


def _step(
    draw: st.DrawFn, state: WorkspaceState, step: str, slot: Slot, slot_of: Any
) -> WorkspaceState:
    """``state`` after the transition ``step`` in ``slot``, its arguments drawn."""
    if step == "acquire":
        return acquire(state, slot, *draw(spec_lists(max_size=2, max_side=16)))[0]
    if step == "retain":
        return retain(state, slot, draw(keys()), draw(specs(max_side=16)))[0]
    if step == "claim":
        return claim(state, slot, draw(keys()))[0]
    if step == "reserve":
        return reserve(state, [draw(specs(max_side=16))], [slot])[0]
    if step == "lock":
        return lock(state)
    if step == "unlock":
        return unlock(state)
    used = [state.slot_of(i) for i, s in enumerate(state.slots) if s.capacity and s.high_water]
    if used:  # a growth in flight or failed: of a slot that served requests, where one did
        slot = draw(st.sampled_from(used))
    if step == "emptied":  # its buffer released, the new one not yet installed
        return after_failed_growth(state, state, {slot: 0})
    # failed_growth: a request that grows, carried out only in part
    planned, layout = acquire(state, slot, *draw(spec_lists(max_size=2, max_side=16)))
    held = {}
    for grown, capacity in layout.growth:
        old = state.slots[state.index(grown)].capacity
        held[grown] = draw(st.sampled_from(sorted({capacity, old, 0})))
    current = None
    moved: bool = draw(st.booleans())
    if held and moved:  # another call moved the state meanwhile
        current = after_failed_growth(state, state, dict.fromkeys(held, 0))
        current = _step(draw, current, "acquire", draw(slot_of), slot_of)
    return after_failed_growth(state, planned, held, current=current)
