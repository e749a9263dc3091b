"""The façade under ``interop.testing``'s state machine, with real memory and the core's plans.

:class:`interop.testing.WorkspaceAPIMachine` drives ``interop.WorkspaceManager`` through the
original API with real bytes (every property family), and with ``core_state`` it also checks
that the façade carries out the pure core's decisions: its ``.state`` after every call, each
view at the planned offset, the planned ``intact``, the core's error class for every refusal.
:class:`FacadeMachine` adds the façade's own calls: ``reserve``/``reserve_many`` and bad
requests. It runs with each growth policy and each allocator (``tests/support/allocators.py``).
"""

import re

import pytest
import torch
from conftest import TEST_DEVICE
from hypothesis import Phase, note, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import precondition, rule, run_state_machine_as_test
from support.allocators import ALLOCATORS

import functional_ws as fws
from functional_ws import (
    InvalidSlotError,
    InvalidSpecError,
    LaneNotConfiguredError,
    UbatchNotConfiguredError,
)
from functional_ws.testing import spec_lists
from interop import WorkspaceManager, use_workspace_lane, use_workspace_ubatch
from interop._workspace import _memo
from interop._workspace._memo import Memos
from interop.testing import MachineConfig, WorkspaceAPIMachine
from interop.testing._config import format_spec
from interop.testing._machine_base import SCRATCH_DTYPES

CORE_RESERVE = fws.reserve  # bound now: a planted bug below replaces the façade's
_slot = st.runner().flatmap(lambda machine: machine.slot_choices)
_requests = st.lists(
    spec_lists(min_size=1, max_size=3, dtype_pool=SCRATCH_DTYPES, max_dims=2),
    min_size=1,
    max_size=2,
)
BAD_SPECS = [
    ("negative dim", ((-1,), torch.float32)),
    ("float dim", ((1.5,), torch.float32)),
    ("bool dim", ((True,), torch.float32)),
    ("not a dtype", ((3,), "not a dtype")),
]


class FacadeMachine(WorkspaceAPIMachine):
    """The kit's machine on the façade, plus the façade's own calls."""

    @precondition(lambda self: self.mirror is not None)
    @rule(
        slot=_slot,
        requests=_requests,
        chosen=st.none() | st.just("all") | st.lists(_slot, min_size=1, max_size=3),
    )
    def reserve(self, slot, requests, chosen):
        """``reserve(*pairs)`` for one request, ``reserve_many`` for several, in ``slot``."""
        if len(requests) == 1:
            listed = ", ".join(format_spec(s) for s in requests[0])
            call = f"reserve({listed}, slots={chosen!r}){self.cfg.where(slot)}"
            fn = lambda: self.manager.reserve(*requests[0], slots=chosen)  # noqa: E731
        else:
            call = f"reserve_many({requests}, slots={chosen!r}){self.cfg.where(slot)}"
            fn = lambda: self.manager.reserve_many(requests, slots=chosen)  # noqa: E731
        note(call)
        # The core's slots: by default every ubatch slot of the current lane.
        lane_slots = [(u, slot[1]) for u in range(self.cfg.num_ubatches)]
        core_slots = lane_slots if chosen is None else None if chosen == "all" else chosen
        plan = self.mirror.plan(call, CORE_RESERVE, requests, core_slots)
        if plan.refusal is not None:
            self._expect_refusal(slot, type(plan.refusal), call, fn, plan)
            return
        with self.cfg.select(slot):
            fn()
        self.commit(plan)
        (growth,) = plan.answer
        note(f"  -> growth {growth}")
        if growth:
            self.epoch += 1  # buffers changed unseen, while unlocked

    @precondition(lambda self: self.mirror is not None)
    @rule(bad=st.sampled_from(BAD_SPECS), slot=_slot)
    def bad_spec(self, bad, slot):
        """A malformed request is refused with the core's error and changes nothing."""
        name, spec = bad
        for call, transition, args, fn in [
            (f"get_simultaneous({spec!r})", fws.acquire, (slot, spec),
             lambda: self.manager.get_simultaneous(spec)),
            (f"get_retained('a', {spec[0]!r}, {spec[1]!r})", fws.retain, (slot, "a", spec),
             lambda: self.manager.get_retained("a", *spec)),
        ]:  # fmt: skip
            note(f"{call} ({name})")
            plan = self.mirror.plan(call, transition, *args)
            self._expect_refusal(slot, InvalidSpecError, call, fn, plan)

    @precondition(lambda self: self.mirror is not None)
    @rule(which=st.sampled_from(["lane too big", "ubatch too big", "negative lane"]))
    def bad_slot(self, which):
        """A request in a slot the manager does not have is refused and changes nothing."""
        cfg = self.cfg
        slot, kind = {
            "lane too big": ((0, cfg.num_lanes), LaneNotConfiguredError),
            "ubatch too big": ((cfg.num_ubatches, 0), UbatchNotConfiguredError),
            "negative lane": ((0, -1), InvalidSlotError),
        }[which]
        spec = ((4,), torch.float32)
        call = f"get_simultaneous({format_spec(spec)}) in slot {slot} ({which})"
        note(call)
        plan = self.mirror.plan(call, fws.acquire, slot, spec)
        self._expect_refusal(slot, kind, call, lambda: self.manager.get_simultaneous(spec), plan)


