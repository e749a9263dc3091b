"""The kits' strategies and profiles check their arguments when called, naming them.

Hypothesis builds strategies lazily, so without these checks a bad argument surfaces only at
the first draw, in Hypothesis's words about its own arguments. One table, readable ids.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import find, settings

from functional_ws.testing import (
    dtypes,
    keys,
    register_profiles,
    shapes,
    slots,
    spec_lists,
    specs,
    states,
)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: slots(0, 1), ValueError,
         r"^slots\(num_ubatches=0\): num_ubatches must be at least 1$"),
        (lambda: slots(1, -2), ValueError, r"^slots\(num_lanes=-2\): num_lanes must be at least 1"),
        (lambda: slots(1.0, 1), TypeError,
         r"^slots\(num_ubatches=1.0\): num_ubatches must be an int, not float$"),
        (lambda: slots(True, 1), TypeError, r"num_ubatches must be an int, not bool"),
        (lambda: shapes(max_dims=-1), ValueError,
         r"^shapes\(max_dims=-1\): max_dims must be at least 0$"),
        (lambda: shapes(max_side="4"), TypeError, r"^shapes\(max_side='4'\): max_side must be"),
        (lambda: shapes(min_side=5, max_side=2), ValueError,
         r"^shapes\(min_side=5, max_side=2\): min_side must not exceed max_side$"),
        (lambda: keys(()), ValueError, r"^keys\(names=\(\)\): names must not be empty$"),
        (lambda: keys("abc"), TypeError,
         r"^keys\(names='abc'\): names must be a sequence such as a tuple or list, not str$"),
        (lambda: keys([["a"]]), TypeError,
         r"^keys\(names=\[\['a'\]\]\): names\[0\]=\['a'\] is not hashable$"),
        (lambda: keys({"a", "b"}), TypeError, r"names must be a sequence .* not set"),
        (lambda: dtypes([]), ValueError, r"^dtypes\(pool=\[\]\): pool must not be empty$"),
        (lambda: dtypes(["int8"]), TypeError, r"pool\[0\]='int8' is not a dtype"),
        (lambda: specs(dtype_pool=[np.dtype("int8"), 4]), TypeError,
         r"^dtypes\(pool=.*\): pool\[1\]=4 is not a dtype"),
        (lambda: specs(max_dims=-1), ValueError, r"^shapes\(max_dims=-1\)"),
        (lambda: spec_lists(min_size=3, max_size=1), ValueError,
         r"^spec_lists\(min_size=3, max_size=1\): min_size must not exceed max_size$"),
        (lambda: spec_lists(min_size=-1), ValueError, r"^spec_lists\(min_size=-1\)"),
        (lambda: spec_lists(max_side=-3), ValueError, r"^shapes\(max_side=-3\)"),
        (lambda: register_profiles(ci="same", dev="same"), ValueError, r"the names must differ"),
        (lambda: register_profiles(ci=""), TypeError, r"ci must be a profile name"),
        (lambda: register_profiles(load=3), TypeError, r"load must be a profile name or None"),
        (lambda: states(0), ValueError, r"^states\(num_ubatches=0\): num_ubatches must be"),
        (lambda: states(max_steps=-1), ValueError, r"^states\(max_steps=-1\)"),
        (lambda: states(2**9, 2**8), ValueError, r"^states\(num_ubatches=512, num_lanes=256\)"),
    ],
    ids=["slots-zero-ubatches", "slots-negative-lanes", "slots-float", "slots-bool",
         "shapes-negative-dims", "shapes-str-side", "shapes-min-over-max", "keys-empty",
         "keys-a-string", "keys-unhashable", "keys-a-set", "dtypes-empty", "dtypes-a-name",
         "specs-bad-dtype", "specs-negative-dims", "spec-lists-min-over-max",
         "spec-lists-negative-min", "spec-lists-bad-shape-argument", "profiles-same-names",
         "profiles-empty-name", "profiles-load-not-a-name", "states-zero-ubatches",
         "states-negative-steps", "states-too-many-slots"],
)  # fmt: skip
def test_bad_arguments_are_refused_when_called(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_good_arguments_still_build_strategies():
    assert find(shapes(max_dims=0, max_side=0), lambda shape: True) == ()
    assert find(shapes(min_side=1), lambda shape: len(shape) == 2) == (1, 1)
    assert find(slots(1, 1), lambda slot: True) == (0, 0)
    assert find(keys(["only"]), lambda key: True) == "only"


def test_profiles_are_registered_and_loaded_by_name():
    previous = settings.default
    try:
        profiles = register_profiles(ci="kit-ci", dev="kit-dev", load="kit-ci")
        assert set(profiles) == {"kit-ci", "kit-dev"}
        assert settings.default.derandomize is True
        assert settings.default.max_examples == 60
        assert settings.get_profile("kit-dev").max_examples == 1000
        assert settings.get_profile("kit-dev").derandomize is False
    finally:
        settings.register_profile("restored", previous)
        settings.load_profile("restored")


def test_profiles_do_not_inherit_the_profile_loaded_at_import():
    # Hypothesis loads its own derandomized "ci" profile where the CI variable is set; the
    # kit's dev profile must still be random and keep the example database.
    code = (
        "from functional_ws.testing._profiles import CI, DEV;"
        "print(CI.derandomize, CI.database is None, DEV.derandomize, DEV.database is None)"
    )
    env = {**os.environ, "CI": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["True", "True", "False", "False"]
