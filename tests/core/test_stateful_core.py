"""Run the shipped state machine against the pure core, in several configurations."""

import dataclasses
import itertools

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from support.helpers import import_without_hypothesis
from support.user_module import pytest_user_module

import functional_ws as fws
from functional_ws.testing import Transitions, WorkspaceMachine

#: The configurations the machine runs in (``benchmarks/count_stateful_steps.py`` counts them).
CONFIGS = {
    "defaults": {},  # two ubatches, two lanes, "slot" growth, 256-byte alignment
    "ubatches": {"growth": "ubatches", "num_ubatches": 3, "num_lanes": 1},
    "small-alignment": {"alignment": 16, "num_ubatches": 1},
}
#: Planted bugs are found and shrunk; Hypothesis's explain phase would only name our lines.
FIND_AND_SHRINK = settings(
    report_multiple_bugs=False, phases=[Phase.explicit, Phase.generate, Phase.shrink]
)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
def test_core_machine(config):
    run_state_machine_as_test(lambda: WorkspaceMachine(**config))


def _off_by_one_acquire(state, slot, *specs):
    state, layout = fws.acquire(state, slot, *specs)
    shifted = tuple(o + 1 if i else o for i, o in enumerate(layout.offsets))
    return state, dataclasses.replace(layout, offsets=shifted)


def _forgetful_retain(state, slot, key, spec):
    """Reports intact whenever the key matches, even after a request clobbered the span."""
    previous = state.slots[state.index(slot)].retained
    state, span, intact = fws.retain(state, slot, key, spec)
    return state, span, intact or (previous is not None and previous[0] == key)


def _never_intact_retain(state, slot, key, spec):
    """Says its span is never intact: every caller recomputes what it kept."""
    state, span, _ = fws.retain(state, slot, key, spec)
    return state, span, False


def _oversized_growth_acquire(state, slot, *specs):
    """Plans the right state but tells the shell to allocate 256 bytes more per slot."""
    state, layout = fws.acquire(state, slot, *specs)
    growth = tuple((grown, nbytes + 256) for grown, nbytes in layout.growth)
    return state, dataclasses.replace(layout, growth=growth)


def _grows_when_locked(state, slot, *specs):
    was_locked = state.locked
    state, layout = fws.acquire(fws.unlock(state), slot, *specs)
    return (fws.lock(state) if was_locked else state), layout


def _reserve_without_growth(state, requests, slots=None):
    """Grows the slots but reports no growth: a shell would never allocate the buffers."""
    state, _ = fws.reserve(state, requests, slots)
    return state, ()


_RESERVES = itertools.count()


def _reserve_in_varying_order(state, requests, slots=None):
    """Reports the right growth, in an order that changes from call to call (a module-level
    counter, as a shared cache or a set iterated in another order would): equal states get
    unequal plans, so a jitted caller's cached plan is not the one a fresh trace makes."""
    state, growth = fws.reserve(state, requests, slots)
    return state, (tuple(reversed(growth)) if next(_RESERVES) % 2 else growth)


def _mutating_lock(state):
    """Locks by writing into its input (a frozen dataclass, so through object.__setattr__)."""
    object.__setattr__(state, "locked", True)
    return state


@pytest.mark.parametrize(
    ("bug", "symptom"),
    [
        pytest.param({"acquire": _off_by_one_acquire}, "is not aligned", id="off-by-one-offset"),
        pytest.param({"retain": _forgetful_retain}, "intact", id="intact-lie"),
        pytest.param({"retain": _never_intact_retain}, "intact=False but", id="never-intact"),
        pytest.param({"acquire": _oversized_growth_acquire}, "the model grew",
                     id="growth-sizes-wrong"),
        pytest.param({"acquire": _grows_when_locked}, "expected WorkspaceLockedError",
                     id="growth-while-locked"),
        pytest.param({"reserve": _reserve_without_growth}, r"reserve: growth \(\)",
                     id="growth-not-reported"),
        pytest.param({"reserve": _reserve_in_varying_order}, "different results for equal inputs",
                     id="answers-differ-on-repeat"),
        pytest.param({"lock": _mutating_lock}, "lock mutated its input", id="impure-lock"),
    ],
)  # fmt: skip
def test_machine_finds_planted_bugs(bug, symptom):
    with pytest.raises(AssertionError, match=symptom):
        run_state_machine_as_test(
            lambda: WorkspaceMachine(transitions=Transitions(**bug)),
            settings=FIND_AND_SHRINK,
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"transitions": {"acquire": fws.acquire}}, TypeError, "must be a functional_ws.testing"),
        ({"dtype_pool": ()}, ValueError, "dtype_pool must hold at least one dtype"),
        ({"growth": "all"}, ValueError, "growth"),
    ],
    ids=["transitions-not-Transitions", "empty-dtype-pool", "unknown-growth"],
)  # fmt: skip
def test_bad_configuration_is_refused_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        WorkspaceMachine(**kwargs)


def test_configuring_by_class_attribute_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"WorkspaceMachine\(growth=\.\.\.\)"):

        class Old(WorkspaceMachine):  # the idiom of earlier releases
            growth = "ubatches"


README_IDIOM = """
    import functional_ws as fws
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from functional_ws.testing import Transitions, WorkspaceMachine


    def my_acquire(state, slot, *specs):
        return fws.acquire(state, slot, *specs)


    def test_my_acquire():
        run_state_machine_as_test(
            lambda: WorkspaceMachine(transitions=Transitions(acquire=my_acquire)),
            settings=settings(max_examples=3, stateful_step_count=5, database=None),
        )


    TestCoreDefaults = WorkspaceMachine.TestCase
    TestCoreDefaults.settings = settings(max_examples=3, stateful_step_count=5, database=None)
"""


def test_readme_idiom_collects_and_runs_cleanly(tmp_path):
    """A user's test module with the README's idiom: no PytestCollectionWarning, two passes."""
    done = pytest_user_module(tmp_path, README_IDIOM)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "warning" not in done.stdout.lower(), done.stdout


def test_without_hypothesis_the_kit_says_what_to_install():
    done = import_without_hypothesis("functional_ws.testing")
    assert done.stdout.splitlines() == [
        "functional_ws.testing needs Hypothesis, which is not installed: "
        "pip install 'functional-ws[testing]'",
        "ModuleNotFoundError hypothesis",
    ], done.stdout + done.stderr
