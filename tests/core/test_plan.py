"""Plans: JSON round trip, and refusal of malformed plans."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import functional_ws as fws
from functional_ws.testing import spec_lists

U8 = np.dtype("uint8")


def _forget_live(state):
    return dataclasses.replace(
        state,
        slots=tuple(
            dataclasses.replace(s, retained=None, persistent_keys=frozenset()) for s in state.slots
        ),
    )


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
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "fragments"), [c[1:] for c in BAD_PLANS],
                         ids=[c[0] for c in BAD_PLANS])  # fmt: skip
def test_bad_plans_name_the_field(mutate, fragments):
    data = fws.to_dict(fws.acquire(fws.initial_state(), (0, 0), ((9,), U8))[0])
    with pytest.raises((ValueError, RuntimeError)) as info:
        fws.from_dict(mutate(data))
    for fragment in fragments:
        assert fragment in str(info.value)
