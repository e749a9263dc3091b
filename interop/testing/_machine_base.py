"""The state machine's floor: its configuration, the manager's calls and the checks of what
they return, shared by every rule group.

:class:`MachineBase` makes the manager (the first step of every run), calls it in a slot
(:meth:`MachineBase._call`, :meth:`MachineBase._expect_refusal`), follows the core's
decisions when ``core_state`` is configured, and checks returned views against real memory
and the byte model. It has no rules but the first step and the core-state invariant; the rule
groups (:mod:`._retained_rules`, :mod:`._lock_rules`) subclass it and
:class:`~interop.testing.WorkspaceAPIMachine` combines them.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import torch
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition

from functional_ws import WorkspaceState
from functional_ws.testing import WorkspaceModel, slots, spec_lists, specs
from functional_ws.testing._events import forget_rule_retries

from ._aims import Aims
from ._config import MachineConfig, Spec
from ._memory import Buffer, check_real, first_difference, nbytes_of, read, view_bytes
from ._mirror import CoreMirror, Plan
from ._stats import Exercised
from ._tracking import STALE_HINT, Range, SlotTrack, overlap

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


def _selected(family: str) -> Callable[[MachineBase], bool]:
    """A precondition: the rule runs only when ``family`` is selected."""
    return lambda machine: family in machine.properties


def _intact(machine: MachineBase) -> bool:
    return "intact" in machine.properties


def _aimed(build: Callable[[Aims], st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Arguments the running machine's :class:`Aims` build (see the aimed rules)."""
    return st.runner().flatmap(lambda machine: build(machine.aims))


class MachineBase(RuleBasedStateMachine):
    """What every rule group of :class:`~interop.testing.WorkspaceAPIMachine` shares: the
    configuration, the manager and the models of its slots, and the calls and checks."""

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
        runs = _RUNS.get()
        if runs is not None:
            runs.append(self.stats)
        self.manager: Any = None  # made by the first step, new_manager
        self.mirror: CoreMirror | None = None
        block = config.alignment
        self.model = WorkspaceModel(config.num_ubatches, config.num_lanes, block, "slot")
        self.tracks = [SlotTrack() for _ in config.slots]
        self.aims = Aims(
            config.slots,
            self.tracks,
            self.model,
            SCRATCH_DTYPES,
            RETAINED_KEYS,
            0 if config.empty_requests else block,
            block,
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
        state = None
        if cfg.core_state is not None:
            state = cfg.core_state(self.manager)
            self.mirror = CoreMirror(state)
        _check_alignment_told(cfg, self.manager, state)
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
        check_real(spans[0][1])
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
        earlier = track.earlier_holding(storage)
        stale = "" if earlier is None else STALE_HINT
        if locked and old is None and "locked" in self.properties and storage.nbytes():
            # Its first buffer: another slot's growth (a policy that grows several) may
            # have made it unseen, but only if some slot grew while unlocked.
            assert self.epoch > 0, (
                f"{call} got its views in a new buffer (the slot's first: {storage.nbytes()} "
                "bytes) while the workspace is locked, and no slot ever grew: a locked call "
                "that needs memory must raise AssertionError (the factory must return a "
                "manager that holds no buffer yet, as vLLM's constructor makes it: the kit "
                "cannot see buffers made before its first call)"
            )
        if locked and old is not None and "locked" in self.properties:
            # A buffer may change unseen only by another slot's growth (a policy that grows
            # several slots) while unlocked; with no growth seen since, this call grew it.
            this_lock = old.lock_serial == self.lock_serial
            assert not (this_lock or old.epoch == self.epoch), (
                f"{call} got its views in a new buffer ({old.nbytes} -> {storage.nbytes()} "
                f"bytes) while the workspace is locked: a locked call that needs more must "
                f"raise AssertionError{stale}"
            )
        if not locked:
            self.epoch += 1
        self.stats.growths += 1
        buffer = Buffer.of(storage, self.epoch, self.lock_serial if locked else None)
        buffer.stale = earlier is not None
        track.new_buffer(buffer, need)
        self.model.slots[index].reallocate(storage.nbytes())
        note(f"  -> a new buffer of {storage.nbytes()} bytes{stale}")

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
                block = self.cfg.alignment
                assert (view.data_ptr() - ref) % block == 0, (
                    f"{desc} lies {view.data_ptr() - ref:+d} bytes from {ref_desc} in the same "
                    f"buffer: not a multiple of {block} (relative alignment)"
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

    def _since_retained(self, index: int, call: str) -> None:
        """``call`` joins the calls made since slot ``index``'s span was retained, if it has
        one: a failure's headline names them all (its reproduction)."""
        if self.model.slots[index].retained is not None:
            self.tracks[index].history.append(call)

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


def _check_alignment_told(cfg: MachineConfig, manager: Any, state: Any) -> None:
    """Refuse a manager built on :mod:`functional_ws` whose state (``core_state``'s, else
    its own ``state`` property) says it aligns views to other than ``cfg.alignment``:
    checked at the wrong alignment, a correct manager fails ``intact`` and ``locked`` (the
    aimed requests are padded to the kit's)."""
    if state is None and isinstance(getattr(type(manager), "state", None), property):
        # (interop.WorkspaceManager's); nothing else of a manager's is asked: the families
        # left out call nothing (tests/kit: test_rules_of_families_left_out_do_not_run)
        with contextlib.suppress(Exception):  # only read, never fail
            state = manager.state
    if not isinstance(state, WorkspaceState) or state.alignment == cfg.alignment:
        return
    raise ValueError(
        f"the factory's manager aligns views to {state.alignment} bytes (its state says "
        f"so), but the kit was told alignment={cfg.alignment}: pass "
        f"alignment={state.alignment} to check_workspace / make_machine / MachineConfig."
    )


#: Where machines made meanwhile note their runs' counts (:func:`counting_runs`).
_RUNS: contextvars.ContextVar[list[Exercised] | None] = contextvars.ContextVar(
    "interop_testing_runs", default=None
)


@contextlib.contextmanager
def counting_runs(runs: list[Exercised]) -> Iterator[None]:
    """Every machine made in the block appends its :class:`Exercised` counts to ``runs``."""
    token = _RUNS.set(runs)
    try:
        yield
    finally:
        _RUNS.reset(token)
