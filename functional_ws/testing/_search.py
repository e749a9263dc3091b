"""Search a workload's runtime parameters for a trace that a reservation does not cover.

The test a vLLM-style user writes: "no batch size, sequence length or expert count in these
ranges needs more scratch than we reserve". A strategy draws the parameters, the workload
turns them into the :class:`~functional_ws.Trace` of requests it would make, and
:func:`functional_ws.replay` says what the reserved state does not cover; Hypothesis
searches and shrinks, so a failure names the smallest parameters that break the
reservation, and the request that needs more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import hypothesis
from hypothesis import find
from hypothesis import strategies as st
from hypothesis.errors import Flaky, NoSuchExample

from .._errors import TraceTypeError
from .._sizing import Shortfall, replay, worst_case
from .._state import WorkspaceState
from .._trace import Trace
from .._trace_events import short

P = TypeVar("P")


@dataclasses.dataclass(frozen=True)
class Counterexample(Generic[P]):
    """Parameters whose trace a state does not cover, shrunk by Hypothesis.

    ``print(found)`` (and ``repr``, which pytest shows under a failed ``assert found is
    None``) names the parameters and each shortfall.

    Attributes:
        params: the smallest parameters found (as the strategy drew them).
        trace: the workload's trace for them.
        shortfalls: what :func:`functional_ws.replay` reports for that trace.
    """

    params: P
    trace: Trace
    shortfalls: tuple[Shortfall, ...]

    def __str__(self) -> str:
        lines = [f"params {self.params!r} need more than the state holds ({self.trace!r}):"]
        lines += [f"  {s}" for s in self.shortfalls]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def find_shortfall(
    params: st.SearchStrategy[P],
    workload: Callable[[P], Trace],
    state: WorkspaceState,
    *,
    settings: hypothesis.settings | None = None,
) -> Counterexample[P] | None:
    """Search ``params`` for parameters whose trace ``state`` does not cover.

    Hypothesis draws parameters, ``workload`` turns each into a trace, and
    :func:`functional_ws.replay` on ``state`` decides; the first parameters with a
    shortfall are shrunk to the smallest that still have one. While the traces are
    covered, the search climbs towards the one that comes closest to what ``state`` holds
    (``hypothesis.target`` of the most bytes any slot's worst case lacks): a shortfall only
    at the corner of the ranges, every parameter at its largest, is rarely drawn by chance.
    The climb takes about half the example budget: give the search at least 100 examples
    for ranges of thousands (``settings=hypothesis.settings(max_examples=200)``; the kit's
    ``ci`` profile has 60). The workload must be deterministic (the same trace for the
    same parameters), as a Hypothesis test must be.

    In a test (``state``: the reservation you lock, e.g. ``worst_case(warmup, like=...)``
    or a manager's ``.state``)::

        def test_no_batch_needs_more_scratch_than_we_reserve():
            batches = st.fixed_dictionaries({
                "batch": st.integers(1, 256), "seq_len": st.integers(1, 8192),
                "experts_hit": st.integers(2, 64)})
            assert find_shortfall(batches, moe_trace, reserved) is None

    Args:
        params: a strategy for the workload's runtime parameters.
        workload: ``params -> Trace``: the requests a run with those parameters makes
            (built with :meth:`Trace.acquire` and friends, or recorded:
            ``interop.History.trace()``).
        state: the reserved workspace.
        settings: Hypothesis settings for the search; ``None`` uses the loaded profile
            (its example budget and seed) with no deadline (a workload may run a model) and
            no example database.

    Returns:
        ``None`` when no parameters tried need more than ``state`` holds; else the
        :class:`Counterexample`.

    Raises:
        TypeError: ``params`` is not a strategy, ``workload`` not callable, ``state`` not
            a state or ``settings`` not settings.
        TraceTypeError: (``TypeError``) ``workload`` returned something other than a trace.
        TraceMismatchError: (``ValueError``) a trace names a slot ``state`` does not have.
        hypothesis.errors.Flaky: the parameters found fell short in the search but not when
            the workload ran again (it is not deterministic).

    Example:
        >>> import numpy as np
        >>> from hypothesis import strategies as st
        >>> from functional_ws import Trace, initial_state, worst_case
        >>> def step(tokens):  # hidden states of 64 float16 per token
        ...     return Trace().acquire((0, 0), ((tokens, 64), np.float16))
        >>> reserved = worst_case(step(100), like=initial_state())
        >>> print(find_shortfall(st.integers(1, 512), step, reserved))  # doctest: +ELLIPSIS
        params 101 need more than the state holds (Trace(1 event in slot (0, 0): 1 acquire)):
          event 0, get_simultaneous(12.62 KiB float16) in slot (0, 0): needs 12.75 KiB, ...
    """
    if not isinstance(params, st.SearchStrategy):
        raise TypeError(
            f"find_shortfall(params={short(params)}): params must be a Hypothesis strategy "
            "(st.integers(1, 512), st.fixed_dictionaries({...}), ...)"
        )
    if not callable(workload):
        raise TypeError(
            f"find_shortfall(workload={short(workload)}): workload must be a function "
            "params -> functional_ws.Trace"
        )
    if not isinstance(state, WorkspaceState):
        raise TypeError(
            f"find_shortfall(state={short(state)}): state must be a WorkspaceState (a "
            "manager's .state, functional_ws.worst_case(...))"
        )
    if settings is not None and not isinstance(settings, hypothesis.settings):
        raise TypeError(
            f"find_shortfall(settings={short(settings)}): settings must be "
            "hypothesis.settings or None"
        )

    def trace_of(value: P) -> Trace:
        trace = workload(value)
        if not isinstance(trace, Trace):
            raise TraceTypeError(
                f"find_shortfall: workload({value!r}) must return a functional_ws.Trace, "
                f"got {short(trace)}."
            )
        return trace

    capacities = [slot.capacity for slot in state.slots]

    def uncovered(value: P) -> bool:
        trace = trace_of(value)
        if replay(state, trace):
            return True
        # Covered: how close it came, for Hypothesis to climb (the corner of the ranges,
        # every parameter at its largest, is rarely drawn by chance in a small budget).
        needed = worst_case(trace, like=state).slots
        gaps = [n.capacity - c for n, c in zip(needed, capacities, strict=True) if n.capacity]
        if gaps:  # (over the slots the trace uses: an idle one would pin the score at 0)
            hypothesis.target(max(gaps))
        return False

    chosen = settings if settings is not None else hypothesis.settings(deadline=None, database=None)
    try:
        found = find(params, uncovered, settings=chosen)
    except NoSuchExample:
        return None
    trace = trace_of(found)
    shortfalls = replay(state, trace)
    if not shortfalls:
        raise Flaky(
            f"find_shortfall: workload({found!r}) fell short during the search but not when "
            f"run again ({trace!r}): the workload must give the same trace for the same "
            "parameters (no state kept between calls, no randomness of its own, parameters "
            "it does not change)."
        )
    return Counterexample(found, trace, shortfalls)
