"""The façade's memo: per slot, the core's plan and the carved views of each request seen.

A plan is a pure function of (state, slot, request), so each slot keeps, per raw request,
the plan the core made and the views carved for it. A repeated request then costs a
dictionary lookup and one ``view(dtype)`` per tensor (``get_simultaneous`` inlines it).

Admission on the second sight: a request seen only once costs no memory (a request never
seen again, such as a new ``num_tokens``, is the common miss), so the memo holds what
repeats. The first sight only records the request's hash (an int: nothing for the garbage
collector to walk); the second memoises it.

Bounded, least recently used first out, at no cost on a hit: a :class:`Memo` is the young
generation (a plain ``dict``, what the hot path looks up) and keeps an old one beside it.
When the young generation is full it becomes the old one and the previous old one is
dropped; a request found only in the old generation is promoted back. So an entry used at
least once per generation is never evicted, and a working set larger than the bound costs
what a miss costs, never more (the memo never clears itself whole).

Correctness under threads and interrupts. An entry records the generation of the buffer
its views were carved from (``_carving.Carver.generation``), and a replay serves it only
while that buffer is still its slot's; a hit without a replay needs the very state object
the entry's plan left, which changes whenever the buffer does. When a slot's buffer is
replaced, its memos retire (:meth:`Memos.retire`, which the engine calls before the
buffer goes): a fresh memo takes each one's place in the tables first, then the old one is
marked ``dead``, so the tables always hold a live memo, whatever interrupts the
retirement; the engine empties the dead ones (their views pin the old buffer) once it
holds no lock (their entries hold the caller's keys, whose ``__del__`` may call it).

Replaying. When the state moved since an entry was last used, :func:`replay_and_swap`
replays its plan on the current state (the core's replay, cached by the identity of the
state it started from) and installs the result by compare-and-swap: one routine for
``get_simultaneous`` and ``get_retained`` (the façade inlines only the identity check that
comes before it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any, Protocol

import torch

from functional_ws import Layout, Span, WorkspaceState
from functional_ws.fast_paths import layout_of, replay_acquire, replay_retain

from .._private import modes_active
from ._carving import fresh, view_maker
from ._requests import is_plain, plain_shape

#: Entries per slot and kind (two generations of half this).
MAX_MEMOISED = 16384


class AcquiredEntry:
    """One memoised ``get_simultaneous`` request.

    Attributes:
        state: the state a replay of ``plan`` last left unchanged (then a hit needs no
            replay), or ``None``.
        moved: ``(before, after, True)``: the last replay that changed the state, from which
            state to which (the core is pure: the same state gives the same result), so a
            pattern that alternates between states (a retained tail, then a request that
            reaches into it) replays nothing after its first round. One attribute, so
            threads read it whole.
        plan: the core's :class:`functional_ws.Layout`, without growth.
        fresh: returns fresh views of the carved ones, one per requested tensor.
        one: the carved view of a one-tensor request (the hot path views it itself:
            ``bench_hot_path``'s "get_simultaneous x1"), else ``None``; ``dtype`` its dtype.
        generation: the generation of the slot's buffer the views were carved from.
    """

    __slots__ = ("dtype", "fresh", "generation", "moved", "one", "plan", "state")

    def __init__(
        self,
        plan: Layout,
        fresh: Callable[[], list[torch.Tensor]],
        one: torch.Tensor | None = None,
        generation: int = 0,
    ) -> None:
        self.state: WorkspaceState | None = None
        self.moved: tuple[WorkspaceState, WorkspaceState, bool] | None = None
        self.plan = plan
        self.fresh = fresh
        self.one = one
        self.dtype = None if one is None else one.dtype
        self.generation = generation

    @staticmethod
    def replay(
        state: WorkspaceState, plan: Any, hint: WorkspaceState | None
    ) -> tuple[WorkspaceState, Layout, bool]:
        """The core's replay of ``plan`` on ``state`` (``True``: no flag to report)."""
        new, layout = replay_acquire(state, plan, hint)
        return new, layout, True


class RetainedEntry:
    """One memoised ``get_retained`` request: the span and the view carved for it.

    ``state``, ``moved`` and ``generation`` as for :class:`AcquiredEntry`; ``moved`` keeps
    the intact flag of that replay: ``(before, after, intact)``. ``plan`` is the core's
    :class:`functional_ws.Span`.
    """

    __slots__ = ("generation", "moved", "plan", "state", "view")

    def __init__(self, plan: Span, view: torch.Tensor, generation: int = 0) -> None:
        self.state: WorkspaceState | None = None
        self.moved: tuple[WorkspaceState, WorkspaceState, bool] | None = None
        self.plan = plan
        self.view = view
        self.generation = generation

    @staticmethod
    def replay(
        state: WorkspaceState, plan: Any, hint: WorkspaceState | None
    ) -> tuple[WorkspaceState, Span, bool]:
        """The core's replay of ``plan`` on ``state``: the new state, span, intact flag."""
        return replay_retain(state, plan, hint)


class Swapper(Protocol):
    """What :func:`replay_and_swap` installs a state through (the engine): its
    compare-and-swap, and the generation of a slot's current buffer."""

    def swap(self, old: WorkspaceState, new: WorkspaceState) -> bool: ...

    def generation(self, index: int) -> int: ...


def replay_and_swap(
    engine: Swapper,
    memo: Memo,
    entry: AcquiredEntry | RetainedEntry,
    state: WorkspaceState,
) -> bool | None:
    """Serve ``entry`` on ``state``, which moved since the entry was last used: replay its
    plan, install the result, and say whether the views may be handed out.

    Returns:
        The replay's flag (``get_retained``'s intact flag; ``True`` for
        ``get_simultaneous``) when ``entry``'s views serve the request; ``None`` when the
        slow path must serve it: the slot's buffer was replaced since the views were carved,
        the replay needs a growth or moves the span, or another thread changed the state.
    """
    if not still_current(engine, memo, entry):
        return None
    moved = entry.moved
    if moved is not None and moved[0] is state:  # replayed from this state before
        new, flag = moved[1], moved[2]
    else:
        new, plan, flag = entry.replay(state, entry.plan, None if moved is None else moved[1])
        if plan is not entry.plan:  # it must grow, or the span moved: the slow path
            return None
        if new is not state:
            entry.moved = (state, new, flag)
    if new is state:
        entry.state = state
    elif not engine.swap(state, new):
        return None
    memo.last = entry.plan
    return flag


def still_current(engine: Swapper, memo: Memo, entry: AcquiredEntry | RetainedEntry) -> bool:
    """Whether ``entry``'s views are of its slot's current buffer: its memo is alive, and
    the buffer is of the generation its views were carved from (either alone guards a
    replay: a memo is killed after the buffer it was filled from is taken)."""
    return not memo.dead and engine.generation(entry.plan.index) == entry.generation


def memoise(
    memo: Memo,
    specs: tuple[Any, ...],
    layout: Layout,
    carved: list[torch.Tensor],
    state: WorkspaceState,
    admitted: bool | None,
    generation: int = 0,
) -> list[torch.Tensor]:
    """Keep ``carved``, the views of ``specs`` planned as ``layout`` (which left ``state``),
    carved from the slot's buffer of ``generation``, in ``memo`` if the request is plain and
    was seen before (``admitted``; ``None``: not asked yet, ask now); fresh views of them
    either way."""
    if admitted is False or not is_plain(specs) or not (admitted or memo.admits(specs)):
        memo.last = layout
        return fresh(carved, [(spec.shape, spec.dtype) for spec in layout.specs])
    return keep(memo, specs, layout, carved, state, generation)


def keep(
    memo: Memo,
    specs: tuple[Any, ...],
    layout: Layout,
    carved: list[torch.Tensor],
    state: WorkspaceState,
    generation: int,
) -> list[torch.Tensor]:
    """Keep ``carved`` in ``memo`` for ``specs`` (plain ``(shape, dtype)`` pairs, seen
    before) unless they were carved under a caller's torch mode; fresh views of them."""
    if modes_active():  # carved under a caller's mode: perhaps the mode's tensors
        memo.last = layout
        return fresh(carved, specs)
    layout = layout.without_growth()  # as a replay will see it (the identity protocol)
    memo.last = layout
    make = view_maker(carved, specs)  # plain: (shape, dtype) pairs
    entry = AcquiredEntry(layout, make, carved[0] if len(carved) == 1 else None, generation)
    entry.state = state  # a replay would leave this state unchanged
    memo.remember(specs, entry)  # if a growth killed this memo meanwhile: unused
    return make()


def memoise_retained(
    memo: Memo,
    request: tuple[Any, Any, Any],
    span: Span,
    view: torch.Tensor,
    state: Any,
    generation: int = 0,
) -> None:
    """Keep ``view``, carved for ``request`` (``(key, shape, dtype)``) at ``span`` from the
    slot's buffer of ``generation``, in ``memo`` if the request is plain and was seen
    before."""
    memo.last = span
    shape = request[1]
    if type(shape) is tuple and plain_shape(shape) and memo.admits(request) and not modes_active():
        entry = RetainedEntry(span, view, generation)
        entry.state = state  # a replay would leave this state unchanged
        memo.remember(request, entry)


def last_plans(state: WorkspaceState, memos: list[Memo]) -> dict[tuple[int, int], Any]:
    """Per slot that served a request, the plan of its last one (what pictures draw).

    A request served the short way left its ``specs`` (the slot is the memo's): the core
    plans its layout (:func:`functional_ws.fast_paths.layout_of`)."""
    plans = {}
    for i, memo in enumerate(memos):
        last = memo.last
        if isinstance(last, tuple):  # the request itself
            last = layout_of(state, state.slot_of(i), last)
        if last is not None:
            plans[state.slot_of(i)] = last
    return plans


class Memo(dict[Hashable, Any]):
    """One slot's memo (the young generation) with the old generation beside it.

    Attributes:
        index: the slot's position in ``WorkspaceState.slots``.
        old: the previous generation.
        last: the plan of the slot's last request (what pictures draw), or the request
            itself where the miss path planned it from its byte counts.
        dead: set when the slot's buffer was replaced (:meth:`Memos.retire`; the engine
            empties it after): no entry here may be used any more.
    """

    __slots__ = ("dead", "index", "last", "limit", "old", "seen")

    def __init__(
        self,
        index: int = 0,
        limit: int | None = None,
        seen: set[int] | None = None,
        last: Any = None,
    ) -> None:
        # No dict.__init__ (the dict is empty already) and no max(): a growth makes two of
        # these (Memos.retire), 0.16 µs each (bench_workloads' growth rows).
        self.index = index
        self.old: dict[Hashable, Any] = {}
        self.last = last
        self.dead = False
        self.limit = MAX_MEMOISED if limit is None else limit if limit > 2 else 2
        self.seen: set[int] = set() if seen is None else seen  # hashes of requests seen once

    def __missing__(self, key: Hashable) -> Any:
        """A lookup of an absent key: the old generation's entry (promoted), or ``None``.

        So a miss costs no exception, and a hit in the young generation costs nothing more
        than a ``dict`` lookup (``get_retained`` looks up this way; ``get_simultaneous`` uses
        ``get``, whose miss costs less, and promotes in its slow path)."""
        return self.promote(key) if self.old else None

    def promote(self, key: Hashable) -> Any:
        """The entry for ``key`` from the old generation, moved back to the young one, or
        ``None``. (A young entry is found by the hot path's own lookup.)"""
        if not self.old:
            return None
        try:
            entry = self.old.pop(key, None)
        except TypeError:  # an unhashable key
            return None
        if entry is not None:
            self.remember(key, entry)
        return entry

    def admits(self, key: Hashable) -> bool:
        """Whether ``key`` was seen before (then memoise it); records it otherwise.

        ``key`` is hashable: callers ask only about requests they could look up.
        """
        fingerprint = hash(key)
        seen = self.seen
        if fingerprint in seen:
            return True
        if len(seen) >= self.limit:
            seen.clear()
        seen.add(fingerprint)
        return False

    def remember(self, key: Hashable, entry: Any) -> None:
        """Keep ``entry`` for ``key`` (an unhashable key is served, not memoised); nothing
        once this memo is dead (the entry's views are of a retired buffer)."""
        if self.dead:
            return
        if len(self) >= self.limit // 2:
            self.old = dict(self)
            self.clear()
        with contextlib.suppress(TypeError):  # unhashable: served, not memoised
            self[key] = entry

    def entries(self) -> int:
        """How many requests are memoised, over both generations."""
        return len(self) + len(self.old)


class Memos:
    """Every slot's two memos (``get_simultaneous``'s and ``get_retained``'s), as
    ``[ubatch][lane]`` tables: how the hot paths look them up, and the one place they are
    kept.

    Args:
        count: number of slots.
        num_lanes: lanes per ubatch (slots are stored ubatch-major).
    """

    def __init__(self, count: int, num_lanes: int) -> None:
        self.num_lanes = num_lanes
        self.acquired_at = _by_slot([Memo(i) for i in range(count)], num_lanes)
        self.retained_at = _by_slot([Memo(i) for i in range(count)], num_lanes)

    @property
    def acquired(self) -> list[Memo]:
        """Every slot's ``get_simultaneous`` memo, in slot order (a new list)."""
        return [memo for row in self.acquired_at for memo in row]

    @property
    def retained(self) -> list[Memo]:
        """Every slot's ``get_retained`` memo, in slot order (a new list)."""
        return [memo for row in self.retained_at for memo in row]

    def acquired_memo(self, index: int) -> Memo:
        """Slot ``index``'s ``get_simultaneous`` memo."""
        ubatch, lane = divmod(index, self.num_lanes)
        return self.acquired_at[ubatch][lane]

    def retained_memo(self, index: int) -> Memo:
        """Slot ``index``'s ``get_retained`` memo."""
        ubatch, lane = divmod(index, self.num_lanes)
        return self.retained_at[ubatch][lane]

    def retire(self, index: int, dead: list[Memo]) -> None:
        """Slot ``index``'s buffer is being replaced: fresh memos, which keep what pictures
        draw and what was seen, take its memos' places, and the old ones die, appended to
        ``dead`` for the caller to empty once it holds no lock (their entries hold
        the caller's keys, whose ``__del__`` may call the manager; their views pin the old
        buffer). Called before the buffer goes.

        Each is replaced even when empty: a call that carved from the old buffer may still
        try to insert its entry there, and finds it dead."""
        ubatch, lane = divmod(index, self.num_lanes)
        for row in (self.acquired_at[ubatch], self.retained_at[ubatch]):
            old = row[lane]
            row[lane] = Memo(old.index, old.limit, old.seen, old.last)  # a successor
            old.dead = True
            dead.append(old)


def _by_slot(memos: list[Memo], num_lanes: int) -> list[list[Memo]]:
    """``memos`` (stored ubatch-major) as ``[ubatch][lane]``."""
    return [memos[i : i + num_lanes] for i in range(0, len(memos), num_lanes)]
