"""A Hypothesis state machine for any manager with the original ``WorkspaceManager`` API.

:class:`WorkspaceAPIMachine` calls a real manager at random (``get_simultaneous``,
``get_retained``, ``get_persistent``, ``get_persistent_resource``, ``lock``, ``unlock``) in
random slots, with real bytes: it scribbles over every view ``get_simultaneous`` returns
(bytes ``0x80..0xff``), writes a fresh pattern into every retained span and persistent
tensor (bytes ``0x01..0x7f``), and mirrors those writes in a byte model
(:class:`functional_ws.testing.WorkspaceModel`, one ``bytearray`` per slot, indexed from
the start of the slot's buffer). Then each property family (:data:`PROPERTIES`) checks
what the manager returned against real memory and the model.

Besides the random calls, aimed rules (their arguments from :class:`._aims.Aims`) make the
calls the retained span's invariants are about: requests ending a block before, exactly at,
or past the span's start without growing the buffer (sometimes followed at once by the same
``get_retained``), a span with room behind requests, growth by less than the alignment, the
span asked for again, resized or under another key, repeats of recent requests, persistent
keys asked again. Hypothesis picks among the rules whose preconditions hold and leaves random
subsets out per run (swarm testing). A manager's exception where none is allowed becomes one
``AssertionError`` naming the call (:func:`failed`); teardown reports what the run exercised
as Hypothesis events (:mod:`._stats`).

The manager is a black box: the machine learns a slot's buffer from its views'
``untyped_storage()`` and notices a growth when a slot's views move to another storage. It
assumes the original's design: one buffer per slot, requests laid out from its start, the
retained span at its end.

The machine is configured through its constructor (a :class:`MachineConfig`): run it with
``run_state_machine_as_test(lambda: WorkspaceAPIMachine(config))``. The rules of a family
that is not selected do not run (their preconditions read the configuration). With
``core_state`` configured, the machine also checks a manager built on :mod:`functional_ws`
against the core's own decisions (:mod:`._mirror`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from typing import Any, NoReturn

import torch
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import functional_ws as fws
from functional_ws.testing import WorkspaceModel, keys, slots, spec_lists, specs
from functional_ws.testing._events import forget_rule_retries

from ._aims import AT_START, BLOCK_BEFORE, FAR_IN, ONE_BLOCK_IN, Aims, Slot, round_down
from ._config import MachineConfig, Spec, format_spec
from ._memory import Buffer, first_difference, nbytes_of, read, view_bytes, write
from ._mirror import CoreMirror, Plan
from ._probe import ALIGNMENT, misaligned_view
from ._stats import Exercised
from ._tracking import PersistentTensor, Range, Resource, SlotTrack, overlap

#: Dtypes of scratch requests: 1, 2, 4 and 8-byte items.
SCRATCH_DTYPES: tuple[torch.dtype, ...] = (
    torch.uint8,
    torch.int8,
    torch.float16,
    torch.int32,
    torch.float32,
    torch.float64,
)
#: Shapes and dtypes of persistent tensors: two shapes by two dtypes, so that every spec has
#: one of the same shape and another dtype, and one of the same dtype and another shape.
PERSISTENT_SPECS: tuple[Spec, ...] = (
    ((4,), torch.float32),
    ((2, 3), torch.int8),
    ((4,), torch.int8),
    ((2, 3), torch.float32),
)
#: Keys of persistent tensors and resources: one pool, so a manager that keys both alike (a
#: tensor's key colliding with a resource's) is caught.
PERSISTENT_KEYS: tuple[str, ...] = ("k0", "k1")
#: Keys of retained spans.
RETAINED_KEYS: tuple[str, ...] = ("a", "b", "c")
#: The methods the machine calls, as its statistics count them.
METHODS: tuple[str, ...] = (
    "get_simultaneous",
    "get_retained",
    "get_persistent",
    "get_persistent_resource",
    "lock",
    "unlock",
)

#: Retained spans by slot index: their buffer, start and real bytes.
Snapshot = dict[int, tuple[Buffer, int, bytes]]

#: Requests that come back often, as in a model's forward pass (so a request repeats, a
#: retained span is asked for again, a later request reaches into it); random ones besides.
COMMON_REQUESTS: tuple[list[Spec], ...] = (
    [((4,), torch.int8)],
    [((0,), torch.float16)],
    [((4,), torch.int8), ((2, 3), torch.float32)],
    [((300,), torch.uint8)],
)
COMMON_RETAINED: tuple[Spec, ...] = (((4,), torch.int8), ((2, 3), torch.float32))

#: A slot of the configured workspace (the running machine builds the strategy).
_slot = st.runner().flatmap(lambda machine: machine.slot_choices)
_SCRATCH = st.sampled_from(COMMON_REQUESTS) | spec_lists(
    min_size=1, max_size=3, dtype_pool=SCRATCH_DTYPES, max_dims=2
)
#: ``get_simultaneous`` requests: the configured machine says whether a request of zero
#: bytes may be made.
_scratch = st.runner().flatmap(lambda machine: machine.scratch_choices)
# Retained spans are never empty: an empty view has no address (its data_ptr() is 0).
_retained = st.sampled_from(COMMON_RETAINED) | specs(
    dtype_pool=SCRATCH_DTYPES, max_dims=2, min_side=1
)


def _selected(family: str) -> Callable[[WorkspaceAPIMachine], bool]:
    """A precondition: the rule runs only when ``family`` is selected."""
    return lambda machine: family in machine.properties


def _intact(machine: WorkspaceAPIMachine) -> bool:
    return "intact" in machine.properties


def _aimed(build: Callable[[Aims], st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Arguments the running machine's :class:`Aims` build (see the aimed rules)."""
    return st.runner().flatmap(lambda machine: build(machine.aims))


