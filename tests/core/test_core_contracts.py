"""Contracts the rest of tests/core leaves unchecked (found by planting bugs in the core)."""

from __future__ import annotations

import numpy as np
import pytest

import functional_ws as fws

U8 = np.dtype("uint8")
S = (0, 0)


def test_rebase_installs_a_lock_or_unlock_the_transition_made():
    """The lock, like a slot, is ``new``'s where the transition changed it and ``current``
    still has ``old``'s."""
    s = fws.initial_state(num_ubatches=2)
    meanwhile = fws.acquire(s, (1, 0), ((10,), U8))[0]
    merged = fws.rebase(s, fws.lock(s), meanwhile)
    assert merged.locked and merged.slots == meanwhile.slots
    locked = fws.lock(s)
    meanwhile = fws.acquire(fws.unlock(locked), (1, 0), ((10,), U8))[0]
    meanwhile = fws.lock(meanwhile)  # still locked, as old was, with another slot changed
    merged = fws.rebase(locked, fws.unlock(locked), meanwhile)
    assert not merged.locked and merged.slots == meanwhile.slots


def test_after_failed_growth_keeps_what_other_calls_did_meanwhile():
    """``current``: the untouched slots and the workspace-wide fields are ``current``'s."""
    s = fws.initial_state(num_ubatches=2)
    planned, _ = fws.acquire(s, (0, 0), ((1000,), U8))
    current = fws.lock(fws.acquire(s, (1, 0), ((10,), U8))[0])
    after = fws.after_failed_growth(s, planned, {(0, 0): 0}, current=current)
    assert after.locked
    assert after.slots[1] is current.slots[1] and after.capacity((1, 0)) == 256
    assert after.capacity((0, 0)) == 0 and after.slots[0].high_water == 0
    assert fws.after_failed_growth(s, planned, {(0, 0): 0}).slots[1] is s.slots[1]


def test_a_plan_naming_a_lane_out_of_range_is_refused_not_read_as_another_slot():
    """Slot ``(0, 1)`` of a one-lane plan must not be read as slot ``(1, 0)``."""
    data = fws.to_dict(fws.initial_state(num_ubatches=2))
    data["slots"][1] = {**data["slots"][1], "ubatch": 0, "lane": 1}
    with pytest.raises(fws.InvalidPlanError, match=r"\['lane'\]"):
        fws.from_dict(data)
    data = fws.to_dict(fws.initial_state(num_lanes=2))
    data["slots"][1] = {**data["slots"][1], "ubatch": 1, "lane": 0}
    with pytest.raises(fws.InvalidPlanError, match=r"\['ubatch'\]"):
        fws.from_dict(data)


def test_a_workspace_may_have_exactly_max_slots_slots():
    assert len(fws.initial_state(num_ubatches=2**8, num_lanes=2**8).slots) == 2**16
    with pytest.raises(fws.InvalidConfigError, match="65536"):
        fws.initial_state(num_ubatches=2**8 + 1, num_lanes=2**8)


@pytest.mark.parametrize("shape", [(2**63,), (2**62, 2)])
def test_a_retained_span_of_2_to_the_63_bytes_is_refused_before_any_growth(shape):
    """A view of ``2**63`` bytes is refused by its spec, not only by the layout rule: a
    retain (no padding) and a bare reservation must not plan a buffer that large."""
    s = fws.initial_state()
    with pytest.raises(fws.InvalidSpecError, match="2\\*\\*63"):
        fws.retain(s, S, "k", (shape, U8))
    with pytest.raises(fws.InvalidSpecError, match="2\\*\\*63"):
        fws.reserve(s, [(shape, U8)])
    with pytest.raises(fws.InvalidSpecError, match="2\\*\\*63"):
        fws.ViewSpec.of(shape, U8)


@pytest.mark.parametrize("locked", [False, True])
def test_replay_retain_equals_retain_when_another_ubatch_slot_lost_its_buffer(locked):
    """``replay_retain`` promises ``retain``'s result for every state; under "ubatches" a
    retain whose own slot fits still grows (or, locked, is refused for) a bare ubatch slot
    of its lane (``test_retain_in_an_unchanged_slot_keeps_the_growth_of_its_lanes_other_
    ubatches``)."""
    from functional_ws.fast_paths import replay_retain

    s = fws.initial_state(num_ubatches=2, growth="ubatches")
    s, _ = fws.acquire(s, S, ((1000,), U8))
    s, span, _ = fws.retain(s, S, "kv", ((100,), U8))
    s = fws.after_failed_growth(s, s, {(1, 0): 0})  # the other ubatch lost its buffer
    if locked:
        s = fws.lock(s)
        with pytest.raises(fws.WorkspaceLockedError):
            fws.retain(s, S, "kv", ((100,), U8))
        with pytest.raises(fws.WorkspaceLockedError):
            replay_retain(s, span.without_growth())
    else:
        assert replay_retain(s, span.without_growth()) == fws.retain(s, S, "kv", ((100,), U8))


def test_apply_plan_grows_each_slot_to_its_own_capacity_under_the_ubatches_policy():
    """The plan already says what every slot needs: the policy does not spread it."""
    fresh = fws.initial_state(num_ubatches=2, growth="ubatches")
    warm, _ = fws.acquire(fresh, S, ((1000,), U8))
    plan = fws.after_failed_growth(warm, warm, {(1, 0): 0})  # (1, 0): nothing served
    plan = fws.from_dict(fws.to_dict(plan))
    applied, growth = fws.apply_plan(fresh, plan)
    assert growth == ((S, 1024),)
    assert applied.capacity(S) == 1024 and applied.capacity((1, 0)) == 0


