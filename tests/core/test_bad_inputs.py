"""Every bad input: the documented error type, a message naming the argument and value,
and the input state left exactly as it was."""

import copy
import io
import re

import numpy as np
import pytest

import functional_ws as fws

U8 = np.dtype("uint8")
S = (0, 0)


def _base():
    s = fws.initial_state(num_ubatches=2, num_lanes=2)
    s, _ = fws.acquire(s, S, ((1000,), U8))
    s, _, _ = fws.retain(s, S, "kv", ((10,), U8))
    return fws.claim(s, S, "w")[0]


CASES = [
    # id, call(state), error type, fragments the message must contain
    ("negative-dim", lambda s: fws.acquire(s, S, ((-1,), U8)), ValueError, ["-1", "shape"]),
    ("float-dim", lambda s: fws.acquire(s, S, ((1.5,), U8)), ValueError, ["1.5", "shape"]),
    ("bool-dim", lambda s: fws.acquire(s, S, ((True,), U8)), ValueError, ["True", "shape"]),
    ("list-shape", lambda s: fws.acquire(s, S, ([3], U8)), ValueError, ["[3]", "shape"]),
    ("huge-dim-beside-zero", lambda s: fws.acquire(s, S, ((2**63, 0), U8)), ValueError,
     ["2**63", "elements"]),
    ("retain-extent-beside-zero", lambda s: fws.retain(s, S, "k", ((2**62, 4, 0), U8)),
     ValueError, ["2**63", "elements"]),
    ("int-shape", lambda s: fws.acquire(s, S, (3, U8)), ValueError, ["(3,)", "shape"]),
    ("no-itemsize", lambda s: fws.acquire(s, S, ((3,), "f4")), ValueError, ["'f4'", "dtype"]),
    ("zero-itemsize", lambda s: fws.acquire(s, S, ((3,), np.dtype("V0"))), ValueError, ["dtype"]),
    ("not-a-pair", lambda s: fws.acquire(s, S, ((3,),)), ValueError, ["specs[0]", "(3,)"]),
    ("second-spec", lambda s: fws.acquire(s, S, ((3,), U8), ((-2,), U8)), ValueError,
     ["specs[1]", "-2"]),
    ("overflow", lambda s: fws.acquire(s, S, ((2**62, 2), U8)), ValueError, ["2**63"]),
    ("overflow-sum", lambda s: fws.acquire(s, S, ((2**62,), U8), ((2**62,), U8)), ValueError,
     ["2**63"]),
    ("retain-bad-shape", lambda s: fws.retain(s, S, "kv", ((-5,), U8)), ValueError, ["-5"]),
    ("retain-unhashable-key", lambda s: fws.retain(s, S, ["k"], ((5,), U8)), ValueError,
     ["key", "['k']"]),
    ("claim-unhashable-key", lambda s: fws.claim(s, S, {"k": 1}), ValueError, ["key"]),
    ("lane-too-big", lambda s: fws.acquire(s, (0, 2), ((3,), U8)), RuntimeError,
     ["lane 2", "is not configured"]),
    ("negative-lane", lambda s: fws.acquire(s, (0, -1), ((3,), U8)), ValueError,
     ["lane", "non-negative", "-1"]),
    ("ubatch-too-big", lambda s: fws.acquire(s, (5, 0), ((3,), U8)), RuntimeError,
     ["ubatch 5", "is not configured"]),
    ("negative-ubatch", lambda s: fws.retain(s, (-1, 0), "k", ((3,), U8)), ValueError,
     ["ubatch", "non-negative"]),
    ("slot-not-pair", lambda s: fws.acquire(s, 0, ((3,), U8)), ValueError, ["slot", "0"]),
    ("bool-lane", lambda s: fws.acquire(s, (0, True), ((3,), U8)), ValueError, ["lane", "True"]),
    ("reserve-not-list", lambda s: fws.reserve(s, 5), ValueError, ["requests", "5"]),
    ("reserve-bad-request", lambda s: fws.reserve(s, [((3,), U8), "x"]), ValueError,
     ["requests[1]", "'x'"]),
    ("reserve-bad-slot", lambda s: fws.reserve(s, [((3,), U8)], slots=[(0, 9)]), RuntimeError,
     ["lane 9"]),
    ("locked-growth", lambda s: fws.acquire(fws.lock(s), S, ((4096,), U8)), AssertionError,
     ["Workspace is locked", "4096 bytes", "1024 bytes"]),
    ("locked-retain-growth", lambda s: fws.retain(fws.lock(s), S, "kv", ((4096,), U8)),
     AssertionError, ["Workspace is locked"]),
    ("locked-new-key", lambda s: fws.claim(fws.lock(s), S, "new"), AssertionError,
     ["'new'", "was not allocated during warmup"]),
    ("locked-reserve", lambda s: fws.reserve(fws.lock(s), [((9999,), U8)]), AssertionError,
     ["Workspace is locked"]),
]  # fmt: skip


