"""Sizing from traces: the smallest workspace a run needs, and a replay that proves it.

Both run a trace's events through the core's own transitions (:func:`fit` for an acquire,
:func:`retain`, :func:`claim`) on an unlocked copy of a state: no layout rule is written
here. A growth the copy makes is a request the state did not cover. So
:func:`worst_case` is the capacities a run from empty arrives at (the largest request per
slot; with ``growth="ubatches"`` per lane, its ubatch slots in step), and :func:`replay`
lists every growth a trace would make on a given state, plus each new persistent key a
locked state would refuse. Pure, like every transition: the same answer every time, and
no memory touched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

import jax
import numpy as np

from ._errors import InvalidTraceError, TraceMismatchError, TraceTypeError
from ._layout import Growth
from ._ops import _grow, claim, fit, initial_state, retain
from ._presenters import Presented, robust_repr
from ._spec import ViewSpec
from ._state import SlotState, WorkspaceState, with_slots
from ._trace import Trace
from ._trace_events import ReprKey, TraceEvent, short
from ._trace_json import key_spelling

_UINT8 = np.dtype("uint8")


@jax.tree_util.register_static
@robust_repr
@dataclasses.dataclass(frozen=True, slots=True)
class Shortfall(Presented):
    """One request of a trace that a state does not cover.

    Either the request needs more bytes than its slot holds (a growth, refused once
    locked), or it claims a persistent key that a locked state never saw.

    Attributes:
        index: the event's position in the trace.
        event: the :class:`TraceEvent`.
        needed: the bytes the request needs in its slot (views with their padding for an
            acquire, the span for a retain; 0 for a key).
        capacity: the bytes the slot held when the request came.
        growth: what an unlocked workspace grows to serve it (``((slot, bytes), ...)``:
            with ``growth="ubatches"``, its lane's ubatch slots too); empty for a key.
            Under ``growth="ubatches"`` a retain grows the other ubatch slots of its lane
            that are smaller even when its own slot fits (as the manager does): that is a
            shortfall too, with :attr:`missing` 0 and ``growth`` naming those slots.
    """

    index: int
    event: TraceEvent
    needed: int
    capacity: int
    growth: Growth = ()

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself

    @property
    def slot(self) -> tuple[int, int]:
        """The ``(ubatch, lane)`` of the request."""
        return self.event.slot

    @property
    def call(self) -> str:
        """The original API's call: ``get_simultaneous``, ``get_retained`` or
        ``persistent key``."""
        return self.event.call

    @property
    def missing(self) -> int:
        """The bytes the slot lacks (0 for a key)."""
        return max(self.needed - self.capacity, 0)


def _checked_state(state: object, argname: str) -> WorkspaceState:
    if not isinstance(state, WorkspaceState):
        raise TraceTypeError(
            f"{argname} must be a WorkspaceState (functional_ws.initial_state(...), a "
            f"manager's .state), got {short(state)}."
        )
    return state


def _checked_trace(trace: object, argname: str, state: WorkspaceState) -> Trace:
    """``trace``, refused when it is no trace or names a slot ``state`` does not have."""
    if not isinstance(trace, Trace):
        hint = ""
        if isinstance(trace, (list, tuple)) and trace and all(isinstance(t, Trace) for t in trace):
            hint = (
                " Pass the traces one by one: worst_case(*traces, like=...), reserve_for(*traces)."
            )
        raise TraceTypeError(
            f"{argname} must be a functional_ws.Trace (a recording's History.trace(), "
            f"Trace().acquire(...), Trace.from_json(...)), got {short(trace)}.{hint}"
        )
    for i, event in enumerate(trace.events):
        ubatch, lane = event.slot
        if ubatch >= state.num_ubatches or lane >= state.num_lanes:
            raise TraceMismatchError(
                f"{argname}: event {i} ({event.describe()}) is in slot {event.slot}, but the "
                f"workspace has {state.num_ubatches} ubatch(es) x {state.num_lanes} lane(s): "
                "the trace was recorded on another configuration. Size a state built like "
                f"the recording's (num_ubatches >= {ubatch + 1}, num_lanes >= {lane + 1})."
            )
    return trace


def _planning_copy(state: WorkspaceState) -> WorkspaceState:
    """``state`` unlocked and without a capacity limit: where a replay may grow freely."""
    if not state.locked and state.max_capacity is None:
        return state
    return dataclasses.replace(state, locked=False, max_capacity=None)


def _claimed(keys: frozenset[Hashable], key: Hashable) -> bool:
    """Whether ``key`` is among ``keys``: by equality, as the manager looks it up; a key
    read back from JSON that holds a :class:`ReprKey` also part by part, each
    :class:`ReprKey` by its JSON spelling (it matches the live part it was written from) and
    every other part by equality (``1.0`` is the held ``1``, as at run time). A live key
    never matches by spelling: two layers with the same ``repr``, or two NaNs, are two keys
    at run time."""
    if key in keys:
        return True
    if not _read_back(key):
        return False
    return any(_same_key(key, k) for k in keys)


def _same_key(read: Hashable, live: Hashable) -> bool:
    """Whether ``read``, a key read back from JSON, is the live key ``live``."""
    if type(read) is ReprKey:
        return key_spelling(read) == key_spelling(live)
    if type(read) is tuple:
        return (
            isinstance(live, tuple)
            and len(read) == len(live)
            and all(_same_key(r, x) for r, x in zip(read, live, strict=True))
        )
    return bool(read == live)


def _read_back(key: Hashable) -> bool:
    """Whether ``key`` is or holds a :class:`ReprKey` (what JSON gives back for a key it
    could only write as its ``repr``)."""
    if type(key) is ReprKey:
        return True
    return type(key) is tuple and any(_read_back(part) for part in key)


def _run(
    state: WorkspaceState, trace: Trace, locked: bool, where: str = "trace"
) -> tuple[WorkspaceState, list[Shortfall]]:
    """Every event of ``trace`` (named ``where`` in errors) on ``state`` (a planning copy),
    by the core's transitions.

    Returns:
        The state after the last event, and a shortfall per event that grew a slot (or,
        when ``locked``, claimed a key its slot did not hold).
    """
    shortfalls = []
    for i, event in enumerate(trace.events):
        index = state.index(event.slot)
        before = state.slots[index].capacity
        if event.kind == "acquire":
            argname = f"{where}.events[{i}]"
            state, _, needed, growth = fit(state, index, event.nbytes, argname=argname)
        elif event.kind == "retain":
            # A span depends on a request through its byte count alone (``_after_retain``):
            # the same bytes as a uint8 vector plan as the recorded view did.
            (needed,) = event.nbytes
            spec = ViewSpec((needed,), _UINT8, 1, needed)
            state, span, _ = retain(state, event.slot, event.key, spec)
            growth = span.growth
        else:
            needed, growth = 0, ()
            if locked and not _claimed(state.slots[index].persistent_keys, event.key):
                shortfalls.append(Shortfall(i, event, 0, before))
            state = claim(state, event.slot, event.key)[0]
        if growth:
            shortfalls.append(Shortfall(i, event, needed, before, growth))
    return state, shortfalls


def replay(state: WorkspaceState, trace: Trace) -> tuple[Shortfall, ...]:
    """The requests of ``trace`` that ``state`` does not cover; empty when it covers them.

    The events run in order through the core's transitions on ``state`` as an unlocked
    workspace would serve them: each request that would grow a slot is a shortfall, and
    the replay goes on as if the slot had grown (so a shortfall is one growth the trace
    would make, and the capacity it finds is what the slot holds by then). When ``state``
    is locked, a claim of a persistent key its slot does not hold is a shortfall too
    (``get_persistent_resource`` would refuse it). The capacity limit is not applied: a
    request above it is reported as a shortfall like any other. Pure: the same answer
    every time, no memory touched.

    Args:
        state: the workspace to check (a manager's ``.state``, a plan, a
            :func:`worst_case`), as it is: a plan saved while a slot held no buffer (a
            growth in flight, or one that failed) has capacity 0 there, though
            :func:`apply_plan` reserves the slot's high-water mark; to check what loading
            a plan reserves, replay ``apply_plan(like, plan)[0]``.
        trace: the requests.

    Returns:
        The :class:`Shortfall` of each uncovered request, in event order.

    Raises:
        TraceTypeError: (``TypeError``) ``state`` is not a state or ``trace`` not a trace.
        TraceMismatchError: (``ValueError``) an event's slot is not one of ``state``'s.
        InvalidShapeError: (``ValueError``) an event's views need ``2**63`` bytes or more
            together (a trace built or read so), naming the event.

    Example:
        >>> import numpy as np
        >>> from functional_ws import Trace, initial_state, lock, replay, reserve
        >>> t = Trace().acquire((0, 0), ((1000,), np.uint8)).claim((0, 0), "scales")
        >>> s, _ = reserve(initial_state(), [((768,), np.uint8)])
        >>> for shortfall in replay(lock(s), t):
        ...     print(shortfall)
        event 0, get_simultaneous(1000 B uint8) in slot (0, 0): needs 1.00 KiB,
          finds 768 B (256 B short)
        event 1, persistent key 'scales' in slot (0, 0): a new key, which a locked
          workspace refuses
        >>> replay(s, t)  # unlocked, the key would be claimed
        (Shortfall(index=0, ...),)
    """
    state = _checked_state(state, "state")
    trace = _checked_trace(trace, "trace", state)
    return tuple(_run(_planning_copy(state), trace, state.locked)[1])


def worst_case(*traces: Trace, like: WorkspaceState) -> WorkspaceState:
    """The smallest workspace on which every trace runs with no growth.

    Built like ``like`` (its ubatches, lanes, alignment, growth policy and capacity
    limit), unlocked, with no retained span, no persistent key and no high-water mark: each
    slot holds exactly the largest request any trace makes in it (views with their
    padding, as ``get_simultaneous`` lays them out; a retained span), grown once. With
    ``growth="ubatches"`` the ubatch slots of a lane stay in step, at the lane's largest
    request. A slot no trace uses holds nothing. ``like``'s own capacities do not count.

    Args:
        *traces: one or more traces (a warm-up, serving runs, a search's worst finds).
        like: a state of the workspace to size (a manager's ``.state``).

    Returns:
        The state; :func:`replay` of each trace on it reports nothing.

    Raises:
        TraceTypeError: (``TypeError``) ``like`` is not a state or a trace is not a trace.
        InvalidTraceError: (``ValueError``) no trace was given.
        TraceMismatchError: (``ValueError``) a trace names a slot ``like`` does not have.
        InvalidShapeError: (``ValueError``) an event's views need ``2**63`` bytes or more
            together, naming the trace and the event.
        CapacityLimitError: (``RuntimeError``) a slot would need more than ``like``'s
            capacity limit.

    Example:
        >>> import numpy as np
        >>> from functional_ws import Trace, initial_state, worst_case
        >>> warmup = Trace().acquire((0, 0), ((1000,), np.uint8), ((10,), np.float32))
        >>> serving = Trace().acquire((1, 0), ((3000,), np.uint8))
        >>> s = worst_case(warmup, serving, like=initial_state(num_ubatches=2))
        >>> [s.capacity(slot) for slot in s.all_slots()]
        [1280, 3072]
        >>> s = worst_case(warmup, serving, like=initial_state(num_ubatches=2, growth="ubatches"))
        >>> [s.capacity(slot) for slot in s.all_slots()]
        [3072, 3072]
    """
    like = _checked_state(like, "like")
    if not traces:
        raise InvalidTraceError(
            "worst_case needs at least one trace: worst_case(trace, ..., like=state)."
        )
    checked = [_checked_trace(t, f"traces[{i}]", like) for i, t in enumerate(traces)]
    empty = initial_state(
        like.num_ubatches, like.num_lanes, alignment=like.alignment, growth=like.growth
    )
    needed = [0] * len(empty.slots)
    for i, trace in enumerate(checked):
        final = _run(empty, trace, locked=False, where=f"traces[{i}]")[0]
        needed = [max(n, s.capacity) for n, s in zip(needed, final.slots, strict=True)]
    base = dataclasses.replace(empty, max_capacity=like.max_capacity)
    slots: list[SlotState] = list(base.slots)
    for index, capacity in enumerate(needed):
        _grow(base, slots, (index,), capacity)  # the one growth rule, limit included
    return with_slots(base, tuple(slots))
