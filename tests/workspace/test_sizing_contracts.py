"""Sizing's contracts a planted-bug round found unchecked: keys read back from JSON that
replay as written, what a shortfall and a worst case hold, what a recording keeps, and what
a search returns. (In tests/workspace/: it uses the torch shell as well as the core.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import functional_ws as fws
from functional_ws.testing import _search, find_shortfall
from interop import WorkspaceManager, use_workspace_ubatch

U8, F32 = np.dtype("uint8"), torch.float32


def _locked_holding(*keys):
    state = fws.initial_state()
    for key in keys:
        state = fws.claim(state, (0, 0), key)[0]
    return fws.lock(state)


def _read_back(key):
    return fws.Trace.from_json(fws.Trace().claim((0, 0), key).to_json())


# ----- keys read back from JSON replay as the keys written -----


def test_a_read_back_tuple_key_does_not_match_a_longer_held_key():
    """(np.float32, "p") is not the held (np.float32, "p", 2): a locked manager refuses it,
    and so must the replay of the trace read back."""
    state = _locked_holding((np.float32, "p", 2))
    written = fws.Trace().claim((0, 0), (np.float32, "p"))
    back = _read_back((np.float32, "p"))
    assert len(fws.replay(state, written)) == len(fws.replay(state, back)) == 1


def test_a_key_with_a_repr_part_nested_in_a_tuple_replays_as_written():
    """The ReprKey may sit in a tuple inside the tuple: (("w", np.float32), 3)."""
    live = (("w", np.float32), 3)
    back = _read_back(live)
    assert isinstance(back.events[0].key[0][1], fws.ReprKey)
    state = _locked_holding(live)
    assert fws.replay(state, back) == fws.replay(state, fws.Trace().claim((0, 0), live)) == ()


def test_a_numpy_bool_key_reads_back_as_the_plain_bool_and_replays_as_written():
    for live, held in [
        (np.bool_(True), True),
        (("flag", np.bool_(False)), ("flag", False)),
    ]:
        back = _read_back(live)
        assert back.events[0].key == held and type(back.events[0].key) is type(held)
        state = _locked_holding(held)
        assert fws.replay(state, back) == fws.replay(state, fws.Trace().claim((0, 0), live)) == ()


@pytest.mark.skipif(
    np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps,
    reason="np.longdouble is float64 on this platform",
)
def test_a_numpy_float_that_no_python_float_equals_is_not_narrowed():
    """float(x) != x for a long double: written as the float it would read back as a key
    the manager does not hold."""
    live = np.longdouble(1) + np.longdouble(2) ** -60
    back = _read_back(live)
    assert back.events[0].key != 1.0
    state = _locked_holding(live)
    assert fws.replay(state, back) == fws.replay(state, fws.Trace().claim((0, 0), live)) == ()


class _ReprRaises:
    def __repr__(self):
        raise RuntimeError("no repr")


class _SpelledAsThree:
    def __repr__(self):
        return "3"


def test_a_repr_key_is_matched_by_its_json_spelling_not_by_repr():
    """A held key whose repr raises does not break the replay of a read-back claim; a
    read-back key whose text is a plain key's repr is not that plain key."""
    back = _read_back(np.float32)
    state = _locked_holding(_ReprRaises())
    (found,) = fws.replay(state, back)
    assert found.index == 0
    three = _read_back(_SpelledAsThree())
    assert three.events[0].key == fws.ReprKey("3")
    assert len(fws.replay(_locked_holding(3), three)) == 1  # 3 is not the object spelled "3"


# ----- malformed keys in JSON are refused naming the field -----


def _claim_doc(key_text):
    return (
        '{"format": "functional-ws/trace", "version": 1, "events": '
        '[{"kind": "claim", "slot": [0, 0], "key": ' + key_text + "}]}"
    )


@pytest.mark.parametrize("key_text", ["NaN", "Infinity", "-Infinity", '{"tuple": [NaN]}'])
def test_a_key_json_has_no_spelling_for_is_refused(key_text):
    """Python's json reads NaN and Infinity, which to_json never writes (a non-finite key
    goes by repr): a trace holding one is malformed."""
    with pytest.raises(fws.InvalidTraceError, match=r"\['key'\]"):
        fws.Trace.from_json(_claim_doc(key_text))


@pytest.mark.parametrize("value", [5, None, ["x"]], ids=["int", "null", "list"])
def test_a_repr_key_that_is_not_text_is_refused_naming_the_field(value):
    with pytest.raises(fws.InvalidTraceError, match=r"trace\['events'\]\[0\]\['key'\]"):
        fws.Trace.from_json(_claim_doc(json.dumps({"repr": value})))


# ----- what a shortfall and a worst case hold -----


def test_a_key_shortfall_reports_the_capacity_its_slot_holds():
    state, _ = fws.reserve(fws.initial_state(), [((768,), U8)])
    (found,) = fws.replay(fws.lock(state), fws.Trace().claim((0, 0), "new"))
    assert (found.needed, found.capacity, found.missing, found.growth) == (
        0,
        768,
        0,
        (),
    )


def test_worst_case_has_no_high_water_mark():
    t = fws.Trace().acquire((0, 0), ((1000,), U8)).retain((1, 0), "kv", ((300,), U8))
    for growth in ("slot", "ubatches"):
        s = fws.worst_case(t, like=fws.initial_state(2, growth=growth))
        assert [x.high_water for x in s.slots] == [0, 0]
        assert [x.capacity for x in s.slots] == ([1024, 300] if growth == "slot" else [1024] * 2)


# ----- what a recording keeps -----


