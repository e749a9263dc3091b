"""The façade's slow paths: a request its hot path could not serve from the memo.

Each builds the core's transition for the request and has the engine install it (growing
first where the plan says so) and carve its views (:meth:`Engine.serve`: no lock held
while they are carved, and they are of the slot's buffer the state describes), then
memoises what repeats. The façade decides which path a request takes (its spelling,
whether it was seen before); this room only serves, and never calls the façade.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import torch

import functional_ws as fws
from functional_ws import Growth, Slot, ViewSpec, WorkspaceState
from functional_ws.fast_paths import fit_plain

from .._errors import FactoryNotCallableError, ReplanLimitError
from ._engine import MAX_PLANS, Engine
from ._memo import Memos, keep, memoise, memoise_retained
from ._persistent import PersistentTables
from ._recording import user_code
from ._requests import check_torch_dtypes, checked_requests, user_code_of_key

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
    ) -> list[torch.Tensor]:
        """A request :func:`functional_ws.acquire` plans: one seen before (memoised) or one
        that is not plain. ``admitted``: whether it was seen before (``None``: not asked).

        Returns:
            Fresh views.
        """
        pairs: Sequence[Any] = specs
        if not admitted:  # (an admitted request is plain: its dtypes are torch's)
            check_torch_dtypes(specs)  # the façade's word on a dtype that is not torch's
            pairs = checked_requests(specs, "shapes_and_dtypes")  # (named as the caller's)
        index = self.engine.state.index(slot)  # a slot not configured: refused first

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Sequence[int], Any, Growth]:
            new, layout = fws.acquire(state, slot, *pairs)
            return new, layout.offsets, layout, layout.growth

        # Canonical pairs once the core accepts them: carved as they are.
        carved, layout, state, generation = self.engine.serve(transition, index, specs)
        memo = self.memos.acquired_memo(index)
        return memoise(memo, specs, layout, carved, state, admitted, generation)

    def acquire_seen(
        self, specs: tuple[Any, ...], index: int, nbytes: list[int]
    ) -> list[torch.Tensor]:
        """A request in its plain form (``nbytes``: its views' byte counts) seen before in
        the slot at ``index``: planned from them (:func:`functional_ws.fast_paths.fit_plain`:
        nothing checked twice), carved and memoised. Written out beside :meth:`acquire`
        for bench_workloads' "model step" (a new ``num_tokens`` is memoised at its second
        layer).

        Returns:
            Fresh views.
        """
        carved, layout, state, generation = self.engine.serve(
            fit_plain, index, specs, None, (index, specs, nbytes, "shapes_and_dtypes")
        )
        return keep(self.memos.acquired_memo(index), specs, layout, carved, state, generation)

    def retain(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, slot: Slot
    ) -> tuple[torch.Tensor, bool]:
        """A ``get_retained`` request in canonical spelling, planned by
        :func:`functional_ws.retain`.

        The key's own code (its ``__hash__`` and ``__eq__``) runs while the request is
        planned and memoised: where it replaced the slot's buffer after the view was
        carved, the request is served again (at most :data:`MAX_PLANS` times).

        Returns:
            ``(view, intact)``.

        Raises:
            ReplanLimitError: (``RuntimeError``) the key's code changed the workspace
                every time.
        """
        check_torch_dtypes(((shape, dtype),), "dtype")
        spec = ViewSpec.of(shape, dtype, "")  # the caller's shape and dtype read once
        index = self.engine.state.index(slot)
        user_code = user_code_of_key(key)

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Sequence[int], Any, Growth]:
            new, span, intact = fws.retain(state, slot, key, spec)
            return new, (span.offset,), (span.without_growth(), intact), span.growth

        for _ in range(MAX_PLANS):
            before = self.engine.state.slots[index].retained
            try:
                served = self.engine.serve(transition, index, ((shape, dtype),), user_code)
            except BaseException:  # (a Ctrl-C, a torch mode's handler while the view is carved)
                after = self.engine.state.slots[index].retained
                if after != before and after is not None and after[0] == key:
                    self.forget(slot, key)  # this call installed the span: no view reached it
                raise
            (view,), (span, intact), state, generation = served
            if type(view) is not torch.Tensor:  # a mode's tensor (a fake one): its writes
                self.forget(slot, key)  # may reach no byte, so the next call is not intact
            memo = self.memos.retained_memo(index)
            memoise_retained(memo, (key, shape, dtype), span, view, state, generation)
            if self.engine.generation(index) == generation:  # the key's code ran meanwhile
                return view.view(dtype), intact
        raise ReplanLimitError.for_user_code(user_code or "the key", MAX_PLANS)

    def forget(self, slot: Slot, key: Hashable) -> None:
        """The slot retains ``key``'s span no more (a view of it may not have reached its
        bytes): the next ``get_retained`` there is not intact. Honest, never optimistic."""
        self.engine.update(lambda state: fws.forget_retained(state, slot, key))

    def reserve(self, requests: list[list[ViewSpec]], slots: tuple[Slot, ...] | None) -> None:
        """Grow the ``slots`` (``None``: every slot) to fit each of ``requests``
        (:func:`functional_ws.reserve`)."""

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Sequence[int], None, Growth]:
            new, growth = fws.reserve(state, requests, slots)
            return new, (), None, growth

        self.engine.run(transition)

    def reserve_for(self, traces: tuple[fws.Trace, ...]) -> None:
        """Grow each slot to :func:`functional_ws.worst_case` of ``traces``, as a plan
        grows them (:func:`functional_ws.apply_plan`: exact sizes, nothing else changed)."""

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Sequence[int], None, Growth]:
            new, growth = fws.apply_plan(state, fws.worst_case(*traces, like=state))
            return new, (), None, growth

        self.engine.run(transition)

    def apply_plan(self, plan: WorkspaceState, path: str | os.PathLike[str]) -> None:
        """Reserve what ``plan`` (read from ``path``) lists, and lock if it was locked
        (:func:`functional_ws.apply_plan`; a mismatch names the file)."""

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Sequence[int], None, Growth]:
            try:
                new, growth = fws.apply_plan(state, plan)
            except fws.InvalidPlanError as err:
                raise fws.InvalidPlanError(f"plan file {os.fspath(path)!r}: {err}") from None
            return new, (), None, growth

        self.engine.run(transition)

    def create_resource(self, slot: Slot, key: Hashable, factory: Callable[[], T]) -> T:
        """The persistent resource for ``key`` in ``slot``, created by ``factory`` if new.

        The claim is checked first (a locked manager refuses a new key before anything
        runs); the factory runs with no lock held (it may use the manager, or wait for
        another thread that does); the key is claimed only once the resource exists (a
        factory that raised leaves none), and the first thread to finish wins. A
        ``lock()`` taken while the factory runs does not refuse it then: the original
        checks the lock once, before the factory, and keeps what it made.
        """
        state = self.engine.state
        index = state.index(slot)
        fws.claim(state, slot, key)  # refuses a new key while locked, before creating
        table = self.tables.tables[index]
        if key in table:
            return table[key]  # type: ignore[no-any-return]
        if state.locked:  # claimed, but kept by no table (a Ctrl-C came between the two)
            raise fws.PersistentKeyLockedError(key, slot)
        if not callable(factory):
            raise FactoryNotCallableError(
                f"factory must be a callable returning the resource, got {factory!r}."
            )
        # user_code: a recording keeps the factory's requests; creating: its own key again
        with user_code(), self.tables.creating(index, key) as running:
            resource = factory()
        self.engine.update(
            lambda state: fws.claim(state, slot, key, admitted=True)[0], user_code_of_key(key)
        )
        return self.tables.keep(index, key, resource, replace=running[0])  # type: ignore[no-any-return]