def facade_config(allocator="torch", growth="slot", num_ubatches=2, num_lanes=2):
    """The façade with every property family and the core's plans checked."""
    return MachineConfig(
        lambda u, lanes: WorkspaceManager(
            TEST_DEVICE, u, lanes, growth=growth, allocator=ALLOCATORS[allocator]
        ),
        num_ubatches=num_ubatches,
        num_lanes=num_lanes,
        use_lane=use_workspace_lane,
        use_ubatch=use_workspace_ubatch,
        core_state=lambda ws: ws.state,
    )


CONFIGS = {
    "torch": facade_config(),
    "ubatches": facade_config(growth="ubatches", num_ubatches=3, num_lanes=1),
    "jax": facade_config(allocator="jax"),
    # A callable allocator allocates every growing slot first: the ubatches policy grows
    # several slots at once, so this is where that order shows.
    "callable-ubatches": facade_config("callable", "ubatches", num_ubatches=3, num_lanes=1),
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
def test_facade_machine(config):
    run_state_machine_as_test(lambda: FacadeMachine(config))


#: Planted bugs show soonest in a single slot: every call meets the ones before it.
ONE_SLOT = facade_config(num_ubatches=1, num_lanes=1)


def _stale_memo(monkeypatch):
    """Growth forgets to drop the memoised views, and replays forget to check the buffer
    they were carved from: later calls get the retired buffer. (Each guard alone keeps
    views current, so both are planted.)"""
    monkeypatch.setattr(Memos, "retire", lambda self, index, dead: None)
    monkeypatch.setattr(_memo, "still_current", lambda engine, memo, entry: True)


def _intact_lie(monkeypatch):
    """get_retained reports every span intact."""
    real = WorkspaceManager.get_retained
    monkeypatch.setattr(
        WorkspaceManager, "get_retained", lambda self, *args: (real(self, *args)[0], True)
    )


def _reserve_forgets_requests(monkeypatch):
    """The façade's reserve passes the core only its first request."""
    monkeypatch.setattr(
        fws, "reserve", lambda state, requests, slots=None: CORE_RESERVE(state, requests[:1], slots)
    )


@pytest.mark.parametrize(
    ("plant", "symptom"),
    [
        pytest.param(_stale_memo, "another buffer|the buffer it had before", id="stale-memo"),
        pytest.param(_intact_lie, r"intact=True; the core decides intact=False|reported intact",
                     id="intact-lie"),
        pytest.param(_reserve_forgets_requests,
                     "should raise WorkspaceLockedError|differs from the core's",
                     id="reserve-forgets-requests"),
    ],
)  # fmt: skip
def test_machine_finds_planted_facade_bugs(plant, symptom, monkeypatch):
    plant(monkeypatch)
    # 200 examples at most: the kit's aimed rules share the steps with this machine's own, and
    # the derandomized 60 missed reserve-forgets-requests (fresh random runs find it in 0.5 s).
    quick = settings(
        report_multiple_bugs=False, phases=[Phase.generate], database=None, max_examples=200
    )
    # Found, not shrunk (to keep the suite fast). A stale view's address depends on the heap,
    # so Hypothesis may report the failure as flaky when it replays it: that is found too.
    with pytest.raises((AssertionError, Flaky)) as found:
        run_state_machine_as_test(lambda: FacadeMachine(ONE_SLOT), settings=quick)
    assert isinstance(found.value, Flaky) or re.search(symptom, str(found.value))
