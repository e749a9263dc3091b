"""Transitions keep the original's semantics exactly (seeds/000: get_simultaneous etc.)."""

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import functional_ws as fws
from functional_ws.fast_paths import fit, fit_plain, replay_acquire, replay_retain
from functional_ws.testing import spec_lists

U8, I8, F16, F32 = (np.dtype(n) for n in ("uint8", "int8", "float16", "float32"))
S = (0, 0)


def original_offsets(specs):
    """The original's algorithm: accumulate over sizes rounded up to 256."""
    nbytes = [int(np.prod(shape, dtype=np.int64)) * d.itemsize for shape, d in specs]
    aligned = [-(-n // 256) * 256 for n in nbytes]
    return list(itertools.accumulate([0, *aligned[:-1]]))[: len(specs)], sum(aligned)


@given(spec_lists(max_size=5))
def test_offsets_match_the_original(specs):
    state, layout = fws.acquire(fws.initial_state(), S, *specs)
    offsets, total = original_offsets(specs)
    assert list(layout.offsets) == offsets
    assert layout.total == total
    assert state.capacity(S) == total  # exact growth from empty
    assert layout.grow_to == (total if total else None)


def test_growth_is_exact_and_never_shrinks():
    s, layout = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    assert layout.growth == ((S, 1024),)
    s, layout = fws.acquire(s, S, ((10,), U8))
    assert layout.growth == () and s.capacity(S) == 1024
    s, layout = fws.acquire(s, S, ((3000,), U8))
    assert layout.growth == ((S, 3072),) and s.slots[0].growths == 2
    assert s.slots[0].high_water == 3072


def test_no_change_returns_the_same_object():
    s, _ = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    assert fws.acquire(s, S, ((10,), U8))[0] is s
    locked = fws.lock(s)
    assert fws.lock(locked) is locked and fws.unlock(s) is s


def test_retained_span_semantics():
    s, _ = fws.acquire(fws.initial_state(), S, ((1000,), U8))  # capacity 1024
    s, span, intact = fws.retain(s, S, "k", ((100,), U8))
    assert (span.offset, intact) == (768, False)  # round_down(1024 - 100, 256)
    s, span, intact = fws.retain(s, S, "k", ((100,), U8))
    assert intact
    s, _ = fws.acquire(s, S, ((768,), U8))  # ends exactly at the span: not a reach
    assert fws.retain(s, S, "k", ((100,), U8))[2]
    s2, _ = fws.acquire(s, S, ((769,), U8))  # reaches into it: dropped
    assert s2.slots[0].retained is None and not fws.retain(s2, S, "k", ((100,), U8))[2]
    assert not fws.retain(s, S, "other", ((100,), U8))[2]  # another key takes it over
    _s3, span3, intact3 = fws.retain(s, S, "k", ((2000,), U8))  # growth: reallocated
    assert span3.growth == ((S, 2000),) and not intact3 and span3.offset == 0


def test_a_retained_slot_remembers_the_latest_of_equal_keys():
    """The original stores the latest key at every retain: with an equal key of another
    make, the next comparison is with that one (np.float32(2**24) equals both 2**24 + 1
    and 2**24, which differ: the third call is not intact; np.int64(1) compared with a
    tuple raised). An interchangeable key (an equal str, int or tuple of them) changes
    nothing, not even the state object."""
    s, _ = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    answers = []
    for key in (np.float32(2**24), 2**24 + 1, 2**24):
        s, _, intact = fws.retain(s, S, key, ((100,), U8))
        answers.append(intact)
        assert s.slots[0].retained[0] is key
    assert answers == [False, True, False]
    s, _, _ = fws.retain(s, S, np.int64(1), ((100,), U8))
    s, _, intact = fws.retain(s, S, 1, ((100,), U8))
    assert intact and type(s.slots[0].retained[0]) is int
    assert not fws.retain(s, S, (1, 2), ((100,), U8))[2]  # raised comparing with np.int64
    for key, anew in ((("kv", 3), ("kv", int("3"))), (2.5, float("2.5"))):
        s, _, _ = fws.retain(s, S, key, ((100,), U8))
        again, _, intact = fws.retain(s, S, anew, ((100,), U8))
        assert intact and again is s


def test_interchangeable_keys_are_equal_values_of_one_plain_make():
    same = fws.fast_paths.interchangeable_keys
    # equal values made apart (a literal twice is one shared constant: `is` would pass)
    assert same("kv", "".join(["k", "v"])) and same(b"kv", bytes([107, 118]))
    assert same(("a", (1, b"x")), ("a", (int("1"), bytes([120])))) and same(None, None)
    assert same(int("1" * 30), 10**30 // 9)
    assert not same((np.int64(1), "kv"), (1, "kv"))  # every part, the first too
    assert not same(1, True) and not same(1, 1.0) and not same(np.int64(1), 1)
    assert same(np.float32(1.0), np.float32(1.0)) and same(float("2.5"), 2.5)  # one make
    assert not same(float("nan"), float("nan")) and not same(np.float32(1.0), 1.0)
    assert not same(("a", 1), ("a", np.int64(1))) and not same((1,), (1, 2))
    assert not same("a", "b")


def test_forget_retained_drops_only_that_keys_span_and_nothing_else():
    s, _ = fws.acquire(fws.initial_state(num_ubatches=2), S, ((1000,), U8))
    s, _, _ = fws.retain(s, S, "k", ((100,), U8))
    forgot = fws.forget_retained(s, S, "k")
    assert forgot.slots[0].retained is None and not fws.retain(forgot, S, "k", ((100,), U8))[2]
    assert dataclasses.replace(forgot.slots[0], retained=s.slots[0].retained) == s.slots[0]
    assert forgot.slots[1:] == s.slots[1:] and forgot.locked == s.locked
    assert fws.forget_retained(s, S, "other") is s  # another key's span is kept
    assert fws.forget_retained(s, (1, 0), "k") is s  # a slot retaining nothing
    with pytest.raises(fws.UbatchNotConfiguredError):
        fws.forget_retained(s, (5, 0), "k")


def test_same_start_with_another_size_counts_as_intact_like_the_original():
    s, _ = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    s, a, _ = fws.retain(s, S, "k", ((10,), U8))
    s, b, intact = fws.retain(s, S, "k", ((200,), U8))
    assert a.offset == b.offset == 768 and intact


def test_slots_are_independent_under_the_slot_policy():
    s = fws.initial_state(num_ubatches=2, num_lanes=2)
    s, layout = fws.acquire(s, (1, 1), ((64,), F32))
    assert layout.growth == (((1, 1), 256),)
    assert [s.capacity(x) for x in s.all_slots()] == [0, 0, 0, 256]


def test_ubatches_policy_grows_every_ubatch_of_the_lane():
    s = fws.initial_state(num_ubatches=3, num_lanes=2, growth="ubatches")
    s, _ = fws.retain(s, (2, 0), "k", ((10,), U8))[:2]
    s, layout = fws.acquire(s, (0, 0), ((1000,), U8))
    assert layout.growth == (((0, 0), 1024), ((1, 0), 1024), ((2, 0), 1024))
    assert [s.capacity(x) for x in s.all_slots()] == [1024, 0, 1024, 0, 1024, 0]
    assert s.slots[s.index((2, 0))].retained is None  # reallocated with the group


def test_lock_refuses_growth_with_sizes_and_keeps_state():
    s, _ = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    s = fws.lock(s)
    with pytest.raises(fws.WorkspaceLockedError) as info:
        fws.acquire(s, S, ((2 * 2**20,), U8))
    assert isinstance(info.value, AssertionError)
    assert "Workspace is locked" in str(info.value)
    assert "2.00 MB" in str(info.value) and "1024 bytes" in str(info.value)
    assert (info.value.required, info.value.current) == (2 * 2**20, 1024)
    with pytest.raises(AssertionError, match="Workspace is locked"):
        fws.retain(s, S, "k", ((2000,), U8))
    assert fws.acquire(s, S, ((1000,), U8))[0] is s  # what fits still works
    assert fws.acquire(fws.unlock(s), S, ((2000,), U8))[0].capacity(S) == 2048


def test_claim_persistent_keys():
    s, new = fws.claim(fws.initial_state(num_lanes=2), (0, 1), "w")
    assert new and s.slots[1].persistent_keys == frozenset({"w"})
    assert fws.claim(s, (0, 1), "w") == (s, False)
    locked = fws.lock(s)
    assert fws.claim(locked, (0, 1), "w") == (locked, False)
    with pytest.raises(AssertionError, match="was not allocated during warmup"):
        fws.claim(locked, (0, 0), "w")  # claimed per slot
    # A call admitted before the lock (the original checks it once, before the factory):
    admitted, new = fws.claim(locked, (0, 0), "w", admitted=True)
    assert new and admitted.locked and admitted.slots[0].persistent_keys == frozenset({"w"})


def test_reserve_worst_case_then_lock():
    s = fws.initial_state(num_ubatches=2, num_lanes=2)
    requests = [(((1024,), F16), ((3,), I8)), ((5000,), U8)]
    r, growth = fws.reserve(s, requests)
    assert {r.capacity(x) for x in r.all_slots()} == {5000}
    assert growth == tuple((x, 5000) for x in s.all_slots())
    locked = fws.lock(r)
    for slot in locked.all_slots():
        assert fws.acquire(locked, slot, ((1024,), F16), ((3,), I8))[1].growth == ()
    only, growth = fws.reserve(s, requests, slots=[(1, 0)])
    assert [only.capacity(x) for x in only.all_slots()] == [0, 0, 5000, 0]
    assert growth == (((1, 0), 5000),)
    assert fws.reserve(r, requests) == (r, ())
    assert fws.reserve(r, requests)[0] is r
    with pytest.raises(fws.WorkspaceLockedError):
        fws.reserve(fws.lock(s), requests)


def test_reserve_takes_a_bare_pair_exactly_and_a_one_view_call_padded():
    """A bare pair reserves its exact bytes (a retained span's need); ``[pair]`` is one
    call's views, padded as acquire pads: each then serves its call while locked."""
    s = fws.initial_state()
    bare, _ = fws.reserve(s, [((1000,), U8)])
    view, _ = fws.reserve(s, [[((1000,), U8)]])
    assert (bare.capacity(S), view.capacity(S)) == (1000, 1024)
    assert fws.acquire(fws.lock(view), S, ((1000,), U8))[1].growth == ()
    assert fws.retain(fws.lock(bare), S, "kv", ((1000,), U8))[1].growth == ()
    with pytest.raises(fws.WorkspaceLockedError):  # the view needs 1024
        fws.acquire(fws.lock(bare), S, ((1000,), U8))


def test_a_slot_grows_to_exactly_its_max_capacity_and_no_further():
    s = fws.initial_state(max_capacity=1024)
    grown, layout = fws.acquire(s, S, ((1000,), U8))
    assert grown.capacity(S) == 1024 and layout.growth == ((S, 1024),)
    assert fws.reserve(s, [[((1000,), U8)]])[0].capacity(S) == 1024
    assert fws.retain(s, S, "kv", ((1024,), U8))[0].capacity(S) == 1024
    for call in (
        lambda: fws.acquire(s, S, ((1025,), U8)),  # 1280 bytes
        lambda: fws.reserve(s, [((1025,), U8)]),
        lambda: fws.retain(s, S, "kv", ((1025,), U8)),
    ):
        with pytest.raises(fws.CapacityLimitError):
            call()


def test_a_plan_made_under_another_alignment_replays_as_the_full_transition():
    """A replay checks that the plan's alignment is the state's (else it plans anew)."""
    pair = ((10,), U8)
    _, layout = fws.acquire(fws.initial_state(alignment=256), S, pair, pair)
    _, span, _ = fws.retain(fws.initial_state(alignment=256), S, "kv", pair)
    other, _ = fws.acquire(fws.initial_state(alignment=512), S, ((2000,), U8))
    replayed = replay_acquire(other, layout)
    assert replayed == fws.acquire(other, S, pair, pair) and replayed[1].offsets == (0, 512)
    assert replay_retain(other, span) == fws.retain(other, S, "kv", pair)


def test_retain_in_an_unchanged_slot_keeps_the_growth_of_its_lanes_other_ubatches():
    """Under "ubatches", a retain whose own slot is as it was may still grow another
    ubatch slot of the lane (one left without a buffer): the state says so too."""
    s, _ = fws.acquire(fws.initial_state(num_ubatches=2, growth="ubatches"), S, ((1000,), U8))
    s = fws.after_failed_growth(s, s, {(1, 0): 0})  # the other ubatch lost its buffer
    s, _, _ = fws.retain(s, S, "kv", ((100,), U8))
    s = fws.after_failed_growth(s, s, {(1, 0): 0})  # and again, the span kept in (0, 0)
    after, span, intact = fws.retain(s, S, "kv", ((100,), U8))
    assert intact and span.growth == (((1, 0), 100),)
    assert after.capacity((1, 0)) == 100


def test_a_replay_hint_of_an_unlocked_state_is_not_returned_for_a_locked_one():
    s, layout = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    s, _, _ = fws.retain(s, S, "kv", ((100,), U8))
    hint, _ = replay_acquire(s, layout)  # the request drops the span
    replayed, _ = replay_acquire(fws.lock(s), layout, hint)
    assert replayed.locked and replayed == fws.acquire(fws.lock(s), S, ((1000,), U8))[0]


def test_a_failed_growth_that_gets_the_old_capacity_again_counts_an_allocation():
    s, _ = fws.acquire(fws.initial_state(), S, ((512,), U8))
    planned, _ = fws.acquire(s, S, ((10**6,), U8))
    restored = fws.after_failed_growth(s, planned, {S: 512})
    assert (restored.capacity(S), restored.slots[0].growths, restored.slots[0].retained) == (
        512,
        2,
        None,
    )


def test_a_negative_dim_is_a_negative_dim_error():
    with pytest.raises(fws.NegativeDimError, match="-1"):
        fws.acquire(fws.initial_state(), S, ((-1,), U8))


def test_lane_and_ubatch_errors():
    s = fws.initial_state(num_ubatches=2, num_lanes=2)
    with pytest.raises(RuntimeError, match="lane 2 is not configured"):
        fws.acquire(s, (0, 2), ((1,), U8))
    with pytest.raises(ValueError, match="non-negative"):
        fws.acquire(s, (0, -1), ((1,), U8))
    with pytest.raises(RuntimeError, match="ubatch 2 is not configured"):
        fws.acquire(s, (2, 0), ((1,), U8))
    with pytest.raises(IndexError):  # what the original raised for a bad ubatch
        fws.acquire(s, (2, 0), ((1,), U8))


def test_any_dtype_with_itemsize():
    class Fp8:
        itemsize = 1

    import jax.numpy as jnp

    _, layout = fws.acquire(
        fws.initial_state(), S, ((4,), Fp8()), ((4,), jnp.float32), ((4,), np.float64)
    )
    assert layout.nbytes == (4, 16, 32)


@st.composite
def reachable_states(draw):
    """States reached by random calls, with a retained span sometimes."""
    s = fws.initial_state(num_ubatches=2, num_lanes=1)
    for _ in range(draw(st.integers(0, 4))):
        slot = (draw(st.integers(0, 1)), 0)
        if draw(st.booleans()):
            s = fws.acquire(s, slot, *draw(spec_lists(max_size=2)))[0]
        else:
            s = fws.retain(s, slot, draw(st.sampled_from("ab")), draw(spec_lists(max_size=1))[0])[0]
    if draw(st.booleans()):
        s = fws.lock(s)
    return s


def _outcome(fn, *args):
    try:
        return fn(*args)
    except fws.WorkspaceLockedError as err:
        return ("refused", err.required, err.current)


@given(reachable_states(), reachable_states(), spec_lists(max_size=3), st.integers(0, 1))
def test_replay_acquire_equals_acquire(first, later, specs, ubatch):
    _, layout = _outcome(fws.acquire, fws.unlock(first), (ubatch, 0), *specs)
    assert _outcome(replay_acquire, later, layout) == _outcome(
        fws.acquire, later, (ubatch, 0), *specs
    )


@given(reachable_states(), reachable_states(), spec_lists(max_size=1), st.sampled_from("ab"))
def test_replay_retain_equals_retain(first, later, specs, key):
    _, span, _ = fws.retain(fws.unlock(first), (0, 0), key, specs[0])
    assert _outcome(replay_retain, later, span) == _outcome(
        fws.retain, later, (0, 0), key, specs[0]
    )


@given(reachable_states(), reachable_states(), spec_lists(max_size=3), st.integers(0, 1))
def test_a_replay_hint_changes_identity_never_value(first, later, specs, ubatch):
    _, layout = _outcome(fws.acquire, fws.unlock(first), (ubatch, 0), *specs)
    plain = _outcome(replay_acquire, later, layout)
    assert _outcome(replay_acquire, later, layout, first) == plain  # an unrelated hint
    if plain[0] != "refused" and plain[0] is not later and not plain[1].growth:
        again = replay_acquire(later, layout, plain[0])  # the result itself as the hint
        assert again[0] is plain[0] and again == plain


@given(reachable_states(), reachable_states(), spec_lists(max_size=1), st.sampled_from("ab"))
def test_a_retain_hint_changes_identity_never_value(first, later, specs, key):
    _, span, _ = fws.retain(fws.unlock(first), (0, 0), key, specs[0])
    plain = _outcome(replay_retain, later, span)
    assert _outcome(replay_retain, later, span, first) == plain
    if plain[0] != "refused" and plain[0] is not later and not plain[1].growth:
        again = replay_retain(later, span, plain[0])
        assert again[0] is plain[0] and again == plain


@given(reachable_states(), spec_lists(max_size=3), st.integers(0, 1))
def test_fit_is_acquire_in_plain_values(state, specs, ubatch):
    """``fit`` of the views' byte counts answers as ``acquire`` does, refusals included."""
    nbytes = [fws.ViewSpec.of(*spec).nbytes for spec in specs]
    planned = _outcome(fit, state, state.index((ubatch, 0)), nbytes)
    outcome = _outcome(fws.acquire, state, (ubatch, 0), *specs)
    if outcome[0] == "refused":
        assert planned == outcome
        return
    new, offsets, total, growth = planned
    layout = outcome[1]
    assert outcome[0] == new and (offsets, total, growth) == (
        layout.offsets,
        layout.total,
        layout.growth,
    )
    assert (new is state) == (outcome[0] is state)  # the identity protocol holds too


@given(reachable_states(), spec_lists(max_size=3), st.integers(0, 1))
def test_fit_plain_is_acquire_for_a_checked_request(state, specs, ubatch):
    """``fit_plain`` of a request the shell checked (tuple shapes of ints, their byte
    counts) plans what ``acquire`` plans: the same state, the same layout, refusals too."""
    checked = [fws.ViewSpec.of(*spec) for spec in specs]
    requests = tuple((spec.shape, spec.dtype) for spec in checked)
    nbytes = [spec.nbytes for spec in checked]
    planned = _outcome(fit_plain, state, state.index((ubatch, 0)), requests, nbytes)
    outcome = _outcome(fws.acquire, state, (ubatch, 0), *requests)
    if outcome[0] == "refused":
        assert planned == outcome
        return
    new, offsets, layout, growth = planned
    assert (new, layout) == outcome and (offsets, growth) == (layout.offsets, layout.growth)
    assert (new is state) == (outcome[0] is state)  # the identity protocol holds too


def test_fit_plain_plans_in_the_slot_at_its_index():
    s = fws.initial_state(num_ubatches=2, num_lanes=3)
    for index in range(6):
        new, _, layout, _ = fit_plain(s, index, (((4,), U8),), [4])
        assert (new, layout) == fws.acquire(s, s.slot_of(index), ((4,), U8))


@pytest.mark.parametrize("bad", [-1, 1.0, True, None, "8"])
def test_fit_refuses_a_byte_count_that_is_not_a_non_negative_int(bad):
    s = fws.initial_state()
    with pytest.raises(fws.InvalidSpecError, match="non-negative int"):
        fit(s, 0, [8, bad])
    assert fit(s, 0, [8, 0])[1:3] == ((0, 256), 256)  # zero bytes is a byte count


@pytest.mark.parametrize("bad", [-1, 1, True, 0.0, None, (0, 0)])
def test_fit_refuses_an_index_that_is_not_a_slots_position(bad):
    s = fws.initial_state()
    with pytest.raises(fws.InvalidSlotError, match="index must be a slot's position"):
        fit(s, bad, [8])


def test_fit_refuses_views_that_need_2_to_the_63_bytes_together():
    with pytest.raises(fws.InvalidSpecError, match="2\\*\\*63"):
        fit(fws.initial_state(), 0, [2**62, 2**62])
    pair = ((2**62,), U8)
    with pytest.raises(fws.InvalidSpecError, match=r"^caller's name: .*2\*\*63"):
        fit_plain(fws.initial_state(), 0, (pair, pair), [2**62, 2**62], "caller's name")


def test_a_hand_made_view_spec_cannot_lie_about_its_bytes():
    with pytest.raises(fws.InvalidSpecError, match="nbytes=16 does not match"):
        fws.ViewSpec((2**40,), U8, 1, 16)
    with pytest.raises(fws.InvalidSpecError, match="itemsize=2 does not match"):
        fws.ViewSpec((4,), U8, 2, 8)
    with pytest.raises(fws.InvalidSpecError, match="non-negative"):
        fws.ViewSpec((-1,), U8, 1, -1)
    spec = fws.ViewSpec((2**40,), U8, 1, 2**40)  # a consistent one is planned at its size
    s, layout = fws.acquire(fws.initial_state(), S, spec)
    assert layout.total == 2**40 and s.capacity(S) == 2**40


@given(
    reachable_states(),
    spec_lists(min_size=1, max_size=2),
    st.integers(0, 1),
    st.booleans(),
    st.booleans(),
)
def test_a_growth_empties_its_slots_then_installs_them_over_what_others_did(
    state, specs, ubatch, spread, lock_meanwhile
):
    """While a shell allocates, the growing slots hold nothing (``after_failed_growth`` with
    every held 0); ``rebase`` then puts them back as planned, keeping what other calls did
    meanwhile (a lock taken, other slots)."""
    state = fws.unlock(state)
    if spread:  # the "ubatches" policy: one request grows several slots
        state = dataclasses.replace(state, growth="ubatches")
    planned, layout = fws.acquire(state, (ubatch, 0), *specs)
    slots = [slot for slot, _ in layout.growth]
    bare = fws.after_failed_growth(state, planned, dict.fromkeys(slots, 0))
    for i, (before, after) in enumerate(zip(state.slots, bare.slots, strict=True)):
        if state.slot_of(i) in slots:
            assert after.capacity == 0 and after.retained is None
            assert after.high_water == before.high_water and after.growths == before.growths
        else:
            assert after is before
    if not slots:
        return  # no growth: nothing to install
    assert fws.rebase(bare, planned, bare) is planned
    current = fws.lock(bare) if lock_meanwhile else bare
    settled = fws.rebase(bare, planned, current)
    assert settled.locked is current.locked
    for i, after in enumerate(settled.slots):
        expected = planned.slots[i] if state.slot_of(i) in slots else current.slots[i]
        assert after is expected


@given(reachable_states(), st.data())
def test_rebase_merges_calls_in_different_slots_and_refuses_the_same_slot(state, data):
    """Two transitions planned on one state: installed one after the other, rebased, the
    result is what the second gives on the first's result; in one slot, ``None``."""
    state = fws.unlock(state)
    slots = state.all_slots()
    first_slot = data.draw(st.sampled_from(slots))
    second_slot = data.draw(st.sampled_from(slots))
    first_specs = data.draw(spec_lists(min_size=1, max_size=2))
    second_specs = data.draw(spec_lists(min_size=1, max_size=2))
    first = fws.acquire(state, first_slot, *first_specs)[0]
    second = fws.acquire(state, second_slot, *second_specs)[0]
    merged = fws.rebase(state, second, first)
    changes_first = first.slots != state.slots
    changes_second = second.slots != state.slots
    i, j = state.index(first_slot), state.index(second_slot)
    if i == j and changes_first and changes_second:
        assert merged is None
    else:
        assert merged == fws.acquire(first, second_slot, *second_specs)[0]
    assert fws.rebase(state, second, state) is second
    assert fws.rebase(state, state, first) is first  # nothing to put on it


@pytest.mark.parametrize("held", ["nothing", "old", "new"])
def test_a_failed_growth_keeps_the_slots_persistent_keys(held):
    state = fws.claim(fws.acquire(fws.initial_state(), (0, 0), ((512,), U8))[0], (0, 0), "k")[0]
    planned, _ = fws.acquire(state, (0, 0), ((4096,), U8))
    capacity = {"nothing": 0, "old": 512, "new": 4096}[held]
    after = fws.after_failed_growth(state, planned, {(0, 0): capacity})
    assert after.slots[0].persistent_keys == frozenset({"k"})
    assert after.capacity((0, 0)) == capacity