def test_a_call_in_an_ubatch_not_configured_is_not_in_the_trace():
    ws = WorkspaceManager("cpu", num_ubatches=2)
    with ws.recording() as history:
        ws.get_simultaneous(((8,), F32))
        with (
            use_workspace_ubatch(5),
            pytest.raises(RuntimeError, match="not configured"),
        ):
            ws.get_simultaneous(((8,), F32))
    trace = history.trace()
    assert [e.slot for e in trace] == [(0, 0)]
    fws.worst_case(trace, like=ws.state)  # sizes the manager it was recorded on


class ArenaFull(Exception):
    """A pool's own out-of-memory error."""


def _pool(nbytes, device):
    if nbytes > 1 << 20:
        raise ArenaFull(f"the arena cannot fit {nbytes} bytes")
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def test_a_try_get_whose_allocation_failed_is_in_the_trace():
    ws = WorkspaceManager("cpu", allocator=_pool)
    with ws.recording() as history, pytest.raises(ArenaFull):
        ws.try_get_simultaneous(((4 << 20,), torch.uint8))
    assert [(e.kind, e.nbytes) for e in history.trace()] == [("acquire", (4 << 20,))]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_request_is_in_the_trace(interrupt):
    """A growth interrupted on the way is a request the workload makes."""
    ws = WorkspaceManager("cpu")

    def interrupted(nbytes, device):
        raise interrupt()

    ws2 = WorkspaceManager("cpu", allocator=interrupted)
    with ws2.recording() as history, pytest.raises(interrupt):
        ws2.get_simultaneous(((1000,), torch.uint8))
    assert [(e.kind, e.nbytes) for e in history.trace()] == [("acquire", (1000,))]

    def factory():
        raise interrupt()

    with ws.recording() as history, pytest.raises(interrupt):
        ws.get_persistent_resource("w", factory)
    assert [(e.kind, e.key) for e in history.trace()] == [("claim", "w")]


def test_reserve_for_with_no_trace_names_reserve_for():
    with pytest.raises(fws.InvalidTraceError, match=r"^reserve_for needs at least one trace"):
        WorkspaceManager("cpu").reserve_for()


# ----- what a search returns -----


def test_a_new_persistent_key_on_a_locked_state_is_a_shortfall_the_search_finds():
    """replay reports a claim a locked state would refuse; so must the search."""
    state = fws.lock(fws.claim(fws.initial_state(), (0, 0), ("scales", 0))[0])
    found = find_shortfall(
        st.integers(0, 3),
        lambda layer: fws.Trace().claim((0, 0), ("scales", layer)),
        state,
        settings=hypothesis_settings(max_examples=20, derandomize=True),
    )
    assert found is not None and found.params == 1
    assert [s.call for s in found.shortfalls] == ["persistent key"]


def test_a_counterexample_holds_every_shortfall_of_its_trace():
    def step(tokens):
        return fws.Trace().acquire((0, 0), ((tokens,), U8)).acquire((0, 0), ((2 * tokens,), U8))

    reserved = fws.worst_case(fws.Trace().acquire((0, 0), ((100,), U8)), like=fws.initial_state())
    found = find_shortfall(
        st.integers(1000, 2000),
        step,
        reserved,
        settings=hypothesis_settings(max_examples=5),
    )
    assert found is not None and found.params == 1000
    assert found.shortfalls == fws.replay(reserved, found.trace)
    assert [s.index for s in found.shortfalls] == [0, 1]


def test_the_default_search_keeps_no_example_database(monkeypatch):
    seen = []
    real = _search.find

    def spy(params, condition, settings):
        seen.append(settings)
        return real(params, condition, settings=settings)

    monkeypatch.setattr(_search, "find", spy)
    loaded = hypothesis_settings.get_current_profile_name()
    hypothesis_settings.load_profile("default")  # a profile with a database
    try:
        find_shortfall(st.just(1), lambda p: fws.Trace(), fws.initial_state())
    finally:
        hypothesis_settings.load_profile(loaded)
    (chosen,) = seen
    assert chosen.database is None and chosen.deadline is None


# ----- a key that is not its plain value as a key -----


class _Tagged(int):
    """An int subclass that is not its plain value as a key: its own eq and hash."""

    def __eq__(self, other):
        return type(other) is _Tagged and int(self) == int(other)

    def __hash__(self):
        return hash(("Tagged", int(self)))


class _Label(str):
    """A str subclass hashing apart from its text (equal to it)."""

    def __hash__(self):
        return hash(("Label", str(self)))


class _Pair(tuple):
    """A tuple subclass equal only to its own kind."""

    def __eq__(self, other):
        return type(other) is _Pair and tuple(self) == tuple(other)

    def __hash__(self):
        return hash(("Pair", tuple(self)))


@pytest.mark.parametrize(
    "live, plain", [(_Tagged(3), 3), (_Label("w"), "w"), (_Pair(("w", 1)), ("w", 1))],
    ids=["int-subclass", "str-subclass", "tuple-subclass"],
)  # fmt: skip
def test_a_key_that_is_not_its_plain_value_as_a_key_replays_as_written(live, plain):
    """Written as its plain value, it read back as a key a manager holding it does not
    hold, and as one a manager holding the plain value does: locked, that manager refuses
    the live key, and the read-back trace said it was covered."""
    written = fws.Trace().claim((0, 0), live)
    back = fws.Trace.from_json(written.to_json())
    assert isinstance(back.events[0].key, fws.ReprKey)
    for held, short in ((live, 0), (plain, 1)):
        state = _locked_holding(held)
        assert len(fws.replay(state, written)) == short
        assert len(fws.replay(state, back)) == short
