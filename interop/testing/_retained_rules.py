"""The rules of scratch requests and retained spans: random and aimed ``get_simultaneous``
and ``get_retained`` calls, what they must return, and the absolute-alignment check of the
views they returned.

The aimed rules draw their arguments from what the machine saw of the slots
(:class:`._aims.Aims`), so the requests that decide the retained span's invariants are made
often.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch
from hypothesis import note
from hypothesis.stateful import precondition, rule

import functional_ws as fws
from functional_ws.testing import keys

from ._aims import AT_START, BLOCK_BEFORE, FAR_IN, ONE_BLOCK_IN, Slot, round_down
from ._config import Spec, format_spec
from ._machine_base import (
    RETAINED_KEYS,
    MachineBase,
    _aimed,
    _intact,
    _nbytes,
    _retained,
    _scratch,
    _selected,
    _slot,
    failed,
)
from ._memory import first_difference, nbytes_of, read, view_bytes, write
from ._probe import misaligned_view
from ._tracking import STALE_HINT


class ScratchAndRetainedRules(MachineBase):
    """``get_simultaneous`` and ``get_retained``, random and aimed, checked with real bytes."""

    # ----- scratch and retained rules -----

    @rule(slot=_slot, request=_scratch)
    def get_simultaneous(self, slot: tuple[int, int], request: list[Spec]) -> None:
        self._scratch(slot, request)

    @precondition(_selected("intact"))
    @rule(slot=_slot, key=keys(RETAINED_KEYS), spec=_retained)
    def get_retained(self, slot: tuple[int, int], key: Hashable, spec: Spec) -> None:
        self._retain(slot, key, spec)

    # Aimed rules: each draws its arguments from what the machine saw of the slots
    # (self.aims), so the requests that decide the retained span's invariants are made often:
    # Hypothesis picks among the rules whose preconditions hold, and swarm-tests subsets.

    # The four requests near a span's start are each followed at once by the slot's last
    # get_retained: what the request did to the span is what that answer is checked on (and
    # get_retained_after_requests asks later, after other calls). Measured at ci's budget
    # from fresh seeds, asking at once half the time found a reach check on the unpadded
    # bytes in 17 of 20 runs.

    @precondition(lambda self: _intact(self) and bool(self.aims.near_start_slots(AT_START)))
    @rule(aim=_aimed(lambda aims: aims.near_start(AT_START)))
    def request_ending_at_retained_span(self, aim: tuple[Slot, list[Spec]]) -> None:
        """A request ending exactly where a retained span starts, then the span again: it
        did not reach into the span, which must be intact."""
        self._scratch_then_retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.near_start_slots(BLOCK_BEFORE)))
    @rule(aim=_aimed(lambda aims: aims.near_start(BLOCK_BEFORE)))
    def request_ending_a_block_before_retained_span(self, aim: tuple[Slot, list[Spec]]) -> None:
        """A request ending a block before a retained span starts, then the span again."""
        self._scratch_then_retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.near_start_slots(ONE_BLOCK_IN)))
    @rule(aim=_aimed(lambda aims: aims.near_start(ONE_BLOCK_IN)))
    def request_one_block_into_retained_span(self, aim: tuple[Slot, list[Spec]]) -> None:
        """A request ending 1 byte to a block past a retained span's start, without growing the
        buffer, then the span again: it reached in, however little, so it is not intact."""
        self._scratch_then_retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.near_start_slots(FAR_IN)))
    @rule(aim=_aimed(lambda aims: aims.near_start(FAR_IN)))
    def request_far_into_retained_span(self, aim: tuple[Slot, list[Spec]]) -> None:
        """A request ending 257 to 512 bytes past a retained span's start, or at the buffer's
        end, then the span again (a rule of its own, so that a run that leaves one of the
        two out still reaches in)."""
        self._scratch_then_retain(*aim)

    def _scratch_then_retain(self, slot: Slot, request: list[Spec]) -> None:
        """The request, then the slot's last ``get_retained`` again."""
        key, spec = self.aims.last(slot)
        self._scratch(slot, request)
        self._retain(slot, key, spec)

    @precondition(lambda self: _intact(self) and bool(self.aims.asked()))
    @rule(aim=_aimed(lambda aims: aims.again()))
    def get_retained_again(self, aim: tuple[Slot, Hashable, Spec]) -> None:
        """The same key, shape and dtype as the slot's last ``get_retained``: intact exactly
        when nothing reached the span since."""
        self._retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.roomy()))
    @rule(aim=_aimed(lambda aims: aims.with_room()))
    def get_retained_with_room(self, aim: tuple[Slot, Hashable, Spec]) -> None:
        """A span a block or more smaller than the slot's buffer: room for requests to end
        before, at and past its start without growing the buffer."""
        self._retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.requested()))
    @rule(aim=_aimed(lambda aims: aims.again(after_requests=True)))
    def get_retained_after_requests(self, aim: tuple[Slot, Hashable, Spec]) -> None:
        """The same as the slot's last ``get_retained``, in a slot that served requests
        since: whether they reached the span decides ``intact``."""
        self._retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.asked()))
    @rule(aim=_aimed(lambda aims: aims.resized()))
    def get_retained_resized(self, aim: tuple[Slot, Hashable, Spec]) -> None:
        """The same key and another size: around the old one and the buffer's end, growth
        by less than the alignment included."""
        self._retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.asked()))
    @rule(aim=_aimed(lambda aims: aims.taken_over()))
    def get_retained_by_another_key(self, aim: tuple[Slot, Hashable, Spec]) -> None:
        """Another key takes the span over (only the latest key is remembered)."""
        self._retain(*aim)

    @precondition(lambda self: _intact(self) and bool(self.aims.grown()))
    @rule(aim=_aimed(lambda aims: aims.retained_past_the_end()))
    def get_retained_just_past_the_end(self, aim: tuple[Slot, Hashable, Spec]) -> None:
        """A span 1 to 255 bytes larger than the slot's buffer: growth by less than the
        alignment (the span may start where it did, over new bytes), refused while locked."""
        self._retain(*aim)

    @precondition(lambda self: bool(self.aims.made))
    @rule(aim=_aimed(lambda aims: aims.repeat()))
    def repeat_a_request(self, aim: tuple[Slot, list[Spec]]) -> None:
        """One of the latest requests again, in any slot: the views of the slot's current
        buffer, whatever a manager remembers of earlier calls."""
        self._scratch(*aim)

    @precondition(lambda self: bool(self.aims.grown()))
    @rule(aim=_aimed(lambda aims: aims.just_past_the_end()))
    def grow_by_less_than_alignment(self, aim: tuple[Slot, list[Spec]]) -> None:
        """A request one padded block past what a slot's buffer served: the smallest growth,
        by less than a block (the alignment) where a retained span's size set the buffer's."""
        self._scratch(*aim)

    @precondition(lambda self: bool(self.aims.grown()))
    @rule(aim=_aimed(lambda aims: aims.all_it_served()))
    def request_all_it_served(self, aim: tuple[Slot, list[Spec]]) -> None:
        """A request of exactly what a slot's buffer served (padding included): it fits, so
        no growth, and no refusal while locked."""
        self._scratch(*aim)

    # ----- the calls -----

    def _scratch(self, slot: tuple[int, int], request: list[Spec]) -> None:
        index, track = self.model.index(slot), self.tracks[self.model.index(slot)]
        listed = ", ".join(format_spec(s) for s in request)
        call = f"get_simultaneous({listed}){self.cfg.where(slot)}"
        _, total = self.model.request_bytes([_nbytes(s) for s in request])
        note(f"{call}: {total} bytes with padding")
        self.stats.calls["get_simultaneous"] += 1
        self.aims.remember(request)
        track.requests += 1
        plan = self._plan(call, fws.acquire, slot, *request)
        views = self._call(slot, call, total, lambda: self.manager.get_simultaneous(*request), plan)
        if views is None:  # refused while locked: part of what a failure's headline tells
            self._since_retained(index, f"{call} (refused: locked)")
            return
        self._check_shapes(call, views, request)
        views = list(views)
        seen = track.buffer
        buffer = self._observe(index, call, views, total)
        if plan is not None:
            moved = track.buffer is not seen
            self._check_planned(index, call, views, plan.answer[0].offsets, moved)
        ranges = self._check_placement(index, call, views)
        if buffer is not None and buffer.origin is None and ranges:
            buffer.origin = ranges[0][0]
        record = self.model.slots[index].retained
        if record is not None:  # the span survived the call's growth, if any
            track.since = max(track.since, total)
            start = round_down(record.start, self.cfg.alignment)
            self.stats.reaches += total > start
            self.stats.at_start += total == start
        for i, view in enumerate(views):
            n = nbytes_of(view)
            if not n:
                continue
            data = view_bytes(view)
            offset = view.data_ptr() - buffer.address if buffer is not None else -1
            if buffer is not None and offset >= 0 and offset + n <= buffer.nbytes:
                self.model.scribble(index, offset, n, i)
                data.fill_(self.model.slots[index].memory[offset])
            else:  # outside the slot's buffer (reported by "containment" when selected)
                data.fill_(0x80 | i)
        if buffer is not None:
            note(f"  -> views at {[r[0] - buffer.address for r in ranges]} of the buffer")
        track.acquired = ranges
        if record is not None:
            track.history.append(call)
        self._after_call(call)

    def _retain(self, slot: tuple[int, int], key: Hashable, spec: Spec) -> None:
        index, track = self.model.index(slot), self.tracks[self.model.index(slot)]
        shape, dtype = spec
        n = _nbytes(spec)
        call = f"get_retained({key!r}, {shape!r}, {dtype}){self.cfg.where(slot)}"
        note(f"{call}: {n} bytes")
        self.stats.calls["get_retained"] += 1
        plan = self._plan(call, fws.retain, slot, key, spec)
        result = self._call(
            slot, call, n, lambda: self.manager.get_retained(key, shape, dtype), plan
        )
        if result is None:
            self._since_retained(index, f"{call} (refused: locked)")
            return
        assert isinstance(result, tuple) and len(result) == 2, (
            f"{call} returned {result!r}; expected (view, intact)"
        )
        view, intact = result
        assert isinstance(intact, bool), f"{call}: intact is {intact!r}, not a bool"
        self._check_shapes(call, [view], [spec])
        seen = track.buffer
        buffer = self._observe(index, call, [view], n)
        assert buffer is not None
        start = view.data_ptr() - buffer.address
        note(f"  -> intact={intact}, the span at {start} of the buffer")
        if plan is not None:
            span, planned_intact = plan.answer
            assert intact == planned_intact, (
                f"{call} reported intact={intact}; the core decides intact={planned_intact}"
            )
            self._check_planned(index, call, [view], (span.offset,), track.buffer is not seen)
        if intact:
            self.stats.intact += 1
            self._check_intact(index, call, key, start)
        if self._must_be_intact(index, key, spec):
            self.stats.kept += 1
            self._check_kept(index, call, key, start, intact)
        elif self._same_as_last(index, key, spec):
            self.stats.rechecked += 1
        (span,) = self._check_placement(index, call, [view])
        if 0 <= start <= buffer.nbytes - n:
            write(view_bytes(view), self.model.write_pattern(index, key, start, n))
        else:  # outside the slot's buffer: nothing to model (see "containment")
            self.model.slots[index].retained = None
        track.retained, track.retained_spec, track.since = span, spec, 0
        track.last_retained, track.requests = (key, spec), 0
        track.history = [call]
        self._after_call(call)

    def _check_planned(
        self,
        index: int,
        call: str,
        views: list[torch.Tensor],
        offsets: tuple[int, ...],
        moved: bool,
    ) -> None:
        """The views lie in a new buffer exactly when the core grew the slot since the last
        views were seen; each lies at the core's offset from one base per buffer, and the
        buffer holds the capacity the core planned from that base."""
        track = self.tracks[index]
        buffer = track.buffer
        assert self.mirror is not None
        capacity = self.mirror.state.slots[index].capacity
        if any(nbytes_of(view) for view in views):
            if track.regrown and not moved:
                raise AssertionError(
                    f"{call}: the core grew this slot to {capacity} bytes, but the views lie "
                    "in the buffer it had before"
                )
            assert track.regrown or not moved, (
                f"{call}: the views lie in another buffer than the slot's last views, but the "
                "core did not grow the slot"
            )
            track.regrown = False
        for i, (view, offset) in enumerate(zip(views, offsets, strict=True)):
            if not nbytes_of(view):
                continue  # an empty view has no address to check
            assert buffer is not None  # a non-empty view was seen in it
            if buffer.base is None:
                buffer.base = view.data_ptr() - offset
                end = buffer.address + buffer.nbytes
                assert buffer.address <= buffer.base and buffer.base + capacity <= end, (
                    f"{call}: the slot's base lies {buffer.base - buffer.address:+d} bytes "
                    f"into a buffer of {buffer.nbytes}; the core planned a capacity of "
                    f"{capacity} from it"
                )
            assert view.data_ptr() - buffer.base == offset, (
                f"{call}: view {i} lies {view.data_ptr() - buffer.base} bytes from the slot's "
                f"base; the core planned offset {offset}"
            )

    def _same_as_last(self, index: int, key: Hashable, spec: Spec) -> bool:
        """The slot's last ``get_retained`` asked for this key, shape and dtype, in this buffer."""
        record, track = self.model.slots[index].retained, self.tracks[index]
        return record is not None and record.key == key and track.retained_spec == spec

    def _must_be_intact(self, index: int, key: Hashable, spec: Spec) -> bool:
        """Whether this ``get_retained`` must report ``intact=True``, whatever the manager.

        When the slot's last ``get_retained`` used the same key, shape and dtype, the slot
        kept its buffer, and no request since ended past the span's start (rounded down to
        the alignment): neither where the manager put the span, nor where the original puts
        it (the last ``nbytes`` of the ``served`` bytes the buffer has served, rounded down).
        """
        if not self._same_as_last(index, key, spec):
            return False
        return self.tracks[index].since <= self._kept_limit(index)

    def _kept_limit(self, index: int) -> int:
        """How far past the start of a slot's requests one may end and keep its span: to
        where the original puts the span, or to where the manager put it (counted from where
        its requests start, once a request showed that)."""
        record, track = self.model.slots[index].retained, self.tracks[index]
        assert record is not None and track.buffer is not None
        block = self.cfg.alignment
        at_the_end = round_down(track.served - len(record.pattern), block)
        origin = track.buffer.origin
        if origin is None:
            return at_the_end
        return max(at_the_end, round_down(track.buffer.address + record.start - origin, block))

    def _check_kept(self, index: int, call: str, key: Hashable, start: int, intact: bool) -> None:
        """A ``get_retained`` that must be intact (:meth:`_must_be_intact`) says so."""
        if intact:
            return  # its bytes were checked by _check_intact
        record, track = self.model.slots[index].retained, self.tracks[index]
        assert record is not None
        said = " then ".join([*track.history, call])
        n, served = len(record.pattern), track.served
        assert record.start == start, (
            f"{said}: the span moved from {record.start} to {start} of the same buffer, for "
            "the same key, shape and dtype"
        )
        assert not self.model.expected_intact(index, key, start), (
            f"{said} reported intact=False, but nothing touched the span: the same key, shape "
            f"and dtype, the same buffer, and no request since ended past byte "
            f"{self._kept_limit(index)}, where the span starts"
        )
        raise AssertionError(
            f"{said}: a request ending at byte {track.since} overwrote the span at "
            f"{record.start}, though it left the last {n} of the {served} bytes the buffer "
            "served alone: the span is not at the end of the buffer"
        )

    def _check_intact(self, index: int, call: str, key: Hashable, start: int) -> None:
        """``intact=True`` only when the bytes the previous call left are really unchanged."""
        record = self.model.slots[index].retained
        track = self.tracks[index]
        said = " then ".join([*track.history, call]) + " reported intact, but"
        assert record is not None, (
            f"{said} no get_retained left bytes in this slot's buffer since it was allocated"
            + STALE_HINT * bool(track.buffer and track.buffer.stale)
        )
        assert record.key == key, f"{said} the span was last retained with key {record.key!r}"
        assert record.start == start, f"{said} the span moved from {record.start} to {start}"
        assert track.buffer is not None
        span = track.buffer.window(start, len(record.pattern))
        assert span is not None, f"{said} the buffer was freed"
        now = read(span)
        k = first_difference(now, record.pattern)
        assert k is None, (
            f"{said} byte {k} changed ({record.pattern[k]:#04x} -> {now[k]:#04x})"
            + STALE_HINT * track.buffer.stale
        )
        assert self.model.expected_intact(index, key, start), f"{said} its modelled bytes changed"

    # ----- absolute alignment -----

    @precondition(_selected("absolute_alignment"))
    @rule()
    def check_absolute_alignment(self) -> None:
        note("check absolute alignment: the views since the last check, then fresh managers")
        self.stats.probes += 1
        cfg = self.cfg
        block = cfg.alignment
        problem = next(
            (
                f"absolute alignment: {desc} returned data_ptr() % {block} == {address % block}"
                for desc, address in self.addresses
                if address % block
            ),
            None,
        )
        self.addresses.clear()
        if problem is None:
            try:
                problem = misaligned_view(
                    cfg.factory, cfg.num_ubatches, cfg.num_lanes, cfg.select, note, block
                )
            except Exception as err:
                failed("the absolute-alignment check's fresh managers", err)
        # One assertion for both: a failure must replay at the same line, whichever view the
        # allocator's luck picks (Hypothesis tells failures apart by where they are raised).
        assert problem is None, problem