@pytest.mark.parametrize("held", [1, 256, 1023, 2048])
def test_after_failed_growth_refuses_a_capacity_that_is_none_of_the_three(held):
    s, _ = fws.acquire(fws.initial_state(), S, ((512,), U8))
    planned, _ = fws.acquire(s, S, ((1024,), U8))
    with pytest.raises(ValueError, match="held"):
        fws.after_failed_growth(s, planned, {S: held})


def test_rebase_refuses_when_both_sides_changed_the_lock():
    s = fws.initial_state(num_ubatches=2)
    meanwhile = fws.lock(fws.acquire(s, (1, 0), ((10,), U8))[0])
    assert fws.rebase(s, fws.lock(s), meanwhile) is None


def test_diff_names_every_slot_field_that_changed():
    s, _ = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    retained, _, _ = fws.retain(s, S, "kv", ((100,), U8))
    assert [(c.slot, c.field, c.before, c.after) for c in fws.diff(s, retained)] == [
        (S, "retained", None, ("kv", 768))
    ]
    claimed, _ = fws.claim(s, S, "w")
    assert [(c.field, c.after) for c in fws.diff(s, claimed)] == [
        ("persistent_keys", frozenset({"w"}))
    ]


def test_a_plan_with_a_capacity_and_no_growth_is_refused():
    data = fws.to_dict(fws.acquire(fws.initial_state(), S, ((9,), U8))[0])
    data["slots"][0] = {**data["slots"][0], "high_water": 0, "growths": 0}
    with pytest.raises(fws.InvalidPlanError, match="capacity 256 but growths 0"):
        fws.from_dict(data)


def test_layout_of_draws_a_request_a_locked_slot_could_not_hold():
    """A layout depends on the state only through its alignment: no growth, no lock."""
    locked = fws.lock(fws.initial_state(alignment=512))
    layout = fws.fast_paths.layout_of(locked, S, [((10,), U8), ((600,), U8)])
    assert (layout.offsets, layout.total, layout.growth) == ((0, 512), 1536, ())


def test_forget_retained_matches_an_equal_key_not_only_the_same_object():
    s, _ = fws.acquire(fws.initial_state(), S, ((1000,), U8))
    s, _, _ = fws.retain(s, S, ("c4", int("7")), ((100,), U8))
    forgot = fws.forget_retained(s, S, ("c4", 7))
    assert forgot.slots[0].retained is None
    assert not fws.retain(forgot, S, ("c4", 7), ((100,), U8))[2]


def test_a_span_whose_own_slot_does_not_grow_has_no_grow_to():
    """Under "ubatches" a retain may grow only another ubatch slot of its lane."""
    s, _ = fws.acquire(fws.initial_state(num_ubatches=2, growth="ubatches"), S, ((1000,), U8))
    s = fws.after_failed_growth(s, s, {(1, 0): 0})
    _, span, _ = fws.retain(s, S, "kv", ((100,), U8))
    assert span.growth == (((1, 0), 100),) and span.grow_to is None
    _, span, _ = fws.retain(s, (1, 0), "kv", ((100,), U8))
    assert span.growth == (((1, 0), 100),) and span.grow_to == 100


def test_a_capacity_limit_refusal_names_the_limit_as_the_states_max_capacity():
    """The core's limit is whatever ``max_capacity`` says (the caller's own in pure
    planning): the message names that field, and the torch shell's use of it as a note."""
    state = fws.initial_state(max_capacity=512)
    with pytest.raises(fws.CapacityLimitError) as caught:
        fws.worst_case(fws.Trace().acquire(S, ((1000,), U8)), like=state)
    message = str(caught.value)
    assert "limit of 512 bytes" in message and "max_capacity" in message, message
    assert "(0.00 GiB, the device's total memory)" not in message, message
    assert (caught.value.required, caught.value.limit, caught.value.slot) == (1024, 512, S)


@pytest.mark.parametrize("held", [512.0, np.int64(512), True], ids=["float", "numpy", "bool"])
def test_after_failed_growth_refuses_a_capacity_that_is_not_an_int(held):
    """A capacity equal to the old one but of another type made a state that ``to_dict``
    could not save (a float, a NumPy int): refused at once, naming ``held``."""
    s, _ = fws.acquire(fws.initial_state(), S, ((512,), U8))
    planned, _ = fws.acquire(s, S, ((1024,), U8))
    with pytest.raises(ValueError, match=r"held\[\(0, 0\)\] must be an int"):
        fws.after_failed_growth(s, planned, {S: held})


@pytest.mark.parametrize(
    "plan", [{"num_ubatches": 1}, None, "plan.json"], ids=["dict", "none", "path"]
)
def test_apply_plan_refuses_what_is_not_a_state_naming_from_dict(plan):
    """``apply_plan(state, json.load(f))`` (the plan not read back with ``from_dict``) raised
    a bare ``AttributeError``."""
    with pytest.raises(fws.InvalidPlanError, match="from_dict") as caught:
        fws.apply_plan(fws.initial_state(), plan)
    assert type(plan).__name__ in str(caught.value)
