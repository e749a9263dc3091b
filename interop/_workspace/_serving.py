"""The façade's slow paths: a request its hot path could not serve from the memo.

Each builds the core's transition for the request, has the engine run it (growing first
where the plan says so) and carve the views under its lock from the buffers the new state
describes, then memoises what repeats. The façade decides which path a request takes (its
spelling, whether it was seen before) and writes out the miss path's short way itself
(``Engine.fit_and_carve``: a call fewer on the path a new ``num_tokens`` takes); this room
only serves. It never calls the façade:
where a caller's code (a key's ``__hash__``) replaced the slot's buffer after the views
were carved, it says so (``None``) and the façade serves the request again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

import functional_ws as fws
from functional_ws import Growth, Slot, ViewSpec, WorkspaceState

from ._engine import Engine
from ._memo import Memos, memoise, memoise_retained
from ._persistent import PersistentTables
from ._requests import check_torch_dtypes

T = TypeVar("T")


class Server:
    """Serves the slow paths of one manager through its engine.

    Args:
        engine: the manager's :class:`interop._workspace._engine.Engine`.
        memos: its memos (the entries memoised here).
        tables: its persistent resources.
    """

    def __init__(self, engine: Engine, memos: Memos, tables: PersistentTables) -> None:
        self.engine = engine
        self.memos = memos
        self.tables = tables

    def acquire(
        self, specs: tuple[Any, ...], slot: Slot, admitted: bool | None
    ) -> list[torch.Tensor] | None:
        """A request :func:`functional_ws.acquire` plans: one seen before (memoised) or one
        that is not plain. ``admitted``: whether it was seen before (``None``: not asked).

        Returns:
            Fresh views; ``None`` when the slot's buffer was replaced after they were
            carved (serve the request again).
        """
        if not admitted:  # (an admitted request is plain: its dtypes are torch's)
            check_torch_dtypes(specs)  # the façade's word on a dtype that is not torch's
        engine, memos = self.engine, self.memos

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, fws.Layout]:
            new, layout = fws.acquire(state, slot, *specs)
            return new, layout.growth, layout

        def finish(layout: fws.Layout) -> tuple[Any, ...]:
            # Under the engine's mutex: carved from the buffers the new state describes.
            # An admitted request is plain: its own pairs are the specs' (shape, dtype).
            pairs = specs if admitted else [(spec.shape, spec.dtype) for spec in layout.specs]
            carved = engine.buffers.carvers[layout.index].carve(layout.offsets, pairs)
            return layout, carved, memos.acquired[layout.index], engine.state

        layout, carved, memo, state = engine.run(transition, finish)
        views = memoise(memo, specs, layout, carved, state, admitted)
        return None if memo.dead else views

    def retain(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, slot: Slot
    ) -> tuple[torch.Tensor, bool] | None:
        """A ``get_retained`` request in canonical spelling, planned by
        :func:`functional_ws.retain`.

        Returns:
            ``(view, intact)``; ``None`` when the key's own code (its ``__hash__``) replaced
            the slot's buffer after the view was carved (serve the request again).
        """
        check_torch_dtypes(((shape, dtype),), "dtype")
        spec = ViewSpec.of(shape, dtype, "spec")  # the caller's shape and dtype read once
        engine, memos = self.engine, self.memos

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, Any]:
            new, span, intact = fws.retain(state, slot, key, spec)
            return new, span.growth, (span, intact)

        def finish(planned: tuple[fws.Span, bool]) -> tuple[Any, ...]:
            # Under the engine's mutex: carved from the buffer the new state describes.
            span = planned[0].without_growth()
            (view,) = engine.buffers.carvers[span.index].carve((span.offset,), ((shape, dtype),))
            return span, planned[1], view, memos.retained[span.index], engine.state

        span, intact, view, memo, state = engine.run(transition, finish)
        memoise_retained(memo, (key, shape, dtype), span, view, state)  # hashes the key
        if memo.dead:
            return None
        return view.view(dtype), intact

    def reserve(self, requests: list[list[ViewSpec]], slots: tuple[Slot, ...] | None) -> None:
        """Grow the ``slots`` (``None``: every slot) to fit each of ``requests``
        (:func:`functional_ws.reserve`)."""

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, None]:
            new, growth = fws.reserve(state, requests, slots)
            return new, growth, None

        self.engine.run(transition, _nothing)

    def reserve_for(self, traces: tuple[fws.Trace, ...]) -> None:
        """Grow each slot to :func:`functional_ws.worst_case` of ``traces``, as a plan
        grows them (:func:`functional_ws.apply_plan`: exact sizes, nothing else changed)."""

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, None]:
            new, growth = fws.apply_plan(state, fws.worst_case(*traces, like=state))
            return new, growth, None

        self.engine.run(transition, _nothing)

    def apply_plan(self, plan: WorkspaceState, path: str | os.PathLike[str]) -> None:
        """Reserve what ``plan`` (read from ``path``) lists, and lock if it was locked
        (:func:`functional_ws.apply_plan`; a mismatch names the file)."""

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, None]:
            try:
                new, growth = fws.apply_plan(state, plan)
            except fws.InvalidPlanError as err:
                raise fws.InvalidPlanError(f"plan file {os.fspath(path)!r}: {err}") from None
            return new, growth, None

        self.engine.run(transition, _nothing)

    def create_resource(self, slot: Slot, key: Hashable, factory: Callable[[], T]) -> T:
        """The persistent resource for ``key`` in ``slot``, created by ``factory`` if new.

        The claim is checked first (a locked manager refuses a new key before anything
        runs); the factory runs with no lock held (it may use the manager, or wait for
        another thread that does); the key is claimed only once the resource exists (a
        factory that raised leaves none), and the first thread to finish wins.
        """
        state = self.engine.state
        index = state.index(slot)
        fws.claim(state, slot, key)  # refuses a new key while locked, before creating
        table = self.tables.tables[index]
        if key in table:
            return table[key]  # type: ignore[no-any-return]
        if not callable(factory):
            raise TypeError(f"factory must be a callable returning the resource, got {factory!r}.")
        resource = factory()
        self.engine.update(lambda state: fws.claim(state, slot, key)[0])
        return self.tables.keep(index, key, resource)  # type: ignore[no-any-return]


def _nothing(result: object) -> None:
    return None