@pytest.mark.parametrize(("call", "kind", "fragments"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_is_refused_and_state_kept(call, kind, fragments):
    state = _base()
    snapshot = copy.deepcopy(state)
    with pytest.raises(kind) as info:
        call(state)
    assert isinstance(info.value, fws.WorkspaceError)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert state == snapshot and hash(state) == hash(snapshot)


INIT_CASES = [
    ("zero-lanes", dict(num_lanes=0), ["num_lanes", "at least one", "0"]),
    ("zero-ubatches", dict(num_ubatches=0), ["num_ubatches", "at least one"]),
    ("float-lanes", dict(num_lanes=1.0), ["num_lanes", "1.0"]),
    ("alignment-not-power-of-two", dict(alignment=100), ["alignment", "100"]),
    ("alignment-zero", dict(alignment=0), ["alignment", "0"]),
    ("unknown-policy", dict(growth="all"), ["growth", "'all'"]),
]


@pytest.mark.parametrize(("kwargs", "fragments"), [c[1:] for c in INIT_CASES],
                         ids=[c[0] for c in INIT_CASES])  # fmt: skip
def test_bad_initial_state(kwargs, fragments):
    with pytest.raises(ValueError) as info:
        fws.initial_state(**kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)


def _maps(state):
    """A layout and a span of slot (0, 0), each in a dict as a manager keeps them."""
    state, layout = fws.acquire(state, (0, 0), ((4,), np.dtype("float32")))
    state, span, _ = fws.retain(state, (0, 0), "k", ((4,), np.dtype("float32")))
    return {(0, 0): layout}, {(0, 0): span}


class _NotAState:
    """What a notebook user passes by mistake: a manager, say."""


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (
            lambda s: fws.diff(_NotAState(), s),
            "diff compares two WorkspaceStates; a is a _NotAState",
        ),
        (lambda s: fws.diff(s, None), "b is a NoneType. For a manager, pass ws.state"),
        (lambda s: fws.render(_NotAState()), "render draws a WorkspaceState, got _NotAState"),
        (lambda s: fws.render_html(s, [1]), "layouts must map a slot to a Layout"),
        (lambda s: fws.render_html(s, {(0, 0): "x"}), "got a value of type str"),
        (lambda s: fws.render_html(s, None, {(0, 0): 3}), "spans must map a slot to a Span"),
        (lambda s: fws.plot(s, {(0, 0): "x"}), "layouts must map a slot to a Layout"),
        (
            lambda s: fws.render_html(s, _maps(s)[1], _maps(s)[0]),
            "layouts must map a slot to a Layout (a manager keeps them as ws.last_layouts), got "
            "a value of type Span (layouts and spans swapped?)",
        ),
        (lambda s: fws.plot(s, None, _maps(s)[0]), "spans must map a slot to a Span"),
        (
            lambda s: fws.display.timeline_html([s, _NotAState()]),
            "a timeline draws a WorkspaceState",
        ),
    ],
)
def test_a_display_given_the_wrong_object_names_what_to_pass(call, fragment):
    """These raised AttributeError from inside the drawing ("'str' object has no attribute
    'total'")."""
    with pytest.raises(TypeError, match=re.escape(fragment)):
        call(fws.initial_state())


def test_a_dtype_whose_name_reads_as_mathtext_plots():
    """A legend label went to matplotlib's maths-text parser (a ValueError from
    tight_layout for a structured dtype whose field is named '$^$')."""
    import matplotlib

    matplotlib.use("Agg")
    odd = np.dtype([("$^$", "f4")])
    s, layout = fws.acquire(fws.initial_state(), (0, 0), ((4,), odd))
    fig = fws.plot(s, {(0, 0): layout})
    fig.savefig(io.BytesIO(), format="png")
