"""What a transition tells the shell to do: byte offsets and the growth to carry out."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

import jax

from ._build import fast_constructor
from ._presenters import Presented, robust_repr
from ._spec import ViewSpec
from ._state import Slot

#: ``((slot, new_capacity), ...)``: the buffers the shell must (re)allocate, exact sizes.
Growth = tuple[tuple[Slot, int], ...]


# Plans are static data, like the state: a jitted function may return them (no leaves).
@jax.tree_util.register_static
@robust_repr
@dataclasses.dataclass(frozen=True, slots=True)
class Layout(Presented):
    """The plan for one :func:`functional_ws.acquire` call.

    ``print(layout)`` (and a notebook's display) lists the views with their offsets and sizes.

    Attributes:
        slot: the ``(ubatch, lane)`` the views come from.
        index: ``slot``'s position in ``WorkspaceState.slots``.
        specs: the validated requests, in call order.
        offsets: byte offset of each view from the slot's base; each is a multiple of
            ``alignment`` and the views lie back to back, each taking its size rounded up
            to ``alignment``.
        total: the bytes the call needs (the sum of the rounded sizes).
        alignment: the alignment the offsets were computed for.
        growth: the buffers to reallocate before building views (empty on the fast path).
    """

    slot: Slot
    index: int
    specs: tuple[ViewSpec, ...]
    offsets: tuple[int, ...]
    total: int
    alignment: int
    growth: Growth = ()

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself

    @property
    def nbytes(self) -> tuple[int, ...]:
        """Exact bytes of each view (without alignment padding)."""
        return tuple(s.nbytes for s in self.specs)

    @property
    def grow_to(self) -> int | None:
        """The requesting slot's new capacity, or ``None`` when it does not grow."""
        return dict(self.growth).get(self.slot)

    def without_growth(self) -> Layout:
        """The same layout as seen by a later call that finds the slot already grown."""
        if not self.growth:
            return self
        return make_layout(
            self.slot, self.index, self.specs, self.offsets, self.total, self.alignment
        )


@jax.tree_util.register_static
@robust_repr
@dataclasses.dataclass(frozen=True, slots=True)
class Span(Presented):
    """The plan for one :func:`functional_ws.retain` call: a span at the slot's end.

    ``print(span)`` (and a notebook's display) gives its key, view, offset and size.

    Attributes:
        slot: the ``(ubatch, lane)``.
        index: ``slot``'s position in ``WorkspaceState.slots``.
        spec: the validated request.
        key: the caller's key.
        offset: byte offset of the span: ``capacity - nbytes`` rounded down to
            ``alignment``.
        alignment: the alignment the offset was computed for.
        growth: the buffers to reallocate before building the view.
    """

    slot: Slot
    index: int
    spec: ViewSpec
    key: Hashable
    offset: int
    alignment: int
    growth: Growth = ()

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself

    @property
    def nbytes(self) -> int:
        """Exact bytes of the span."""
        return self.spec.nbytes

    @property
    def grow_to(self) -> int | None:
        """The slot's new capacity, or ``None`` when it does not grow."""
        return dict(self.growth).get(self.slot)

    def without_growth(self) -> Span:
        """The same span as seen by a later call that finds the slot already grown."""
        if not self.growth:
            return self
        return Span(self.slot, self.index, self.spec, self.key, self.offset, self.alignment)


#: ``Layout(...)`` from fields already computed, positionally, without ``__init__``: every
#: request never seen before builds one (``_build.py``).
make_layout = fast_constructor(Layout)
