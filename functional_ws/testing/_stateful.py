"""A model-based Hypothesis state machine for workspaces.

:class:`WorkspaceMachine` drives a system through random ``acquire``/``retain``/``claim``/
``reserve``/``lock``/``unlock`` calls (and some bad ones), applies each to a trivially
correct model (:mod:`._model`, a ``bytearray`` per slot) and checks after every step:

* offsets are multiples of the alignment, back to back as the original lays them out,
  pairwise disjoint and inside the capacity; a retained span that survives an acquire lies
  after its views;
* ``intact`` is reported exactly when the span's modelled bytes are unchanged (a pattern is
  written on every retain and every acquired view is scribbled over);
* capacities grow to exactly the bytes needed and never shrink; locked means no growth and
  no new persistent keys;
* refused calls raise the documented type and leave the state equal to before.

By default the system under test is the pure core (through :attr:`transitions`, so a test
can plug in a deliberately broken function), and every call is also checked for purity:
the input is unchanged and an equal input gives an equal output. A shell overrides the
``do_*`` hooks to run the same rules against real memory.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from .. import _ops
from .._errors import (
    InvalidSlotError,
    InvalidSpecError,
    LaneNotConfiguredError,
    PersistentKeyLockedError,
    UbatchNotConfiguredError,
    WorkspaceError,
    WorkspaceLockedError,
)
from .._state import Slot, WorkspaceState
from ._model import WorkspaceModel
from ._strategies import DEFAULT_DTYPES, shapes

Spec = tuple[tuple[int, ...], Any]


@dataclasses.dataclass(frozen=True)
class Transitions:
    """The pure functions a :class:`WorkspaceMachine` drives; replace one to test a bug."""

    initial_state: Callable[..., WorkspaceState] = _ops.initial_state
    acquire: Callable[..., Any] = _ops.acquire
    retain: Callable[..., Any] = _ops.retain
    claim: Callable[..., Any] = _ops.claim
    reserve: Callable[..., Any] = _ops.reserve
    lock: Callable[..., Any] = _ops.lock
    unlock: Callable[..., Any] = _ops.unlock


def _snapshot(state: WorkspaceState) -> tuple[Any, ...]:
    """Every field value; all of them are immutable, so this detects any mutation."""
    top = tuple(getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "slots")
    slots = tuple(tuple(getattr(s, f.name) for f in dataclasses.fields(s)) for s in state.slots)
    return (*top, slots)


def _copy(state: WorkspaceState) -> WorkspaceState:
    """An equal state made of distinct objects."""
    return dataclasses.replace(state, slots=tuple(dataclasses.replace(s) for s in state.slots))


_view_codes = st.lists(
    st.tuples(shapes(max_dims=2, max_side=40), st.integers(0, 15)), min_size=0, max_size=3
)
_slot_codes = st.integers(0, 15)
_key_pool = ("a", "b", "c")


def _expect_raises(kind: type[BaseException], call: Callable[[], object], what: str) -> None:
    try:
        call()
    except kind as err:
        note(f"  -> refused as expected: {type(err).__name__}: {err}")
        return
    raise AssertionError(f"{what}: expected {kind.__name__}, but the call succeeded")


class WorkspaceMachine(RuleBasedStateMachine):
    """Drive a workspace through random calls and compare it with a byte-level model.

    Configure by subclassing: ``num_ubatches``, ``num_lanes``, ``growth``, ``alignment``,
    ``dtype_pool`` and ``transitions``. Run with ``WorkspaceMachine.TestCase`` or
    ``hypothesis.stateful.run_state_machine_as_test``.
    """

    num_ubatches: ClassVar[int] = 2
    num_lanes: ClassVar[int] = 2
    alignment: ClassVar[int] = 256
    growth: ClassVar[str] = "slot"
    dtype_pool: ClassVar[Sequence[Any]] = DEFAULT_DTYPES
    transitions: ClassVar[Transitions] = Transitions()

    def __init__(self) -> None:
        super().__init__()
        self.model = WorkspaceModel(self.num_ubatches, self.num_lanes, self.alignment, self.growth)
        self.setup_system()

    # ----- the system under test: the pure core here; shells override these hooks -----

    def setup_system(self) -> None:
        """Create the system under test."""
        self.state = self.transitions.initial_state(
            self.num_ubatches, self.num_lanes, alignment=self.alignment, growth=self.growth
        )

    def current_state(self) -> WorkspaceState:
        """The system's current :class:`WorkspaceState`."""
        return self.state

    def do_acquire(self, slot: Slot, specs: list[Spec]) -> tuple[int, ...]:
        """Run ``acquire``; return each view's byte offset from the slot's base."""
        self.state, layout = self._pure(self.transitions.acquire, slot, *specs)
        return tuple(layout.offsets)

    def do_retain(self, slot: Slot, key: Hashable, spec: Spec) -> tuple[int, bool]:
        """Run ``retain``; return the span's byte offset and the intact flag."""
        self.state, span, intact = self._pure(self.transitions.retain, slot, key, spec)
        return span.offset, intact

    def do_claim(self, slot: Slot, key: Hashable) -> bool:
        """Run ``claim``; return whether the key was new."""
        self.state, is_new = self._pure(self.transitions.claim, slot, key)
        return bool(is_new)

    def do_reserve(self, requests: list[Any], slots: list[Slot] | None) -> None:
        """Run ``reserve``."""
        self.state = self._pure(self.transitions.reserve, requests, slots)

    def do_lock(self) -> None:
        """Run ``lock``."""
        self.state = self._pure(self.transitions.lock)

    def do_unlock(self) -> None:
        """Run ``unlock``."""
        self.state = self._pure(self.transitions.unlock)

    def write_bytes(self, slot: Slot, offset: int, data: bytes) -> None:
        """Write into the system's memory (a shell writes real bytes; the core has none)."""

    def read_bytes(self, slot: Slot, offset: int, nbytes: int) -> bytes | None:
        """Read the system's memory, or ``None`` when it has none (the pure core)."""
        return None

    def _pure(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a pure transition; check it leaves its input alone and is deterministic."""
        before = self.state
        snapshot, fingerprint = _snapshot(before), hash(before)
        try:
            result = fn(before, *args)
        except WorkspaceError:
            assert _snapshot(before) == snapshot, "a refused call mutated its input"
            raise
        assert _snapshot(before) == snapshot and hash(before) == fingerprint, (
            f"{fn.__name__} mutated its input state"
        )
        again = fn(_copy(before), *args)
        assert again == result, f"{fn.__name__} gave different results for equal inputs"
        return result

    # ----- helpers -----

    def _slot(self, code: int) -> Slot:
        return ((code // self.num_lanes) % self.num_ubatches, code % self.num_lanes)

    def _specs(self, codes: list[tuple[tuple[int, ...], int]]) -> list[Spec]:
        return [(shape, self.dtype_pool[i % len(self.dtype_pool)]) for shape, i in codes]

    @staticmethod
    def _nbytes(spec: Spec) -> int:
        n = int(spec[1].itemsize)
        for d in spec[0]:
            n *= d
        return n

    def _refused(self, kind: type[BaseException], call: Callable[[], object], what: str) -> None:
        """The call must raise ``kind`` and leave state and retained bytes unchanged."""
        before = self.current_state()
        saved = self._retained_bytes()
        _expect_raises(kind, call, what)
        assert self.current_state() == before, f"{what}: refused call changed the state"
        assert self._retained_bytes() == saved, f"{what}: refused call changed retained bytes"

    def _retained_bytes(self) -> list[bytes | None]:
        out: list[bytes | None] = []
        for index, slot_model in enumerate(self.model.slots):
            record = slot_model.retained
            if record is None:
                out.append(None)
                continue
            slot = divmod(index, self.num_lanes)
            out.append(self.read_bytes(slot, record.start, len(record.pattern)))
        return out

    # ----- rules -----

    @rule(slot_code=_slot_codes, codes=_view_codes)
    def acquire(self, slot_code: int, codes: list[tuple[tuple[int, ...], int]]) -> None:
        slot, specs = self._slot(slot_code), self._specs(codes)
        index = self.model.index(slot)
        nbytes = [self._nbytes(s) for s in specs]
        expected_offsets, total = self.model.request_bytes(nbytes)
        targets = self.model.growth_targets(index, total)
        note(f"acquire(slot={slot}, specs={specs}) needs {total} bytes")
        if targets and self.model.locked:
            self._refused(
                WorkspaceLockedError, lambda: self.do_acquire(slot, specs), "locked acquire"
            )
            return
        offsets = self.do_acquire(slot, specs)
        self.model.grow(targets, total)
        capacity = self.model.slots[index].capacity
        note(f"  -> offsets {offsets}, capacity {capacity}")
        assert len(offsets) == len(specs), "one offset per view"
        for i, (off, n) in enumerate(zip(offsets, nbytes, strict=True)):
            assert off % self.alignment == 0, f"view {i} offset {off} is not aligned"
            assert off >= 0 and off + n <= capacity, f"view {i} [{off}, {off + n}) outside"
        spans = sorted((off, off + n) for off, n in zip(offsets, nbytes, strict=True) if n)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, f"views overlap: {spans}"
        assert list(offsets) == expected_offsets, (
            f"offsets {offsets} are not back to back: expected {expected_offsets}"
        )
        self.model.note_reach(index, total)
        for i, (off, n) in enumerate(zip(offsets, nbytes, strict=True)):
            self.model.scribble(index, off, n, i)
            self.write_bytes(slot, off, bytes(self.model.slots[index].memory[off : off + n]))
        slot_model = self.model.slots[index]
        slot_model.high_water = max(slot_model.high_water, total)
        survived = self.current_state().slots[index].retained
        if survived is not None:
            assert survived[1] >= total, f"retained span at {survived[1]} survived a reach"

    @rule(
        slot_code=_slot_codes,
        key=st.sampled_from(_key_pool),
        shape=shapes(max_dims=2),
        dtype_code=st.integers(0, 15),
    )
    def retain(self, slot_code: int, key: str, shape: tuple[int, ...], dtype_code: int) -> None:
        slot = self._slot(slot_code)
        spec = (shape, self.dtype_pool[dtype_code % len(self.dtype_pool)])
        index = self.model.index(slot)
        nbytes = self._nbytes(spec)
        targets = self.model.growth_targets(index, nbytes)
        note(f"retain(slot={slot}, key={key!r}, spec={spec}) of {nbytes} bytes")
        if targets and self.model.locked:
            self._refused(
                WorkspaceLockedError, lambda: self.do_retain(slot, key, spec), "locked retain"
            )
            return
        offset, intact = self.do_retain(slot, key, spec)
        self.model.grow(targets, nbytes)
        start = self.model.retained_start(index, nbytes)
        expected = self.model.expected_intact(index, key, start)
        note(f"  -> offset {offset}, intact={intact} (model says {expected})")
        assert offset == start, f"retained span at {offset}, expected {start}"
        assert offset % self.alignment == 0
        if intact:
            record = self.model.slots[index].retained
            assert record is not None, (
                "reported intact, but the slot was reallocated or never retained"
            )
            real = self.read_bytes(slot, start, len(record.pattern))
            assert real is None or real == record.pattern, (
                f"reported intact but the real bytes changed: {real!r} != {record.pattern!r}"
            )
        assert intact == expected, f"intact={intact} but the modelled bytes say {expected}"
        pattern = self.model.write_pattern(index, key, start, nbytes)
        self.write_bytes(slot, start, pattern)
        slot_model = self.model.slots[index]
        slot_model.high_water = max(slot_model.high_water, nbytes)

    @rule(slot_code=_slot_codes, key=st.sampled_from(_key_pool))
    def claim(self, slot_code: int, key: str) -> None:
        slot = self._slot(slot_code)
        keys = self.model.slots[self.model.index(slot)].keys
        note(f"claim(slot={slot}, key={key!r})")
        if key not in keys and self.model.locked:
            self._refused(
                PersistentKeyLockedError, lambda: self.do_claim(slot, key), "locked claim"
            )
            return
        is_new = self.do_claim(slot, key)
        assert is_new == (key not in keys), f"is_new={is_new} for key {key!r}, keys {keys}"
        keys.add(key)

    @rule(
        requests=st.lists(_view_codes, min_size=0, max_size=2),
        slot_codes=st.none() | st.lists(_slot_codes, max_size=3),
    )
    def reserve(
        self, requests: list[list[tuple[tuple[int, ...], int]]], slot_codes: list[int] | None
    ) -> None:
        concrete = [self._specs(codes) for codes in requests]
        needed = max(
            [self.model.request_bytes([self._nbytes(s) for s in specs])[1] for specs in concrete],
            default=0,
        )
        slots = None if slot_codes is None else [self._slot(c) for c in slot_codes]
        chosen = (
            range(len(self.model.slots)) if slots is None else [self.model.index(s) for s in slots]
        )
        note(f"reserve(requests={concrete}, slots={slots}) needs {needed} bytes")
        grows = any(self.model.slots[i].capacity < needed for i in chosen)
        if grows and self.model.locked:
            self._refused(
                WorkspaceLockedError,
                lambda: self.do_reserve(concrete, slots),
                "locked reserve",
            )
            return
        self.do_reserve(concrete, slots)
        for i in chosen:
            self.model.grow(self.model.growth_targets(i, needed), needed)

    @rule()
    def lock(self) -> None:
        note("lock()")
        self.do_lock()
        self.model.locked = True

    @precondition(lambda self: self.model.locked)
    @rule()
    def unlock(self) -> None:
        note("unlock()")
        self.do_unlock()
        self.model.locked = False

    @rule(
        bad=st.sampled_from(
            [
                ("negative dim", ((-1,), 0), InvalidSpecError),
                ("float dim", ((1.5,), 0), InvalidSpecError),
                ("bool dim", ((True,), 0), InvalidSpecError),
                ("list shape", ([3], 0), InvalidSpecError),
                ("no itemsize", ((3,), None), InvalidSpecError),
            ]
        ),
        slot_code=_slot_codes,
    )
    def bad_spec(self, bad: tuple[str, tuple[Any, int | None], type], slot_code: int) -> None:
        name, (shape, dtype_code), kind = bad
        dtype = "not a dtype" if dtype_code is None else self.dtype_pool[0]
        slot = self._slot(slot_code)
        note(f"acquire(slot={slot}) with a bad spec ({name}): {(shape, dtype)!r}")
        self._refused(kind, lambda: self.do_acquire(slot, [(shape, dtype)]), name)
        self._refused(kind, lambda: self.do_retain(slot, "a", (shape, dtype)), name)

    @rule(which=st.sampled_from(["lane too big", "ubatch too big", "negative lane"]))
    def bad_slot(self, which: str) -> None:
        slot, kind = {
            "lane too big": ((0, self.num_lanes), LaneNotConfiguredError),
            "ubatch too big": ((self.num_ubatches, 0), UbatchNotConfiguredError),
            "negative lane": ((0, -1), InvalidSlotError),
        }[which]
        note(f"acquire(slot={slot}) ({which})")
        spec: Spec = ((4,), self.dtype_pool[0])
        self._refused(kind, lambda: self.do_acquire(slot, [spec]), which)

    # ----- invariants -----

    @invariant()
    def matches_model(self) -> None:
        state = self.current_state()
        assert state.locked == self.model.locked, "lock flag differs from the model"
        for index, (real, model) in enumerate(zip(state.slots, self.model.slots, strict=True)):
            where = f"slot {state.slot_of(index)}"
            assert real.capacity == model.capacity, (
                f"{where}: capacity {real.capacity}, model {model.capacity}"
            )
            assert real.growths == model.growths, (
                f"{where}: {real.growths} growths, model {model.growths}"
            )
            assert real.high_water == model.high_water, (
                f"{where}: high water {real.high_water}, model {model.high_water}"
            )
            assert real.persistent_keys == frozenset(model.keys), f"{where}: keys differ"
            if real.retained is not None:
                record = model.retained
                assert record is not None, f"{where}: retains a span the model lost"
                assert real.retained == (record.key, record.start), f"{where}: span differs"
                assert record.start % self.alignment == 0
                end = record.start + len(record.pattern)
                assert end <= real.capacity, f"{where}: span ends at {end}, past the capacity"
