"""A model-based Hypothesis state machine for the pure core's transitions.

:class:`WorkspaceMachine` calls :mod:`functional_ws`'s transitions at random (``acquire``,
``retain``, ``claim``, ``reserve``, ``lock``, ``unlock``, and some bad calls), applies each
to a trivially correct model (:mod:`._model`, a ``bytearray`` per slot) and checks after
every step:

* offsets are multiples of the alignment, back to back as the original lays them out,
  pairwise disjoint and inside the capacity; a retained span that survives an acquire lies
  after its views;
* ``intact`` is reported exactly when the span's modelled bytes are unchanged (a pattern is
  written on every retain and every acquired view is scribbled over);
* capacities grow to exactly the bytes needed and never shrink, and each call's growth
  names exactly the slots that grew; locked means no growth and no new persistent keys;
* refused calls raise the documented type;
* every call is pure: its input state is unchanged (and hashes the same) afterwards, and
  an equal input gives an equal output.

The machine is configured through its constructor, so a test runs it as
``run_state_machine_as_test(lambda: WorkspaceMachine(growth="ubatches"))``; pass
``transitions=`` to check a function of your own in place of one of the core's. The shells
are checked by their own machine: :mod:`interop.testing` drives a real manager with real
bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from .. import _growth, _ops
from .._errors import (
    InvalidSlotError,
    InvalidSpecError,
    LaneNotConfiguredError,
    PersistentKeyLockedError,
    UbatchNotConfiguredError,
    WorkspaceLockedError,
)
from .._state import Slot, WorkspaceState
from ._events import forget_rule_retries
from ._model import WorkspaceModel
from ._strategies import DEFAULT_DTYPES, keys, slots, spec_lists, specs

Spec = tuple[tuple[int, ...], Any]
#: One ``reserve`` request: a bare pair (its exact bytes: a retained span) or one call's pairs.
Request = Spec | list[Spec]


@dataclasses.dataclass(frozen=True)
class Transitions:
    """The pure functions a :class:`WorkspaceMachine` drives; replace one to test a bug.

    Example:
        >>> import functional_ws as fws
        >>> def my_acquire(state, slot, *specs):
        ...     return fws.acquire(state, slot, *specs)
        >>> mine = Transitions(acquire=my_acquire)
        >>> mine.acquire is my_acquire, mine.retain is fws.retain
        (True, True)
    """

    initial_state: Callable[..., WorkspaceState] = _ops.initial_state
    acquire: Callable[..., Any] = _ops.acquire
    retain: Callable[..., Any] = _ops.retain
    claim: Callable[..., Any] = _ops.claim
    reserve: Callable[..., Any] = _growth.reserve
    lock: Callable[..., Any] = _ops.lock
    unlock: Callable[..., Any] = _ops.unlock


#: The core's own transitions (the default of :class:`WorkspaceMachine`).
CORE = Transitions()

#: What the constructor configures; a subclass that sets one as a class attribute is refused.
_SETTINGS = ("num_ubatches", "num_lanes", "alignment", "growth", "dtype_pool", "transitions")


def _snapshot(state: WorkspaceState) -> tuple[Any, ...]:
    """Every field value; all of them are immutable, so this detects any mutation."""
    top = tuple(getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "slots")
    slot_fields = tuple(
        tuple(getattr(s, f.name) for f in dataclasses.fields(s)) for s in state.slots
    )
    return (*top, slot_fields)


def _copy(state: WorkspaceState) -> WorkspaceState:
    """An equal state made of distinct objects."""
    return dataclasses.replace(state, slots=tuple(dataclasses.replace(s) for s in state.slots))


def _configured(name: str) -> st.SearchStrategy[Any]:
    """Draw from the strategy the running machine built for its configuration."""
    return st.runner().flatmap(lambda machine: getattr(machine, name))


def _expect_raises(kind: type[BaseException], call: Callable[[], object], what: str) -> None:
    try:
        call()
    except kind as err:
        note(f"  -> refused as expected: {type(err).__name__}: {err}")
        return
    raise AssertionError(f"{what}: expected {kind.__name__}, but the call succeeded")


def _nbytes(spec: Spec) -> int:
    n = int(spec[1].itemsize)
    for d in spec[0]:
        n *= d
    return n


class WorkspaceMachine(RuleBasedStateMachine):
    """Drive the core's transitions through random calls; compare with a byte-level model.

    Args:
        num_ubatches: ubatch slots of the workspace.
        num_lanes: lanes per ubatch.
        alignment: the byte alignment of every offset.
        growth: the growth policy (``"slot"`` or ``"ubatches"``).
        dtype_pool: the dtypes requests draw from (anything with an ``itemsize``).
        transitions: the functions under test (:class:`Transitions`; default the core's).

    Raises:
        TypeError: ``transitions`` is not a :class:`Transitions`, or a subclass sets one of
            these settings as a class attribute (pass it to the constructor instead).
        ValueError: an empty ``dtype_pool``; the core's own errors for the other values.

    Example:
        >>> from hypothesis import settings
        >>> from hypothesis.stateful import run_state_machine_as_test
        >>> run_state_machine_as_test(
        ...     lambda: WorkspaceMachine(growth="ubatches", num_lanes=1),
        ...     settings=settings(max_examples=5, stateful_step_count=10, database=None),
        ... )
        >>> TestCoreDefaults = WorkspaceMachine.TestCase  # collect this in a test module
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        misplaced = [name for name in _SETTINGS if name in vars(cls)]
        if misplaced:
            name = misplaced[0]
            raise TypeError(
                f"{cls.__name__} sets {name} as a class attribute; WorkspaceMachine is "
                f"configured through its constructor: run_state_machine_as_test(lambda: "
                f"WorkspaceMachine({name}=...)) in a test function."
            )

    def __init__(
        self,
        *,
        num_ubatches: int = 2,
        num_lanes: int = 2,
        alignment: int = 256,
        growth: str = "slot",
        dtype_pool: Sequence[Any] = DEFAULT_DTYPES,
        transitions: Transitions = CORE,
    ) -> None:
        super().__init__()
        if not isinstance(transitions, Transitions):
            raise TypeError(
                f"transitions must be a functional_ws.testing.Transitions, got "
                f"{transitions!r}: Transitions(acquire=my_acquire) replaces one function."
            )
        if not dtype_pool:
            raise ValueError(f"dtype_pool must hold at least one dtype, got {dtype_pool!r}.")
        self.transitions = transitions
        self.state = transitions.initial_state(
            num_ubatches, num_lanes, alignment=alignment, growth=growth
        )
        self.num_ubatches, self.num_lanes = num_ubatches, num_lanes
        self.alignment, self.growth = alignment, growth
        self.dtype_pool = tuple(dtype_pool)
        self.model = WorkspaceModel(num_ubatches, num_lanes, alignment, growth)
        # The strategies the rules draw from (through ``_configured``), for this workspace.
        self.slot_choices = slots(num_ubatches, num_lanes)
        self.request_choices = spec_lists(
            min_size=1, max_size=3, dtype_pool=self.dtype_pool, max_dims=2
        )
        self.spec_choices = specs(dtype_pool=self.dtype_pool, max_dims=2)

    # ----- calling the transitions -----

    def _pure(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a transition on the current state; check it is pure (see the module doc)."""
        before = self.state
        snapshot, fingerprint = _snapshot(before), hash(before)
        try:
            result = fn(before, *args)
        except Exception:
            assert _snapshot(before) == snapshot, f"a refused {fn.__name__} mutated its input"
            raise
        assert _snapshot(before) == snapshot and hash(before) == fingerprint, (
            f"{fn.__name__} mutated its input state"
        )
        again = fn(_copy(before), *args)
        assert again == result, f"{fn.__name__} gave different results for equal inputs"
        return result

    def _refused(
        self, kind: type[BaseException], what: str, fn: Callable[..., Any], *args: Any
    ) -> None:
        """The call must raise ``kind`` (and, being pure, leave the state as it was)."""
        _expect_raises(kind, lambda: self._pure(fn, *args), what)

    def _check_growth(self, what: str, growth: Any, targets: list[int], required: int) -> None:
        """A call's growth names exactly the slots the model grew, with their new sizes."""
        expected = {self.state.slot_of(i): required for i in targets}
        pairs = list(growth)
        assert len({slot for slot, _ in pairs}) == len(pairs), f"{what}: growth repeats a slot"
        assert dict(pairs) == expected, f"{what}: growth {growth}, the model grew {expected}"

    # ----- rules -----

    @initialize()
    def initial_state(self) -> None:
        """The first step of every run: the initial state is what the constructor made.

        A step of its own: with it, Hypothesis shrinks a failure to the calls that matter
        (without it, shrunk examples could begin with a harmless call or two).
        """
        note(
            f"initial_state({self.num_ubatches}, {self.num_lanes}, "
            f"alignment={self.alignment}, growth={self.growth!r})"
        )
        again = self.transitions.initial_state(
            self.num_ubatches, self.num_lanes, alignment=self.alignment, growth=self.growth
        )
        assert again == self.state and hash(again) == hash(self.state), (
            "initial_state gave different states for equal arguments"
        )

    @rule(slot=_configured("slot_choices"), request=_configured("request_choices"))
    def acquire(self, slot: Slot, request: list[Spec]) -> None:
        index = self.model.index(slot)
        nbytes = [_nbytes(s) for s in request]
        expected_offsets, total = self.model.request_bytes(nbytes)
        targets = self.model.growth_targets(index, total)
        note(f"acquire(slot={slot}, specs={request}) needs {total} bytes")
        if targets and self.model.locked:
            self._refused(
                WorkspaceLockedError, "locked acquire", self.transitions.acquire, slot, *request
            )
            return
        self.state, layout = self._pure(self.transitions.acquire, slot, *request)
        offsets = tuple(layout.offsets)
        self.model.grow(targets, total)
        capacity = self.model.slots[index].capacity
        note(f"  -> offsets {offsets}, capacity {capacity}")
        self._check_growth("acquire", layout.growth, targets, total)
        assert len(offsets) == len(request), "one offset per view"
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
        slot_model = self.model.slots[index]
        slot_model.high_water = max(slot_model.high_water, total)
        survived = self.state.slots[index].retained
        if survived is not None:
            assert survived[1] >= total, f"retained span at {survived[1]} survived a reach"

    @rule(slot=_configured("slot_choices"))
    def acquire_nothing(self, slot: Slot) -> None:
        """An empty request (the original's ``get_simultaneous()``): no views, nothing grows.

        A rule of its own, not an empty ``request`` of :meth:`acquire`: a no-op there would be
        the simplest request, and shrunk examples could keep it as a harmless first step.
        """
        note(f"acquire(slot={slot}) with no specs")
        before = self.state
        self.state, layout = self._pure(self.transitions.acquire, slot)
        assert tuple(layout.offsets) == () and tuple(layout.growth) == (), (
            f"an empty request planned offsets {layout.offsets} and growth {layout.growth}"
        )
        assert self.state == before, "an empty request changed the state"

    @rule(slot=_configured("slot_choices"), key=keys(), spec=_configured("spec_choices"))
    def retain(self, slot: Slot, key: Hashable, spec: Spec) -> None:
        index = self.model.index(slot)
        nbytes = _nbytes(spec)
        targets = self.model.growth_targets(index, nbytes)
        note(f"retain(slot={slot}, key={key!r}, spec={spec}) of {nbytes} bytes")
        if targets and self.model.locked:
            self._refused(
                WorkspaceLockedError, "locked retain", self.transitions.retain, slot, key, spec
            )
            return
        self.state, span, intact = self._pure(self.transitions.retain, slot, key, spec)
        self.model.grow(targets, nbytes)
        start = self.model.retained_start(index, nbytes)
        expected = self.model.expected_intact(index, key, start)
        note(f"  -> offset {span.offset}, intact={intact} (model says {expected})")
        self._check_growth("retain", span.growth, targets, nbytes)
        assert span.offset == start, f"retained span at {span.offset}, expected {start}"
        assert span.offset % self.alignment == 0
        assert intact == expected, f"intact={intact} but the modelled bytes say {expected}"
        self.model.write_pattern(index, key, start, nbytes)
        slot_model = self.model.slots[index]
        slot_model.high_water = max(slot_model.high_water, nbytes)

    @rule(slot=_configured("slot_choices"), key=keys())
    def claim(self, slot: Slot, key: Hashable) -> None:
        claimed = self.model.slots[self.model.index(slot)].keys
        note(f"claim(slot={slot}, key={key!r})")
        if key not in claimed and self.model.locked:
            self._refused(
                PersistentKeyLockedError, "locked claim", self.transitions.claim, slot, key
            )
            return
        self.state, is_new = self._pure(self.transitions.claim, slot, key)
        assert is_new == (key not in claimed), f"is_new={is_new} for {key!r}, keys {claimed}"
        claimed.add(key)

    @rule(
        requests=st.lists(_configured("request_choices") | _configured("spec_choices"), max_size=2),
        chosen=st.none() | st.lists(_configured("slot_choices"), max_size=3),
    )
    def reserve(self, requests: list[Request], chosen: list[Slot] | None) -> None:
        needed = max(
            (
                self.model.request_bytes([_nbytes(s) for s in r])[1]
                if isinstance(r, list)
                else _nbytes(r)
                for r in requests
            ),
            default=0,
        )
        indices = (
            range(len(self.model.slots))
            if chosen is None
            else sorted({self.model.index(s) for s in chosen})
        )
        targets = sorted({t for i in indices for t in self.model.growth_targets(i, needed)})
        note(f"reserve(requests={requests}, slots={chosen}) needs {needed} bytes")
        if targets and self.model.locked:
            self._refused(
                WorkspaceLockedError,
                "locked reserve",
                self.transitions.reserve,
                requests,
                chosen,
            )
            return
        self.state, growth = self._pure(self.transitions.reserve, requests, chosen)
        self.model.grow(targets, needed)
        self._check_growth("reserve", growth, targets, needed)

    @rule()
    def lock(self) -> None:
        note("lock()")
        self.state = self._pure(self.transitions.lock)
        self.model.locked = True

    @precondition(lambda self: self.model.locked)
    @rule()
    def unlock(self) -> None:
        note("unlock()")
        self.state = self._pure(self.transitions.unlock)
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
        slot=_configured("slot_choices"),
    )
    def bad_spec(self, bad: tuple[str, tuple[Any, int | None], type], slot: Slot) -> None:
        name, (shape, dtype_code), kind = bad
        dtype = "not a dtype" if dtype_code is None else self.dtype_pool[0]
        note(f"acquire(slot={slot}) with a bad spec ({name}): {(shape, dtype)!r}")
        self._refused(kind, name, self.transitions.acquire, slot, (shape, dtype))
        self._refused(kind, name, self.transitions.retain, slot, "a", (shape, dtype))

    @rule(which=st.sampled_from(["lane too big", "ubatch too big", "negative lane"]))
    def bad_slot(self, which: str) -> None:
        slot, kind = {
            "lane too big": ((0, self.num_lanes), LaneNotConfiguredError),
            "ubatch too big": ((self.num_ubatches, 0), UbatchNotConfiguredError),
            "negative lane": ((0, -1), InvalidSlotError),
        }[which]
        note(f"acquire(slot={slot}) ({which})")
        spec: Spec = ((4,), self.dtype_pool[0])
        self._refused(kind, which, self.transitions.acquire, slot, spec)

    def teardown(self) -> None:
        """Keep ``--hypothesis-show-statistics`` readable (:mod:`._events`)."""
        forget_rule_retries()

    # ----- invariants -----

    @invariant()
    def matches_model(self) -> None:
        state = self.state
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
