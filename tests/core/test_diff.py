"""``diff``: two states differ exactly where ``diff`` says, workspace-wide fields included."""

import dataclasses

import numpy as np

import functional_ws as fws


def test_states_that_differ_only_in_the_capacity_limit_diff_as_different():
    a, b = fws.initial_state(), fws.initial_state(max_capacity=1024)
    assert a != b
    changes = fws.diff(a, b)
    assert [(c.slot, c.field, c.before, c.after) for c in changes] == [
        (None, "max_capacity", None, 1024)
    ]
    assert str(changes) != "no differences"


def test_every_workspace_wide_field_is_compared():
    base = fws.initial_state(num_ubatches=2)
    changed = {
        "num_ubatches": 3,
        "num_lanes": 2,
        "alignment": 512,
        "growth": "ubatches",
        "locked": True,
        "max_capacity": 4096,
    }
    fields = {f.name for f in dataclasses.fields(fws.WorkspaceState)} - {"slots"}
    assert set(changed) == fields  # a new field must be added here (and is then compared)
    for name, value in changed.items():
        other = dataclasses.replace(base, **{name: value})
        assert name in {c.field for c in fws.diff(base, other)}, name


def test_equal_states_have_no_differences():
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((8,), np.dtype("uint8")))
    assert len(fws.diff(s, s)) == 0 and str(fws.diff(s, s)) == "no differences"
