"""find_shortfall: Hypothesis searches a workload's parameters for a trace the reservation
does not cover, and shrinks what it finds."""

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

import functional_ws as fws
from functional_ws.testing import Counterexample, find_shortfall

F16, I32 = np.dtype("float16"), np.dtype("int32")
HIDDEN, FFN, TOP_K, EXPERTS = 64, 256, 2, 8


def moe_step(params):
    """A toy MoE layer's scratch: the permuted tokens (num_tokens x top_k rows) and the
    busiest expert's intermediate (ceil(num_tokens x top_k / experts hit) rows)."""
    tokens = params["batch"] * params["seq_len"]
    rows = tokens * TOP_K
    busiest = min(-(-rows // params["experts_hit"]), tokens)
    t = fws.Trace().acquire((0, 0), ((rows, HIDDEN), F16), ((rows,), I32))
    return t.acquire((0, 0), ((busiest, FFN), F16))


PARAMS = st.fixed_dictionaries(
    {
        "batch": st.integers(1, 8),
        "seq_len": st.integers(1, 64),
        "experts_hit": st.integers(TOP_K, EXPERTS),
    }
)
MAX = {"batch": 8, "seq_len": 64}


def test_a_max_tokens_reservation_with_even_routing_is_broken_by_skewed_routing():
    even = fws.worst_case(moe_step({**MAX, "experts_hit": EXPERTS}), like=fws.initial_state())
    found = find_shortfall(PARAMS, moe_step, even)
    assert isinstance(found, Counterexample)
    assert found.shortfalls == fws.replay(even, found.trace) != ()
    assert found.trace == moe_step(found.params)
    (shortfall,) = found.shortfalls
    assert shortfall.index == 1  # the expert scratch, not the permuted tokens
    assert found.params["experts_hit"] < EXPERTS  # routing that is not even breaks it
    text = str(found)
    assert text.startswith(f"params {found.params!r} need more than the state holds")
    assert str(shortfall) in text and repr(found) == text


def test_the_search_shrinks_to_the_smallest_breaking_parameters():
    def tokens_step(tokens):
        return fws.Trace().acquire((0, 0), ((tokens, HIDDEN), F16))

    reserved = fws.worst_case(tokens_step(1000), like=fws.initial_state())
    found = find_shortfall(st.integers(1, 4096), tokens_step, reserved)
    assert found.params == 1001  # the smallest that needs more: 1000 rows fill 500 blocks


def test_a_reservation_that_covers_every_parameter_finds_nothing():
    worst = moe_step({**MAX, "experts_hit": TOP_K})
    assert find_shortfall(PARAMS, moe_step, fws.worst_case(worst, like=fws.initial_state())) is None


def test_settings_are_the_searchs():
    calls = []

    def step(tokens):
        calls.append(tokens)
        return fws.Trace().acquire((0, 0), ((tokens,), F16))

    reserved = fws.worst_case(step(1), like=fws.initial_state())
    calls.clear()
    found = find_shortfall(
        st.integers(1, 10**6), step, reserved, settings=settings(max_examples=5, derandomize=True)
    )
    assert found is not None and found.params == 129  # 258 bytes: more than 256
    assert len(calls) >= 5


def test_a_workload_that_returns_no_trace_is_refused_naming_it():
    with pytest.raises(fws.TraceTypeError, match=r"workload\(1\) must return .*Trace, got 'no'"):
        find_shortfall(st.just(1), lambda p: "no", fws.initial_state())


def test_a_trace_of_another_configuration_is_refused():
    with pytest.raises(fws.TraceMismatchError, match="slot \\(1, 0\\)"):
        find_shortfall(st.just(1), lambda p: fws.Trace().claim((1, 0), "k"), fws.initial_state())


S = fws.initial_state()
BAD = [
    ("params", lambda: find_shortfall(range(3), moe_step, S), ["params=range(0, 3)", "strategy"]),
    ("workload", lambda: find_shortfall(PARAMS, 3, S), ["workload=3", "function"]),
    ("state", lambda: find_shortfall(PARAMS, moe_step, {}), ["state={}", "WorkspaceState"]),
    ("settings", lambda: find_shortfall(PARAMS, moe_step, S, settings=5), ["settings=5"]),
]


@pytest.mark.parametrize(("call", "fragments"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_arguments_are_type_errors_naming_them(call, fragments):
    with pytest.raises(TypeError) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_the_default_search_has_no_deadline_a_workload_may_run_a_model():
    import time

    from hypothesis import settings as hypothesis_settings

    def slow_step(tokens):
        time.sleep(0.25)  # above Hypothesis's default deadline of 200 ms
        return fws.Trace().acquire((0, 0), ((tokens,), F16))

    covering = fws.worst_case(slow_step(1000), like=fws.initial_state())
    loaded = hypothesis_settings.get_current_profile_name()
    hypothesis_settings.load_profile("default")  # a profile with a deadline
    try:  # the examples that find nothing are the ones a deadline would fail
        found = find_shortfall(st.just(1000), slow_step, covering)
    finally:
        hypothesis_settings.load_profile(loaded)
    assert found is None


U8 = np.dtype("uint8")
DERANDOMIZED = settings(max_examples=100, derandomize=True, database=None, deadline=None)


def two_views(sizes):
    a, b = sizes
    return fws.Trace().acquire((0, 0), ((a,), U8), ((b,), U8))


def test_a_shortfall_only_at_the_corner_of_the_ranges_is_found_in_a_small_budget():
    # 256 bytes short only where both sizes are near 4096: the ci profile's 60 draws missed
    # that corner (a sizing attack), and 100 draws miss it without the search's climb.
    need = fws.worst_case(two_views((4096, 4096)), like=fws.initial_state()).capacity((0, 0))
    planted = fws.lock(fws.reserve(fws.initial_state(), [((need - 256,), U8)])[0])
    sizes = st.tuples(st.integers(0, 4096), st.integers(0, 4096))
    found = find_shortfall(sizes, two_views, planted, settings=DERANDOMIZED)
    assert found is not None and found.shortfalls == fws.replay(planted, found.trace) != ()
    assert min(found.params) > 3584  # the corner: both sizes large
    exact = fws.lock(fws.reserve(fws.initial_state(), [((need,), U8)])[0])
    assert find_shortfall(sizes, two_views, exact, settings=DERANDOMIZED) is None
    # A slot the workload never uses (capacity 0, needing 0) must not pin the climb's score.
    two = fws.initial_state(num_ubatches=2)
    idle = fws.lock(fws.reserve(two, [((need - 256,), U8)], ((0, 0),))[0])
    found = find_shortfall(sizes, two_views, idle, settings=DERANDOMIZED)
    assert found is not None and min(found.params) > 3584


def test_a_workload_that_uses_up_its_parameters_is_flaky_not_a_counterexample():
    from hypothesis.errors import Flaky

    def consuming(sizes):  # pops the list it is given: run again, it asks for nothing
        trace = fws.Trace()
        while sizes:
            trace = trace.acquire((0, 0), ((sizes.pop(),), U8))
        return trace

    reserved = fws.worst_case(consuming([1000]), like=fws.initial_state())
    sizes = st.lists(st.integers(0, 5000), min_size=1)
    with pytest.raises(Flaky, match=r"fell short during the search but not when run again"):
        find_shortfall(sizes, consuming, reserved, settings=DERANDOMIZED)


def test_the_search_climbs_on_the_slot_that_comes_closest_not_on_a_roomy_one():
    """find_shortfall targets the largest gap over the slots: a roomy second slot the
    workload also uses must not pin the climb's score."""
    derandomized = settings(max_examples=100, derandomize=True, database=None, deadline=None)

    def workload(sizes):
        a, b = sizes
        t = fws.Trace().acquire((0, 0), ((a,), U8), ((b,), U8))
        return t.acquire((1, 0), ((16,), U8))  # always far below what slot (1, 0) holds

    like = fws.initial_state(num_ubatches=2)
    need = fws.worst_case(workload((4096, 4096)), like=like).capacity((0, 0))
    state, _ = fws.reserve(like, [((need - 256,), U8)], ((0, 0),))
    state, _ = fws.reserve(state, [((1 << 20,), U8)], ((1, 0),))
    sizes = st.tuples(st.integers(0, 4096), st.integers(0, 4096))
    found = find_shortfall(sizes, workload, fws.lock(state), settings=derandomized)
    assert found is not None and min(found.params) > 3584
