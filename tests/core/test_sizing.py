"""worst_case and replay: the smallest covering state, and a replay that names what is not
covered. Properties over random traces, then the details and the bad inputs."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import functional_ws as fws
from functional_ws.testing import traces

U8, F32 = np.dtype("uint8"), np.dtype("float32")
CONFIGS = st.tuples(
    st.integers(1, 2),
    st.integers(1, 2),
    st.sampled_from([16, 256]),
    st.sampled_from(["slot", "ubatches"]),
)


@st.composite
def traced(draw, growth=None):
    """A configuration's empty state and a trace of it."""
    ubatches, lanes, alignment, policy = draw(CONFIGS)
    state = fws.initial_state(ubatches, lanes, alignment=alignment, growth=growth or policy)
    return state, draw(traces(ubatches, lanes, max_side=300))


def _model_needs(state, trace):
    """A trivially correct model of the largest request per slot: an acquire's views each
    rounded up to the alignment, a retain's bytes."""
    needs = dict.fromkeys(state.all_slots(), 0)
    a = state.alignment
    for e in trace:
        if e.kind == "acquire":
            needs[e.slot] = max(needs[e.slot], sum(-(-n // a) * a for n in e.nbytes))
        elif e.kind == "retain":
            needs[e.slot] = max(needs[e.slot], e.nbytes[0])
    if state.growth == "ubatches":
        for lane in range(state.num_lanes):
            top = max(needs[(u, lane)] for u in range(state.num_ubatches))
            needs.update({(u, lane): top for u in range(state.num_ubatches)})
    return needs


def _with_capacity(state, changes):
    """``state`` with some slots' capacities replaced (through a plan, as a file would)."""
    plan = fws.to_dict(state)
    for entry in plan["slots"]:
        slot = (entry["ubatch"], entry["lane"])
        if slot in changes:
            entry["capacity"] = changes[slot]
    return fws.from_dict(plan)


@given(traced())
def test_replaying_a_trace_on_its_worst_case_reports_nothing(case):
    state, trace = case
    covering = fws.worst_case(trace, like=state)
    assert fws.replay(covering, trace) == ()
    locked = fws.replay(fws.lock(covering), trace)  # only its keys, never claimed, remain
    assert all(s.event.kind == "claim" for s in locked)
    assert len(locked) == len({(e.slot, e.key) for e in trace if e.kind == "claim"})


@given(traced())
def test_worst_case_holds_the_largest_request_per_slot(case):
    state, trace = case
    covering = fws.worst_case(trace, like=state)
    needs = _model_needs(state, trace)
    assert {slot: covering.capacity(slot) for slot in state.all_slots()} == needs
    assert (covering.num_ubatches, covering.num_lanes, covering.alignment, covering.growth) == (
        state.num_ubatches,
        state.num_lanes,
        state.alignment,
        state.growth,
    )
    assert not covering.locked
    assert all(s.persistent_keys == frozenset() and s.retained is None for s in covering.slots)
    assert all(s.growths == (1 if s.capacity else 0) for s in covering.slots)


@given(traced(growth="slot"), st.data())
def test_a_slot_256_bytes_smaller_is_reported_in_that_slot(case, data):
    state, trace = case
    covering = fws.worst_case(trace, like=state)
    used = [slot for slot in state.all_slots() if covering.capacity(slot)]
    if not used:
        return
    slot = data.draw(st.sampled_from(used), label="slot")
    smaller = _with_capacity(covering, {slot: max(covering.capacity(slot) - 256, 0)})
    shortfalls = fws.replay(smaller, trace)
    assert shortfalls and {s.slot for s in shortfalls} == {slot}
    first = shortfalls[0]
    assert first.capacity == smaller.capacity(slot) < first.needed <= covering.capacity(slot)
    assert first.growth[0] == (slot, first.needed)


@given(traced(growth="slot"), st.data())
def test_worst_case_is_minimal_one_byte_less_anywhere_is_reported(case, data):
    state, trace = case
    covering = fws.worst_case(trace, like=state)
    used = [slot for slot in state.all_slots() if covering.capacity(slot)]
    if not used:
        return
    slot = data.draw(st.sampled_from(used), label="slot")
    less = data.draw(st.integers(1, covering.capacity(slot)), label="bytes less")
    smaller = _with_capacity(covering, {slot: covering.capacity(slot) - less})
    assert [s.slot for s in fws.replay(smaller, trace)][:1] == [slot]


@given(traced(growth="ubatches"), st.data())
def test_under_ubatches_a_lane_256_bytes_smaller_is_reported_in_that_lane(case, data):
    state, trace = case
    covering = fws.worst_case(trace, like=state)
    lanes = [lane for lane in range(state.num_lanes) if covering.capacity((0, lane))]
    if not lanes:
        return
    lane = data.draw(st.sampled_from(lanes), label="lane")
    cap = covering.capacity((0, lane))
    smaller = _with_capacity(
        covering, {(u, lane): max(cap - 256, 0) for u in range(state.num_ubatches)}
    )
    shortfalls = fws.replay(smaller, trace)
    assert shortfalls and {s.slot[1] for s in shortfalls} == {lane}


@given(traced(), traced())
def test_worst_case_of_several_traces_covers_each_and_is_their_per_slot_maximum(one, other):
    state, a = one
    _, b = other
    b = fws.Trace(
        tuple(e for e in b if e.slot[0] < state.num_ubatches and e.slot[1] < state.num_lanes)
    )
    both = fws.worst_case(a, b, like=state)
    assert fws.replay(both, a) == fws.replay(both, b) == ()
    each = [fws.worst_case(t, like=state) for t in (a, b)]
    for slot in state.all_slots():
        assert both.capacity(slot) == max(s.capacity(slot) for s in each)


@given(traced(), st.integers(0, 4096))
def test_replay_counts_the_growths_an_unlocked_run_makes(case, start):
    """Each shortfall is one growth the core's own transitions make, run call by call."""
    state, trace = case
    state, _ = fws.reserve(state, [((start,), U8)])
    grown = 0
    live = state
    for e in trace:
        if e.kind == "acquire":
            live, layout = fws.acquire(live, e.slot, *[((n,), U8) for n in e.nbytes])
            grown += bool(layout.growth)
        elif e.kind == "retain":
            live, span, _ = fws.retain(live, e.slot, e.key, ((e.nbytes[0],), U8))
            grown += bool(span.growth)
        else:
            live = fws.claim(live, e.slot, e.key)[0]
    shortfalls = fws.replay(state, trace)
    assert len(shortfalls) == grown
    assert all(s.event.kind != "claim" for s in shortfalls)  # unlocked: keys are claimed


@given(traced())
def test_replay_is_pure(case):
    state, trace = case
    state = fws.lock(fws.claim(state, (0, 0), "a")[0])
    before, trace_hash = hash(state), hash(trace)
    first = fws.replay(state, trace)
    assert fws.replay(state, trace) == first
    assert hash(state) == before and hash(trace) == trace_hash


def test_a_locked_state_reports_each_new_key_once_and_knows_its_own():
    s = fws.lock(fws.claim(fws.initial_state(2), (0, 0), "old")[0])
    t = fws.Trace().claim((0, 0), "old").claim((0, 0), "new").claim((0, 0), "new")
    t = t.claim((1, 0), "old")  # claimed in another slot only
    found = fws.replay(s, t)
    assert [(x.index, x.slot, x.event.key) for x in found] == [
        (1, (0, 0), "new"),
        (3, (1, 0), "old"),
    ]
    assert fws.replay(fws.unlock(s), t) == ()


def test_a_key_read_back_by_repr_matches_the_live_key_it_was_written_from():
    live = (np.float32, "p20")  # as get_persistent's (torch.Tensor, key)
    s = fws.lock(fws.claim(fws.initial_state(), (0, 0), live)[0])
    t = fws.Trace().claim((0, 0), live)
    back = fws.Trace.from_json(t.to_json())
    assert back != t
    assert fws.replay(s, back) == fws.replay(s, t) == ()
    other = fws.Trace.from_json(fws.Trace().claim((0, 0), (np.int8, "p20")).to_json())
    assert len(fws.replay(s, other)) == 1


class _Layer:
    """Two of these are two keys with one ``repr`` (as two ``torch.nn.Linear(4, 4)``)."""

    def __repr__(self) -> str:
        return "Layer(4, 4)"


@pytest.mark.parametrize(
    "held, asked",
    [
        (_Layer(), _Layer()),
        (float("nan"), float("nan")),
        (("s", float("nan")), ("s", float("nan"))),
    ],
    ids=["same-repr", "nan", "nan-inside"],
)
def test_a_live_key_matches_by_equality_only_as_the_manager_looks_it_up(held, asked):
    """A trace never written to JSON holds the live keys: one the manager would not find
    (another object of the same repr, another NaN) is a shortfall, not covered."""
    state = fws.lock(fws.claim(fws.initial_state(), (0, 0), held)[0])
    assert len(fws.replay(state, fws.Trace().claim((0, 0), asked))) == 1
    assert fws.replay(state, fws.Trace().claim((0, 0), held)) == ()


def test_shortfalls_name_the_event_call_slot_bytes_and_capacity():
    s, _ = fws.reserve(fws.initial_state(2), [((512,), U8)])
    t = fws.Trace().acquire((1, 0), ((100,), U8)).acquire((1, 0), ((150,), F32))
    t = t.retain((1, 0), "kv", ((2000,), U8)).acquire((1, 0), ((150,), F32))
    (first, second) = fws.replay(fws.lock(s), t)
    assert (first.index, first.call, first.slot, first.needed, first.capacity) == (
        1, "get_simultaneous", (1, 0), 768, 512,
    )  # fmt: skip
    assert first.missing == 256 and first.growth == (((1, 0), 768),)
    assert (second.index, second.call, second.needed, second.capacity) == (
        2, "get_retained", 2000, 768,
    )  # fmt: skip  # the replay went on as if the slot had grown
    assert str(first) == (
        "event 1, get_simultaneous(600 B float32) in slot (1, 0): needs 768 B, finds 512 B "
        "(256 B short)"
    )
    assert "768 B" in first._repr_html_() and "256 B short" in first._repr_html_()


def test_under_ubatches_a_shortfall_grows_the_lane():
    s = fws.initial_state(2, growth="ubatches")
    (found,) = fws.replay(s, fws.Trace().acquire((1, 0), ((10,), U8)))
    assert found.growth == (((0, 0), 256), ((1, 0), 256))


def test_replay_ignores_the_capacity_limit_and_worst_case_applies_it():
    s = fws.initial_state(max_capacity=1024)
    t = fws.Trace().acquire((0, 0), ((4096,), U8))
    (found,) = fws.replay(s, t)
    assert found.needed == 4096
    with pytest.raises(fws.CapacityLimitError, match="4096 bytes"):
        fws.worst_case(t, like=s)


def test_worst_case_ignores_likes_capacities_lock_and_keys():
    like, _ = fws.reserve(fws.initial_state(), [((10_000,), U8)])
    like = fws.lock(fws.claim(like, (0, 0), "k")[0])
    t = fws.Trace().acquire((0, 0), ((10,), U8))
    assert fws.worst_case(t, like=like) == fws.worst_case(t, like=fws.initial_state())
    assert fws.worst_case(t, like=like).capacity((0, 0)) == 256


def test_a_slot_no_trace_uses_holds_nothing():
    s = fws.worst_case(fws.Trace().claim((1, 0), "k"), like=fws.initial_state(2))
    assert [x.capacity for x in s.slots] == [0, 0]


T = fws.Trace().acquire((0, 1), ((10,), U8))
S2 = fws.initial_state(1, 2)

BAD = [
    # id, call, error, fragments
    ("replay-state-not-state", lambda: fws.replay("s", T), fws.TraceTypeError, ["state", "'s'"]),
    ("replay-trace-not-trace", lambda: fws.replay(S2, [1]), fws.TraceTypeError, ["trace", "[1]"]),
    ("replay-other-config", lambda: fws.replay(fws.initial_state(), T), fws.TraceMismatchError,
     ["trace", "event 0", "slot (0, 1)", "1 lane(s)", "num_lanes >= 2"]),
    ("worst-no-trace", lambda: fws.worst_case(like=S2), fws.InvalidTraceError,
     ["at least one trace"]),
    ("worst-like-not-state", lambda: fws.worst_case(T, like=None), fws.TraceTypeError,
     ["like", "None"]),
    ("worst-second-not-trace", lambda: fws.worst_case(T, "t", like=S2), fws.TraceTypeError,
     ["traces[1]", "'t'"]),
    ("worst-other-config", lambda: fws.worst_case(fws.Trace(), T, like=fws.initial_state(3)),
     fws.TraceMismatchError, ["traces[1]", "event 0", "slot (0, 1)"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "error", "fragments"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_bad_inputs_are_refused_naming_the_argument(call, error, fragments):
    with pytest.raises(error) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_type_errors_are_type_errors_and_mismatches_value_errors():
    assert issubclass(fws.TraceTypeError, TypeError) and issubclass(fws.TraceTypeError, ValueError)
    assert issubclass(fws.TraceMismatchError, ValueError)
    assert not issubclass(fws.TraceMismatchError, TypeError)


def test_a_list_of_traces_is_refused_with_the_fix():
    with pytest.raises(fws.TraceTypeError, match=r"traces\[0\].*one by one: worst_case\(\*traces"):
        fws.worst_case([T, T], like=S2)


def test_under_ubatches_a_retain_that_grows_a_smaller_sibling_is_a_shortfall():
    s = fws.apply_plan(  # ubatch slots out of step, as a plan may leave them
        fws.initial_state(2, growth="ubatches"),
        fws.reserve(fws.initial_state(2), [((512,), U8)], [(0, 0)])[0],
    )[0]
    (found,) = fws.replay(s, fws.Trace().retain((0, 0), "k", ((300,), U8)))
    assert (found.slot, found.missing, found.growth) == ((0, 0), 0, (((1, 0), 300),))
    assert fws.retain(s, (0, 0), "k", ((300,), U8))[1].growth == found.growth  # as the core does


def test_a_shortfall_whose_slot_fits_names_the_slots_that_grow_with_it():
    """Under growth="ubatches" a retain whose own slot fits still grows its lane's other
    slots: the text said "(0 B short)", and named none of them."""
    data = fws.to_dict(fws.initial_state(num_ubatches=2, growth="ubatches"))
    data["slots"][1].update(capacity=1024, growths=1)  # (1, 0) holds 1 KiB, (0, 0) nothing
    state = fws.lock(fws.from_dict(data))
    (shortfall,) = fws.replay(state, fws.Trace().retain((1, 0), "kv", ((100,), np.uint8)))
    assert shortfall.missing == 0 and shortfall.growth == (((0, 0), 100),)
    for text in (str(shortfall), shortfall._repr_html_()):
        assert "0 B short" not in text and "slot (0, 0) grows with it to 100 B" in text


def test_views_of_2_63_bytes_are_refused_naming_the_trace_and_the_event():
    huge = fws.Trace().acquire((0, 0), ((2**62,), U8), ((2**62,), U8))
    with pytest.raises(fws.InvalidShapeError, match=r"^trace\.events\[0\]: .*2\*\*63"):
        fws.replay(fws.initial_state(), huge)
    with pytest.raises(fws.InvalidShapeError, match=r"^traces\[1\]\.events\[0\]: "):
        fws.worst_case(fws.Trace(), huge, like=fws.initial_state())
