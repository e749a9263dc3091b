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

Correctness under threads. An entry is valid for the buffer it was carved from; when a
slot's buffer is replaced, its memo is marked ``dead`` and a fresh one takes its place,
before the new state is published. A caller that read the new state therefore sees
``dead`` on any entry it found in the old memo, and takes the slow path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any

import torch

from functional_ws import Layout, Span, WorkspaceState

#: Entries per slot and kind (two generations of half this).
MAX_MEMOISED = 16384


class AcquiredEntry:
    """One memoised ``get_simultaneous`` request.

    Attributes:
        state: the state a replay of ``layout`` last left unchanged (then a hit needs no
            replay), or ``None``.
        moved: ``(before, after)``: the last replay that changed the state, from which
            state to which (the core is pure: the same state gives the same result), so a
            pattern that alternates between states (a retained tail, then a request that
            reaches into it) replays nothing after its first round. One attribute, so
            threads read both halves together.
        layout: the core's plan, without growth.
        fresh: returns fresh views of the carved ones, one per requested tensor.
    """

    __slots__ = ("fresh", "layout", "moved", "state")

    def __init__(self, layout: Layout, fresh: Callable[[], list[torch.Tensor]]) -> None:
        self.state: WorkspaceState | None = None
        self.moved: tuple[WorkspaceState, WorkspaceState] | None = None
        self.layout = layout
        self.fresh = fresh


class RetainedEntry:
    """One memoised ``get_retained`` request: the span and the view carved for it.

    ``state`` and ``moved`` as for :class:`AcquiredEntry`; ``moved`` also keeps the intact
    flag of that replay: ``(before, after, intact)``.
    """

    __slots__ = ("moved", "span", "state", "view")

    def __init__(self, span: Span, view: torch.Tensor) -> None:
        self.state: WorkspaceState | None = None
        self.moved: tuple[WorkspaceState, WorkspaceState, bool] | None = None
        self.span = span
        self.view = view


class Memo(dict[Hashable, Any]):
    """One slot's memo (the young generation) with the old generation beside it.

    Attributes:
        old: the previous generation.
        last: the plan of the slot's last request (what pictures draw).
        dead: set when the slot's buffer was replaced: no entry here may be used any more.
    """

    __slots__ = ("dead", "last", "limit", "old", "seen")

    def __init__(self, limit: int | None = None) -> None:
        super().__init__()
        self.old: dict[Hashable, Any] = {}
        self.last: Any = None
        self.dead = False
        self.limit = max(2, MAX_MEMOISED if limit is None else limit)
        self.seen: set[int] = set()  # hashes of requests seen once

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
            entry = self.old.pop(key)
        except (KeyError, TypeError):
            return None
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
        """Keep ``entry`` for ``key`` (an unhashable key is served, not memoised)."""
        if len(self) >= self.limit // 2:
            self.old = dict(self)
            self.clear()
        with contextlib.suppress(TypeError):
            self[key] = entry

    def entries(self) -> int:
        """How many requests are memoised, over both generations."""
        return len(self) + len(self.old)