class WorkspaceAPIMachine(RuleBasedStateMachine):
    """Drive a manager with the original API through random calls; check it with real bytes.

    Args:
        config: the manager's factory, slots, selectors and the families to check.

    Raises:
        TypeError: ``config`` is not a :class:`MachineConfig`, or a subclass sets ``config``
            as a class attribute (pass it to the constructor instead).

    Example:
        >>> import interop
        >>> from hypothesis import settings
        >>> from hypothesis.stateful import run_state_machine_as_test
        >>> config = MachineConfig(lambda u, l: interop.WorkspaceManager("cpu", u, l))
        >>> run_state_machine_as_test(
        ...     lambda: WorkspaceAPIMachine(config),
        ...     settings=settings(max_examples=3, stateful_step_count=5, database=None),
        ... )
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "config" in vars(cls):
            raise TypeError(
                f"{cls.__name__} sets config as a class attribute; WorkspaceAPIMachine is "
                "configured through its constructor: run_state_machine_as_test(lambda: "
                "WorkspaceAPIMachine(MachineConfig(factory, ...))), or check_workspace(...)."
            )

    def __init__(self, config: MachineConfig) -> None:
        super().__init__()
        if not isinstance(config, MachineConfig):
            raise TypeError(
                f"config must be an interop.testing.MachineConfig, got {config!r}: "
                "WorkspaceAPIMachine(MachineConfig(factory, ...))."
            )
        self.cfg = config
        self.properties = config.properties
        self.slot_choices = slots(config.num_ubatches, config.num_lanes)
        self.scratch_choices = (
            _SCRATCH if config.empty_requests else _SCRATCH.map(_without_empty_request)
        )
        self.stats = Exercised()
        self.manager: Any = None  # made by the first step, new_manager
        self.mirror: CoreMirror | None = None
        self.model = WorkspaceModel(config.num_ubatches, config.num_lanes, ALIGNMENT, "slot")
        self.tracks = [SlotTrack() for _ in config.slots]
        self.aims = Aims(
            config.slots,
            self.tracks,
            self.model,
            SCRATCH_DTYPES,
            RETAINED_KEYS,
            0 if config.empty_requests else ALIGNMENT,
        )
        self.epoch = 0  # buffers seen to change while unlocked
        self.lock_serial = 0  # lock() calls
        self.made = 0  # persistent resources made by the machine's factories
        self.addresses: list[tuple[str, int]] = []  # views since the last alignment check

    @initialize()
    def new_manager(self) -> None:
        """Make the manager under test: the first step of every run.

        A step of its own rather than part of the constructor: with it, Hypothesis shrinks a
        failure to the calls that matter (measured on the kit's planted bugs, whose examples
        otherwise began with a repeated harmless call or two).
        """
        cfg = self.cfg
        call = f"factory({cfg.num_ubatches}, {cfg.num_lanes})"
        note(f"{call} makes the manager")
        try:
            self.manager = cfg.factory(cfg.num_ubatches, cfg.num_lanes)
            locked = "locked" in self.properties and bool(self.manager.is_locked())
        except Exception as err:
            failed(f"{call} (or is_locked() on what it made)", err)
        if cfg.core_state is not None:
            self.mirror = CoreMirror(cfg.core_state(self.manager))
        self.model.locked = locked

    # ----- calling the manager -----

    def _plan(self, call: str, transition: Callable[..., Any], *args: Any) -> Plan | None:
        """What the core decides for this call (``None`` without ``core_state``)."""
        return None if self.mirror is None else self.mirror.plan(call, transition, *args)

    def _call(
        self,
        slot: tuple[int, int],
        call: str,
        need: int | None,
        fn: Callable[[], Any],
        plan: Plan | None = None,
    ) -> Any:
        """Run ``fn`` in ``slot``; a refusal while locked returns ``None`` after its checks.

        ``need`` is the bytes the call needs (a request that fits must not be refused), or
        ``None`` for a call that must never be refused. ``plan`` is the core's decision: the
        manager must refuse exactly what the core refuses, and its state follows the core's.
        """
        before = self._retained_bytes() if self.model.locked else {}
        try:
            with self.cfg.select(slot):
                result = fn()
        except Exception as err:
            if plan is not None:
                CoreMirror.check_refusal(plan, err)
            self._raised(call, need, err)
        else:
            if plan is not None:
                CoreMirror.check_served(plan)
                self.commit(plan)
            return result
        # Checked after the except block: its traceback could keep a dropped buffer alive.
        assert need is not None  # a call that needs nothing was never refused
        self._after_refusal(slot, call, need, before)
        return None

    def commit(self, plan: Plan) -> None:
        """The manager carried ``plan`` out: the core's state moves on, and the slots the core
        grew must show their next views in a new buffer."""
        assert self.mirror is not None
        self.mirror.commit(plan)
        for slot, _ in plan.growth:
            self.tracks[self.model.index(slot)].regrown = True

    def _raised(self, call: str, need: int | None, err: Exception) -> None:
        """The manager raised: a failure naming the call, unless it is a locked refusal."""
        note(f"  -> raised {type(err).__name__}: {err}")
        if isinstance(err, AssertionError) and self.model.locked:
            if need is None:
                raise AssertionError(f"{call} was refused while locked; it needs nothing") from err
            self.stats.refusals += 1
            return
        failed(call, err, locked=self.model.locked)

    def _expect_refusal(
        self,
        slot: tuple[int, int],
        kind: type[Exception],
        call: str,
        fn: Callable[[], Any],
        plan: Plan | None = None,
    ) -> None:
        """``fn`` must raise ``kind`` in ``slot`` (the core's class, given its ``plan``) and
        leave everything as it was."""
        before = self._retained_bytes()
        try:
            with self.cfg.select(slot):
                fn()
        except kind as err:
            note(f"  -> refused as expected: {type(err).__name__}: {err}")
            self.stats.refusals += kind is AssertionError
            if plan is not None:
                CoreMirror.check_refusal(plan, err)
        except Exception as err:
            raise AssertionError(
                f"{call} should raise {kind.__name__}, but raised {type(err).__name__}: {err}"
            ) from err
        else:
            raise AssertionError(f"{call} should raise {kind.__name__}, but it succeeded")
        self._check_nothing_changed(call, before)

    def _after_refusal(self, slot: tuple[int, int], call: str, need: int, before: Snapshot) -> None:
        track = self.tracks[self.model.index(slot)]
        if "locked" in self.properties:
            fits = track.buffer is not None and track.buffer.alive() and need <= track.served
            assert not fits, (
                f"{call} was refused while locked, but it needs {need} bytes and the slot's "
                f"buffer already served {track.served}: a request that fits must succeed"
            )
        self._check_nothing_changed(call, before)

    def _retained_bytes(self) -> Snapshot:
        """Each slot's retained span whose buffer lives: its buffer, start and real bytes."""
        out: Snapshot = {}
        for index, track in enumerate(self.tracks):
            record = self.model.slots[index].retained
            if record is None or track.buffer is None:
                continue
            span = track.buffer.window(record.start, len(record.pattern))
            if span is not None:
                out[index] = (track.buffer, record.start, read(span))
        return out

    def _check_nothing_changed(self, call: str, before: Snapshot) -> None:
        """After a refused call: retained bytes and persistent contents are as before."""
        for index, (buffer, start, expected) in before.items():
            where = self.cfg.where(self.cfg.slots[index]) or " in the slot"
            span = buffer.window(start, len(expected))
            assert span is not None, (
                f"refused {call} freed the buffer holding the retained span{where}"
            )
            now = read(span)
            k = first_difference(now, expected)
            assert k is None, (
                f"refused {call} changed byte {k} of the retained span{where} "
                f"({expected[k]:#04x} -> {now[k]:#04x})"
            )
        self._check_persistent_contents(f"after refused {call}: ")

    # ----- checks of returned views -----

    def _check_shapes(self, call: str, views: Any, wanted: list[Spec]) -> None:
        if "shapes" not in self.properties:
            return
        assert isinstance(views, (list, tuple)) and len(views) == len(wanted), (
            f"{call} returned {views!r}; expected a list of {len(wanted)} tensors"
        )
        for i, (view, (shape, dtype)) in enumerate(zip(views, wanted, strict=True)):
            assert isinstance(view, torch.Tensor), f"{call}: view {i} is {view!r}, not a tensor"
            got = (tuple(view.shape), view.dtype)
            assert got == (shape, dtype), (
                f"{call}: view {i} has shape {got[0]} and dtype {got[1]}; requested {shape}, "
                f"{dtype}"
            )
            assert view.is_contiguous(), f"{call}: view {i} is not contiguous"

    def _observe(
        self, index: int, call: str, views: list[torch.Tensor], need: int
    ) -> Buffer | None:
        """Find the buffer the non-empty views lie in; notice growth; check containment."""
        track = self.tracks[index]
        spans = [(i, v) for i, v in enumerate(views) if nbytes_of(v)]
        if not spans:
            return track.buffer if track.buffer is not None and track.buffer.alive() else None
        storage = spans[0][1].untyped_storage()
        if "containment" in self.properties:
            for i, view in spans:
                own = view.untyped_storage()
                lo, hi = view.data_ptr(), view.data_ptr() + nbytes_of(view)
                assert own.data_ptr() <= lo and hi <= own.data_ptr() + own.nbytes(), (
                    f"{call}: view {i} reaches outside its buffer"
                )
                assert own.data_ptr() == storage.data_ptr(), (
                    f"{call}: view {i} lies in another buffer than view {spans[0][0]} "
                    "(views of one call must come from one live buffer)"
                )
        if track.buffer is not None and track.buffer.holds(storage):
            track.served = max(track.served, need)
        else:
            self._new_buffer(index, call, storage, need)
        return track.buffer

    def _new_buffer(self, index: int, call: str, storage: torch.UntypedStorage, need: int) -> None:
        track, old, locked = self.tracks[index], self.tracks[index].buffer, self.model.locked
        if locked and old is not None and "locked" in self.properties:
            # A buffer may change unseen only by another slot's growth (a policy that grows
            # several slots) while unlocked; with no growth seen since, this call grew it.
            this_lock = old.lock_serial == self.lock_serial
            assert not (this_lock or old.epoch == self.epoch), (
                f"{call} got its views in a new buffer ({old.nbytes} -> {storage.nbytes()} "
                "bytes) while the workspace is locked: a locked call that needs more must "
                "raise AssertionError"
            )
        if not locked:
            self.epoch += 1
        self.stats.growths += 1
        buffer = Buffer.of(storage, self.epoch, self.lock_serial if locked else None)
        track.new_buffer(buffer, need)
        self.model.slots[index].reallocate(storage.nbytes())
        note(f"  -> a new buffer of {storage.nbytes()} bytes")

    def _check_placement(self, index: int, call: str, views: list[torch.Tensor]) -> list[Range]:
        """Relative alignment and disjointness of non-empty views; return their ranges."""
        track = self.tracks[index]
        ranges: list[Range] = []
        for i, view in enumerate(views):
            n = nbytes_of(view)
            if not n:
                continue
            desc = f"view {i} of {call}" if len(views) > 1 else call
            ranges.append((view.data_ptr(), view.data_ptr() + n, desc))
            if "absolute_alignment" in self.properties:
                self.addresses.append((desc, view.data_ptr()))
            buffer = track.buffer
            if "relative_alignment" in self.properties and buffer is not None:
                if buffer.phase is None:
                    buffer.phase = (view.data_ptr(), desc)
                ref, ref_desc = buffer.phase
                assert (view.data_ptr() - ref) % ALIGNMENT == 0, (
                    f"{desc} lies {view.data_ptr() - ref:+d} bytes from {ref_desc} in the same "
                    "buffer: not a multiple of 256 (relative alignment)"
                )
        if "disjoint" in self.properties:
            for a, b in itertools.combinations(ranges, 2):
                shared = overlap(a[:2], b[:2])
                assert not shared, f"{a[2]} and {b[2]} overlap ({shared} bytes)"
            self._check_apart(ranges, index)
        return ranges

    def _check_apart(self, ranges: list[Range], index: int | None) -> None:
        """``ranges`` share no byte with other slots' live views nor with persistent tensors."""
        others = [r for j, t in enumerate(self.tracks) if j != index for r in t.live_ranges()]
        others += [_range_of(p.tensor, p.call) for t in self.tracks for p in t.tensors.values()]
        for mine, theirs in itertools.product(ranges, others):
            shared = overlap(mine[:2], theirs[:2])
            assert not shared, f"{mine[2]} overlaps {theirs[2]} ({shared} bytes)"

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
        """A request ending 1 to 256 bytes past a retained span's start, without growing the
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
        by less than 256 bytes where a retained span's size set the buffer's."""
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
        if views is None:
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
            self.stats.reaches += total > round_down(record.start)
            self.stats.at_start += total == round_down(record.start)
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
        256): neither where the manager put the span, nor where the original puts it (the
        last ``nbytes`` of the ``served`` bytes the buffer has served, rounded down to 256).
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
        at_the_end = round_down(track.served - len(record.pattern))
        origin = track.buffer.origin
        if origin is None:
            return at_the_end
        return max(at_the_end, round_down(track.buffer.address + record.start - origin))

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
        )
        assert record.key == key, f"{said} the span was last retained with key {record.key!r}"
        assert record.start == start, f"{said} the span moved from {record.start} to {start}"
        assert track.buffer is not None
        span = track.buffer.window(start, len(record.pattern))
        assert span is not None, f"{said} the buffer was freed"
        now = read(span)
        k = first_difference(now, record.pattern)
        assert k is None, f"{said} byte {k} changed ({record.pattern[k]:#04x} -> {now[k]:#04x})"
        assert self.model.expected_intact(index, key, start), f"{said} its modelled bytes changed"

    # ----- lock -----

    @precondition(_selected("locked"))
    @rule()
    def lock(self) -> None:
        note("lock()")
        self.stats.calls["lock"] += 1
        plan = self._plan("lock()", fws.lock)
        try:
            self.manager.lock()
            now = self.manager.is_locked()
        except Exception as err:
            failed("lock() (or is_locked() after it)", err)
        assert now is True, f"is_locked() is {now!r} after lock(), not True"
        self.model.locked = True
        self.lock_serial += 1
        if plan is not None:
            self.commit(plan)

    @precondition(lambda self: "locked" in self.properties and self.model.locked)
    @rule()
    def unlock(self) -> None:
        note("unlock()")
        self.stats.calls["unlock"] += 1
        plan = self._plan("unlock()", fws.unlock)
        try:
            self.manager.unlock()
            now = self.manager.is_locked()
        except Exception as err:
            failed("unlock() (or is_locked() after it)", err)
        assert now is False, f"is_locked() is {now!r} after unlock(), not False"
        self.model.locked = False
        if plan is not None:
            self.commit(plan)

    # ----- absolute alignment -----

    @precondition(_selected("absolute_alignment"))
    @rule()
    def check_absolute_alignment(self) -> None:
        note("check absolute alignment: the views since the last check, then fresh managers")
        problem = next(
            (
                f"absolute alignment: {desc} returned data_ptr() % 256 == {address % ALIGNMENT}"
                for desc, address in self.addresses
                if address % ALIGNMENT
            ),
            None,
        )
        self.addresses.clear()
        if problem is None:
            cfg = self.cfg
            try:
                problem = misaligned_view(
                    cfg.factory, cfg.num_ubatches, cfg.num_lanes, cfg.select, log=note
                )
            except Exception as err:
                failed("the absolute-alignment check's fresh managers", err)
        # One assertion for both: a failure must replay at the same line, whichever view the
        # allocator's luck picks (Hypothesis tells failures apart by where they are raised).
        assert problem is None, problem

    # ----- persistent (and, while locked, no new keys) -----

    @precondition(_selected("persistent"))
    @rule(
        aim=_aimed(lambda aims: aims.tensor(PERSISTENT_KEYS, PERSISTENT_SPECS)),
        zero_init=st.booleans(),
    )
    def get_persistent(self, aim: tuple[Slot, Hashable, Spec], zero_init: bool) -> None:
        """Any key and spec in any slot, or a key a slot holds a tensor for, again: the same
        shape and dtype (the same tensor, its contents kept, zeroed only when it was made),
        or another (``ValueError``)."""
        self._persistent(*aim, zero_init)

    def _persistent(self, slot: Slot, key: Hashable, spec: Spec, zero_init: bool) -> None:
        track = self.tracks[self.model.index(slot)]
        shape, dtype = spec
        call = (
            f"get_persistent({key!r}, {shape!r}, {dtype}, zero_init={zero_init})"
            f"{self.cfg.where(slot)}"
        )
        note(call)
        self.stats.calls["get_persistent"] += 1
        known = track.tensors.get(key)

        def fetch() -> Any:
            return self.manager.get_persistent(key, shape, dtype, zero_init=zero_init)

        if known is not None and known.spec != spec:  # the original's "requested shape" error
            self._expect_refusal(slot, ValueError, call, fetch)
            return
        # The façade's persistent tensors share the resource keys as (torch.Tensor, key).
        plan = self._plan(call, fws.claim, slot, (torch.Tensor, key))
        if known is None and self.model.locked:
            self._expect_refusal(slot, AssertionError, call, fetch, plan)
            return
        tensor = self._call(slot, call, None, fetch, plan)
        if known is not None:
            assert tensor is known.tensor, f"{call} returned another tensor than {known.call}"
            self._after_call(call)
            return
        self._check_shapes(call, [tensor], [spec])
        assert not zero_init or not any(read(view_bytes(tensor))), (
            f"{call}: the new tensor is not all zero"
        )
        if "disjoint" in self.properties:
            self._check_apart([_range_of(tensor, call)], None)
        pattern = self.model.next_pattern(nbytes_of(tensor))
        write(view_bytes(tensor), pattern)
        track.tensors[key] = PersistentTensor(tensor, spec, pattern, call)
        self._after_call(call)

    @precondition(_selected("persistent"))
    @rule(aim=_aimed(lambda aims: aims.resource(PERSISTENT_KEYS)))
    def get_persistent_resource(self, aim: tuple[Slot, Hashable]) -> None:
        """Any key in any slot, or a key some slot holds (a resource or a tensor) in that
        slot or another: one factory call per key per slot, a tensor's key not a resource's."""
        self._resource(*aim)

    def _resource(self, slot: Slot, key: Hashable) -> None:
        track = self.tracks[self.model.index(slot)]
        call = f"get_persistent_resource({key!r}, factory){self.cfg.where(slot)}"
        note(call)
        self.stats.calls["get_persistent_resource"] += 1
        made: list[Resource] = []

        def factory() -> Resource:
            self.made += 1
            made.append(Resource(key, slot, self.made))
            return made[-1]

        def fetch() -> Any:
            return self.manager.get_persistent_resource(key, factory)

        known = track.resources.get(key)
        plan = self._plan(call, fws.claim, slot, key)
        if known is None and self.model.locked:
            self._expect_refusal(slot, AssertionError, call, fetch, plan)
            assert not made, f"{call} called the factory while locked"
            return
        got = self._call(slot, call, None, fetch, plan)
        note(f"  -> {got!r}, factory called {len(made)} time(s)")
        if known is not None:
            assert not made, f"{call} called the factory again for a key this slot holds"
            assert got is known, f"{call} returned {got!r}, not {known!r} as before"
        else:
            assert len(made) == 1, f"{call} called the factory {len(made)} times"
            assert got is made[0], f"{call} returned {got!r}, not what the factory made"
            track.resources[key] = got
        self._after_call(call)

    # ----- the core's state (with ``core_state``) -----

    @precondition(lambda self: self.mirror is not None)
    @invariant()
    def core_state_matches(self) -> None:
        """The manager's state is what the core's transitions make of the same calls."""
        assert self.mirror is not None and self.cfg.core_state is not None
        self.mirror.check_state(self.cfg.core_state(self.manager))

    def teardown(self) -> None:
        """Report what the run exercised (``--hypothesis-show-statistics`` shows it)."""
        self.stats.report(METHODS)
        forget_rule_retries()

    def _after_call(self, call: str) -> None:
        """Nobody but their owner writes persistent tensors: their patterns stay."""
        if "persistent" in self.properties:
            self._check_persistent_contents(f"after {call}: ")

    def _check_persistent_contents(self, after: str) -> None:
        for track in self.tracks:
            for record in track.tensors.values():
                now = read(view_bytes(record.tensor))
                k = first_difference(now, record.pattern)
                assert k is None, (
                    f"{after}byte {k} of the tensor {record.call} returned changed "
                    f"({record.pattern[k]:#04x} -> {now[k]:#04x})"
                )


def failed(call: str, err: BaseException, *, locked: bool = False) -> NoReturn:
    """The manager raised where it must not: one ``AssertionError`` naming the call.

    Raised from this one line with the manager's exception as its cause, so that Hypothesis
    counts one cause as one failure, locked or not.
    """
    said = f"{call} raised {type(err).__name__}"
    if locked and not isinstance(err, AssertionError):
        said += f" while locked: {err}; a locked manager refuses with AssertionError, as the "
        said += "original does"
    else:
        said += f": {err}"
    raise AssertionError(said) from err


def _without_empty_request(request: list[Spec]) -> list[Spec]:
    """``request``, its first view made one item long if it asks for no bytes at all."""
    if any(_nbytes(spec) for spec in request):
        return request
    (_, dtype), *rest = request
    return [((1,), dtype), *rest]


def _nbytes(spec: Spec) -> int:
    n = spec[1].itemsize
    for d in spec[0]:
        n *= d
    return n


def _range_of(tensor: torch.Tensor, call: str) -> Range:
    start = tensor.data_ptr()
    return (start, start + nbytes_of(tensor), f"the tensor {call} returned")
