"""Plans: JSON round trip, and refusal of malformed plans."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import functional_ws as fws
from functional_ws.testing import spec_lists, states

U8 = np.dtype("uint8")


def _forget_live(state):
    return dataclasses.replace(
        state,
        slots=tuple(
            dataclasses.replace(s, retained=None, persistent_keys=frozenset()) for s in state.slots
        ),
        max_capacity=None,
    )


@settings(max_examples=300)  # pure transitions: cheap, and a lost buffer is one state in three
@given(states(num_ubatches=2, num_lanes=2))
def test_every_state_the_core_reaches_round_trips(state):
    """Failed growths and growths in flight included (issue 29, item 9: a slot without a
    buffer keeps its high-water mark, which ``from_dict`` refused above the capacity)."""
    restored = fws.from_dict(json.loads(json.dumps(fws.to_dict(state))))
    assert restored == _forget_live(state)
    fresh = fws.initial_state(2, 2, alignment=state.alignment)
    applied, _ = fws.apply_plan(fresh, restored)
    for planned, slot in zip(restored.slots, applied.slots, strict=True):
        assert slot.capacity == max(planned.capacity, planned.high_water)
    assert applied.locked == state.locked


@pytest.mark.parametrize(
    "field, value", [("num_ubatches", 2), ("num_lanes", 2), ("alignment", 512)]
)
def test_a_plan_made_for_another_configuration_is_refused_naming_the_field(field, value):
    made_for = fws.initial_state(**{field: value})
    plan, _ = fws.acquire(made_for, (0, 0), ((1000,), U8))
    state = fws.initial_state()
    with pytest.raises(fws.InvalidPlanError, match=f"{field}={value}") as info:
        fws.apply_plan(state, plan)
    assert f"{field}={getattr(state, field)}" in str(info.value)


@pytest.mark.parametrize("held", [0, 512], ids=["nothing-held", "old-capacity-again"])
def test_a_failed_growth_and_a_growth_in_flight_read_back(held):
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((500,), U8))
    planned, _ = fws.acquire(s, (0, 0), ((4096,), U8))
    in_flight = fws.after_failed_growth(s, planned, {(0, 0): 0})  # its buffer released
    for state in (fws.after_failed_growth(s, planned, {(0, 0): held}), in_flight):
        restored = fws.from_dict(fws.to_dict(fws.lock(state)))
        assert restored.slots[0].high_water == 512
        applied, growth = fws.apply_plan(fws.initial_state(), restored)
        assert growth == (((0, 0), 512),) and applied.locked  # the warm-up's size again


@given(spec_lists(max_size=3), st.booleans(), st.sampled_from(["slot", "ubatches"]))
def test_round_trip_through_json(specs, locked, growth):
    s = fws.initial_state(num_ubatches=2, num_lanes=2, growth=growth)
    s, _ = fws.acquire(s, (1, 1), *specs)
    s, _, _ = fws.retain(s, (0, 1), "kv", ((7,), U8))
    s, _ = fws.claim(s, (0, 0), "w")
    if locked:
        s = fws.lock(s)
    data = json.loads(json.dumps(fws.to_dict(s)))
    restored = fws.from_dict(data)
    assert restored == _forget_live(s)
    assert fws.from_dict(fws.to_dict(_forget_live(s))) == _forget_live(s)


BAD_PLANS = [
    ("not-a-dict", lambda d: [d], ["dict"]),
    ("wrong-format", lambda d: {**d, "format": "x"}, ["format"]),
    ("missing-lanes", lambda d: {k: v for k, v in d.items() if k != "num_lanes"}, ["num_lanes"]),
    ("negative-capacity", lambda d: {**d, "slots": [{**d["slots"][0], "capacity": -1}]},
     ["capacity", "-1"]),
    ("too-few-slots", lambda d: {**d, "slots": []}, ["slots"]),
    ("bad-lane", lambda d: {**d, "slots": [{**d["slots"][0], "lane": 3}]}, ["['lane']", "3"]),
    ("locked-not-bool", lambda d: {**d, "locked": "yes"}, ["locked", "'yes'"]),
    ("high-water-without-growth",
     lambda d: {**d, "slots": [{**d["slots"][0], "capacity": 0, "growths": 0}]},
     ["high_water 256", "growths 0"]),
    ("unknown-field", lambda d: {**d, "max_capacity": 1 << 20}, ["plan has", "'max_capacity'"]),
    ("unknown-slot-field", lambda d: {**d, "slots": [{**d["slots"][0], "retained": 7}]},
     ["plan['slots'][0]", "'retained'"]),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "fragments"), [c[1:] for c in BAD_PLANS],
                         ids=[c[0] for c in BAD_PLANS])  # fmt: skip
def test_bad_plans_name_the_field(mutate, fragments):
    data = fws.to_dict(fws.acquire(fws.initial_state(), (0, 0), ((9,), U8))[0])
    with pytest.raises((ValueError, RuntimeError)) as info:
        fws.from_dict(mutate(data))
    for fragment in fragments:
        assert fragment in str(info.value)
