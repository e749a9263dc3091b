"""Requests aimed at the boundaries the retained span's invariants are about.

Random shapes almost never make the request that matters for ``intact``: one sized between
the retained span's start and the buffer's end, after an earlier, larger request set the
buffer's size. These strategies build requests from what the machine has seen of a slot
(where its retained span starts, how many bytes its buffer has served):

* :func:`padded_request`: a ``get_simultaneous`` request whose views, each padded to the
  alignment (a block: 256 bytes unless the machine is told otherwise), add up to exactly a
  given total, in one to three views of any dtype;
* :meth:`Aims.near_start`: totals that end a block before, exactly at, or a block or two
  past the span's start (the last view reaching anywhere from 1 byte to a block into its
  block), never past what the buffer holds;
* :func:`other_sizes`: retained sizes around the previous one and around the buffer's end,
  including growth by less than the alignment;
* :class:`Aims`: per rule of the machine, which slots it can aim at now (its precondition)
  and the strategy of its arguments there.

A slot's offsets are counted from its buffer's first view; a manager that places its base
some bytes into its buffer (for absolute alignment) places it less than a block in, so
rounding an offset down to a multiple of the alignment gives it relative to the base.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Hashable, Sequence
from typing import TypeVar

import torch
from hypothesis import strategies as st

from functional_ws.testing import WorkspaceModel

from ._config import ALIGNMENT, Spec
from ._tracking import SlotTrack

Slot = tuple[int, int]
T = TypeVar("T")
#: Where a request aimed at a retained span ends (:meth:`Aims.totals_near_start`).
AT_START, BLOCK_BEFORE = "at the start", "a block before"
ONE_BLOCK_IN, FAR_IN = "one block in", "far in"


def round_down(n: int, alignment: int = ALIGNMENT) -> int:
    """``n`` rounded down to a multiple of ``alignment``."""
    return n // alignment * alignment


def round_up(n: int, alignment: int = ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    return -(-n // alignment) * alignment


def padded_request(
    total: int, dtypes: Sequence[torch.dtype], alignment: int = ALIGNMENT
) -> st.SearchStrategy[list[Spec]]:
    """Requests of one to three 1-D views whose padded sizes add up to ``total`` bytes.

    Each view covers its padded size (a multiple of ``alignment``) or up to ``alignment - 1``
    bytes less, so the last byte written may lie anywhere in its last block: every view
    fills its blocks, or every view ends one byte into its last block (so the padding, not
    the bytes, makes the total; half the requests are that, in as many views as fit), or
    each view ends anywhere. An empty view may follow,
    at the very end. Shrinks towards one ``uint8``-like view (the first of ``dtypes``) that
    fills the whole total.

    Args:
        total: a multiple of ``alignment``; ``0`` gives the one empty request
            ``[((0,), dtypes[0])]``.
        dtypes: the dtypes to draw from (item sizes up to 8 bytes).
        alignment: the manager's view alignment in bytes.

    Returns:
        A strategy of ``get_simultaneous`` argument lists.

    Example:
        >>> import torch
        >>> from hypothesis import find
        >>> find(padded_request(768, [torch.uint8]), lambda r: len(r) == 3)
        [((1,), torch.uint8), ((1,), torch.uint8), ((1,), torch.uint8)]
        >>> find(padded_request(768, [torch.uint8]), lambda r: r[0][0][0] > 256)
        [((768,), torch.uint8)]
    """
    return _padded_request(total, tuple(dtypes), alignment)


# Strategies are built per draw from what the machine saw; the same arguments give the same
# strategy object, so Hypothesis validates each once (building them anew was most of a run's
# time, measured with cProfile: 6 of 9 s in drawing rules' arguments).
@functools.lru_cache(maxsize=4096)
def _padded_request(
    total: int, dtypes: tuple[torch.dtype, ...], alignment: int
) -> st.SearchStrategy[list[Spec]]:
    blocks = total // alignment
    if blocks == 0:
        return st.just([((0,), dtypes[0])])
    # How many bytes short of its padded size each view ends: none (the views fill their
    # blocks), alignment - 1 (one byte into the last block), or anything, view by view.
    shorts = st.sampled_from([st.just(0), st.just(alignment - 1), st.integers(0, alignment - 1)])
    empty_tail = st.sampled_from([[], [((0,), dtypes[0])]])

    def of_views(count: int, short: st.SearchStrategy[int]) -> st.SearchStrategy[list[Spec]]:
        cuts: st.SearchStrategy[list[int]] = st.just([])  # one view: no cut
        if count > 1:
            cuts = st.lists(
                st.integers(1, blocks - 1), min_size=count - 1, max_size=count - 1, unique=True
            )
        fill = st.tuples(st.sampled_from(list(dtypes)), short)
        fills = st.lists(fill, min_size=count, max_size=count)
        return st.tuples(cuts, fills, empty_tail).map(
            lambda parts: _views(blocks, sorted(parts[0]), parts[1], alignment) + parts[2]
        )

    counts = st.integers(1, min(3, blocks))
    # As often as all the rest: as many views as fit, each one byte into its last block, so
    # that the padding makes most of the total (what a reach check on the bytes misses).
    padded_most = of_views(min(3, blocks), st.just(alignment - 1))
    return st.tuples(counts, shorts).flatmap(lambda c: of_views(*c)) | padded_most


def _views(
    blocks: int, cuts: list[int], fills: list[tuple[torch.dtype, int]], alignment: int
) -> list[Spec]:
    bounds = [0, *cuts, blocks]
    out: list[Spec] = []
    for (lo, hi), (dtype, short) in zip(itertools.pairwise(bounds), fills, strict=True):
        padded = (hi - lo) * alignment
        elements = (padded - short) // dtype.itemsize
        if elements * dtype.itemsize <= padded - alignment:  # would pad to one block less
            elements += 1
        out.append(((elements,), dtype))
    return out


@functools.lru_cache(maxsize=4096)
def other_sizes(previous: int, served: int, alignment: int = ALIGNMENT) -> st.SearchStrategy[int]:
    """Retained sizes in bytes other than ``previous``, around it and the buffer's end.

    Args:
        previous: the size of the slot's retained span.
        served: the most bytes the slot's buffer has served (its size, for a manager that
            grows to exactly what is needed).
        alignment: the manager's view alignment in bytes (a block).

    Returns:
        A strategy of positive sizes: a byte or a block either side of ``previous``, the
        buffer's size and a byte or a block short of it, one to ``alignment - 1`` bytes past
        it (growth by less than the alignment), or any size up to a block past it.

    Example:
        >>> from hypothesis import find
        >>> find(other_sizes(4, 300), lambda n: n > 300)
        301
    """
    near = {previous - alignment, previous - 1, previous + 1, previous + alignment}
    near |= {served - alignment, served - 1, served, served + 1, served + alignment - 1}
    sizes = sorted(n for n in near if n > 0 and n != previous) or [previous + 1]
    # Every size from 1 to a block past the buffer but ``previous`` (no filter: no retries).
    anything = st.integers(1, served + alignment - 1).map(lambda n: n + (n >= previous))
    return _choose(sizes) | anything


@dataclasses.dataclass
class Aims:
    """What the machine's aimed rules can aim at, read from its records of each slot.

    Attributes:
        slots: the configured slots, in the order of ``tracks`` and ``model.slots``.
        tracks: what the machine saw of each slot.
        model: the byte model (it holds each slot's retained record).
        dtypes: the dtypes of scratch views.
        retained_keys: the keys retained spans are asked for with.
        smallest: the smallest padded request to make (``alignment`` without empty ones).
        alignment: the manager's view alignment in bytes (a block).
        made: the latest distinct ``get_simultaneous`` requests, oldest first.
    """

    slots: list[Slot]
    tracks: list[SlotTrack]
    model: WorkspaceModel
    dtypes: Sequence[torch.dtype]
    retained_keys: Sequence[Hashable]
    smallest: int
    alignment: int = ALIGNMENT
    made: list[list[Spec]] = dataclasses.field(default_factory=list)

    #: How many distinct recent requests :meth:`repeat` draws from.
    REMEMBERED = 8

    def remember(self, request: list[Spec]) -> None:
        """Note a ``get_simultaneous`` request the machine made, for :meth:`repeat`."""
        if request in self.made:
            self.made.remove(request)
        self.made.append(request)
        del self.made[: -self.REMEMBERED]

    def repeat(self) -> st.SearchStrategy[tuple[Slot, list[Spec]]]:
        """``(slot, request)``: one of the latest requests again, in any slot (as every layer
        of a model step asks for the same views: a repeat after a growth must not get the
        old buffer's views)."""
        return st.tuples(st.sampled_from(self.slots), _choose(self.made))

    def grown(self) -> list[Slot]:
        """The slots the machine has seen a buffer of.

        Whether that buffer still lives is not asked: it depends on when the garbage
        collector runs, and a strategy that depends on it would not replay. A request aimed
        at a slot whose buffer another slot's growth replaced meets the new buffer.
        """
        tracks = zip(self.slots, self.tracks, strict=True)
        return [slot for slot, track in tracks if track.buffer is not None]

    def asked(self) -> list[Slot]:
        """The slots a ``get_retained`` was made in (its span may have been lost since, to a
        growth, a request that reached it, or another key: asking again tells)."""
        tracks = zip(self.slots, self.tracks, strict=True)
        return [slot for slot, track in tracks if track.last_retained is not None]

    def totals_near_start(self, slot: Slot, where: str) -> list[int]:
        """Padded totals that end near the slot's span start without growing the buffer.

        ``where`` is :data:`AT_START` (exactly at the start) or :data:`BLOCK_BEFORE` (a block
        before it), at least the smallest request; :data:`ONE_BLOCK_IN` (1 byte to a block
        past it) or :data:`FAR_IN` (a block and a byte to two blocks past it, or the whole
        buffer): never past what the buffer served, so that the request does not replace the
        buffer.
        """
        served = self.tracks[self.model.index(slot)].served
        block = self.alignment
        start, end = self.span_start(slot), round_down(served, block)
        if start < 0:  # the span is larger than what this buffer served (another slot's
            return []  # growth replaced it): nothing to aim at
        ends: tuple[int, ...]
        if where == AT_START:
            ends, low = (start,), self.smallest - 1
        elif where == BLOCK_BEFORE:
            ends, low = (start - block,), self.smallest - 1
        elif where == ONE_BLOCK_IN:
            ends, low = (start + block,), start
        else:
            ends, low = (start + 2 * block, end), start + block
        return sorted({t for t in ends if low < t <= end})

    def span_start(self, slot: Slot) -> int:
        """Where the original puts a retained slot's span: its last bytes, rounded down.

        Counted from the slot's base, as requests are, in a buffer of the bytes the buffer
        has served: a manager that grows to exactly what is needed has that capacity. Not
        the span's address: with absolute alignment, where the base lies in the buffer
        depends on the allocator's address, and a strategy must not.
        """
        track = self.tracks[self.model.index(slot)]
        _, spec = self.last(slot)
        return round_down(track.served - _nbytes(spec), self.alignment)

    def near_start(self, where: str) -> st.SearchStrategy[tuple[Slot, list[Spec]]]:
        """``(slot, request)``: a request that ends near a retained span's start
        (:meth:`totals_near_start`), in one to three views of any dtype."""

        def at(slot: Slot) -> st.SearchStrategy[tuple[Slot, list[Spec]]]:
            totals = _choose(self.totals_near_start(slot, where))
            requests = totals.flatmap(
                lambda total: padded_request(total, self.dtypes, self.alignment)
            )
            return st.tuples(st.just(slot), requests)

        return _choose(self.near_start_slots(where)).flatmap(at)

    def near_start_slots(self, where: str) -> list[Slot]:
        """The retained slots :meth:`near_start` can aim at."""
        return [slot for slot in self.asked() if self.totals_near_start(slot, where)]

    def again(self, after_requests: bool = False) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
        """``(slot, key, spec)``: a slot's retained span asked for exactly as last time (only
        in slots that served a ``get_simultaneous`` since, with ``after_requests``)."""
        slots = self.requested() if after_requests else self.asked()
        return _choose([(slot, *self.last(slot)) for slot in slots])

    def requested(self) -> list[Slot]:
        """The retained slots that served a ``get_simultaneous`` since their span."""
        return [s for s in self.asked() if self.tracks[self.model.index(s)].requests]

    def resized(self) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
        """``(slot, key, spec)``: the same key and another size (:func:`other_sizes`)."""

        def at(slot: Slot) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
            key, spec = self.last(slot)
            track = self.tracks[self.model.index(slot)]
            sizes = other_sizes(_nbytes(spec), track.served, self.alignment)
            return st.tuples(st.just(slot), st.just(key), _bytes(sizes))

        return _choose(self.asked()).flatmap(at)

    def taken_over(self) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
        """``(slot, key, spec)``: another key asking for the same shape and dtype."""

        def at(slot: Slot) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
            key, spec = self.last(slot)
            others = [k for k in self.retained_keys if k != key]
            return st.tuples(st.just(slot), _choose(others), st.just(spec))

        return _choose(self.asked()).flatmap(at)

    def just_past_the_end(self) -> st.SearchStrategy[tuple[Slot, list[Spec]]]:
        """``(slot, request)``: the smallest padded request the slot's buffer cannot serve
        (growth by less than a block where a retained span's size set the buffer's)."""

        def at(slot: Slot) -> st.SearchStrategy[tuple[Slot, list[Spec]]]:
            total = round_up(self.tracks[self.model.index(slot)].served + 1, self.alignment)
            return st.tuples(st.just(slot), padded_request(total, self.dtypes, self.alignment))

        return _choose(self.grown()).flatmap(at)

    def all_it_served(self) -> st.SearchStrategy[tuple[Slot, list[Spec]]]:
        """``(slot, request)``: a padded request of exactly what the slot's buffer served,
        which fits it (a manager that grew to a one-view request's unpadded bytes must grow
        again, and, locked, refuses it)."""

        def at(slot: Slot) -> st.SearchStrategy[tuple[Slot, list[Spec]]]:
            total = round_up(self.tracks[self.model.index(slot)].served, self.alignment)
            return st.tuples(st.just(slot), padded_request(total, self.dtypes, self.alignment))

        return _choose(self.grown()).flatmap(at)

    def retained_past_the_end(self) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
        """``(slot, key, spec)``: a span 1 byte to a block less a byte larger than what the
        slot's buffer
        served, under the slot's last key: the buffer grows by less than the alignment, so a
        span at the end may start where it did, over new bytes (and, locked, it is refused)."""

        def at(slot: Slot) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
            track = self.tracks[self.model.index(slot)]
            key = track.last_retained[0] if track.last_retained else self.retained_keys[0]
            low, high = track.served + 1, track.served + self.alignment - 1
            sizes = st.sampled_from([low, high]) | st.integers(low, high)
            return st.tuples(st.just(slot), st.just(key), _bytes(sizes))

        return _choose(self.grown()).flatmap(at)

    def tensors(self) -> list[tuple[Slot, Hashable]]:
        """Every ``(slot, key)`` a persistent tensor was made for."""
        return [
            (slot, key)
            for slot, track in zip(self.slots, self.tracks, strict=True)
            for key in track.tensors
        ]

    def held(self) -> list[Hashable]:
        """Every key some slot holds a persistent tensor or resource for, in order."""
        keys = [key for track in self.tracks for key in [*track.resources, *track.tensors]]
        return list(dict.fromkeys(keys))

    def tensor(
        self, keys: Sequence[Hashable], specs: Sequence[Spec]
    ) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
        """``(slot, key, spec)``: any of ``keys`` and ``specs`` in any slot, or, once a slot
        holds a tensor, its key again (:meth:`tensor_again`)."""
        anything = st.tuples(
            st.sampled_from(self.slots), st.sampled_from(list(keys)), st.sampled_from(list(specs))
        )
        # Two branches whatever the state, so that a shrunk example replays the same draws;
        # the aimed one first, where the shrinker goes (measured: a zero_init bug shrank to
        # its two calls in 2 s this way, to seven calls in 15 s the other way round).
        return (self.tensor_again(specs) if self.tensors() else anything) | anything

    def resource(self, keys: Sequence[Hashable]) -> st.SearchStrategy[tuple[Slot, Hashable]]:
        """``(slot, key)``: any of ``keys`` in any slot, or, once some slot holds one, a held
        key in any slot (:meth:`resource_again`)."""
        anything = st.tuples(st.sampled_from(self.slots), st.sampled_from(list(keys)))
        return (self.resource_again() if self.held() else anything) | anything

    def tensor_again(self, specs: Sequence[Spec]) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
        """``(slot, key, spec)``: a held tensor's key, with its spec, or another of ``specs``
        of the same shape, of the same dtype, or any other (each as often)."""

        def at(held: tuple[Slot, Hashable]) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
            slot, key = held
            spec = self.tracks[self.model.index(slot)].tensors[key].spec
            others = [s for s in specs if s != spec] or [spec]
            same_shape = [s for s in others if s[0] == spec[0]] or others
            same_dtype = [s for s in others if s[1] == spec[1]] or others
            chosen = st.one_of(
                st.just(spec), *(st.sampled_from(c) for c in (same_shape, same_dtype, others))
            )
            return st.tuples(st.just(slot), st.just(key), chosen)

        return _choose(self.tensors()).flatmap(at)

    def resource_again(self) -> st.SearchStrategy[tuple[Slot, Hashable]]:
        """``(slot, key)``: a key some slot holds, in any slot."""
        return st.tuples(st.sampled_from(self.slots), _choose(self.held()))

    def roomy(self) -> list[Slot]:
        """The grown slots whose buffer served more than a block: room for a span behind
        requests."""
        block = self.alignment
        return [s for s in self.grown() if self.tracks[self.model.index(s)].served > block]

    def with_room(self) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
        """``(slot, key, spec)``: a span at least a block smaller than what the slot's buffer
        served, so that requests can end before, at and past its start without growth."""

        def at(slot: Slot) -> st.SearchStrategy[tuple[Slot, Hashable, Spec]]:
            block = self.alignment
            largest = self.tracks[self.model.index(slot)].served - block
            edges = sorted({n for n in (1, block - 1, block, block + 1, largest)
                            if 1 <= n <= largest})  # fmt: skip
            sizes = _choose(edges) | st.integers(1, largest)
            keys = st.sampled_from(list(self.retained_keys))
            return st.tuples(st.just(slot), keys, _bytes(sizes))

        return _choose(self.roomy()).flatmap(at)

    def last(self, slot: Slot) -> tuple[Hashable, Spec]:
        """The key and spec of the slot's last ``get_retained``."""
        last = self.tracks[self.model.index(slot)].last_retained
        assert last is not None  # an asked slot
        return last


def _choose(values: Sequence[T]) -> st.SearchStrategy[T]:
    """``sampled_from(values)``, drawing a choice even when there is one value.

    ``sampled_from`` of one value draws nothing, so a list that shrinks to one value would
    shift every later draw of the run, and the shrinker could not delete the steps that made
    the list (measured: persistent calls that did not matter stayed in shrunk examples).
    """
    return st.sampled_from(list(values) if len(values) > 1 else [*values, *values])


def _bytes(sizes: st.SearchStrategy[int]) -> st.SearchStrategy[Spec]:
    """``((n,), torch.uint8)`` for each size ``n`` (built, not mapped: printed as values)."""
    return st.tuples(st.tuples(sizes), st.just(torch.uint8))


def _nbytes(spec: Spec) -> int:
    n = spec[1].itemsize
    for d in spec[0]:
        n *= d
    return n
