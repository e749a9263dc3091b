"""Traces: built by appending, immutable and hashable, through JSON and back, bad input refused."""

import collections
import enum
import json

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import functional_ws as fws
from functional_ws.testing import traces

F16, I32, U8 = np.dtype("float16"), np.dtype("int32"), np.dtype("uint8")


def _sample():
    t = fws.Trace().acquire((0, 0), ((64, 32), F16), ((64,), I32))
    t = t.retain((1, 0), ("deepseek", 3), ((256,), np.float32))
    return t.claim((0, 1), "scales")


def test_events_hold_slot_kind_bytes_and_dtype_names():
    t = _sample()
    assert [(e.kind, e.slot) for e in t] == [
        ("acquire", (0, 0)),
        ("retain", (1, 0)),
        ("claim", (0, 1)),
    ]
    assert t.events[0].views == ((4096, "float16"), (256, "int32"))
    assert t.events[1].views == ((1024, "float32"),) and t.events[1].key == ("deepseek", 3)
    assert t.events[2].views == () and t.events[2].key == "scales"
    assert t.slots == ((0, 0), (0, 1), (1, 0)) and len(t) == 3


def test_appending_returns_a_new_trace_and_leaves_the_old_one():
    t = fws.Trace().acquire((0, 0), ((8,), U8))
    before = hash(t)
    longer = t.claim((0, 0), "k")
    assert len(t) == 1 and len(longer) == 2 and hash(t) == before
    with pytest.raises(AttributeError):
        t.events = ()  # frozen


def test_traces_add_in_order():
    a, b = fws.Trace().claim((0, 0), "a"), fws.Trace().claim((0, 0), "b")
    assert [e.key for e in a + b] == ["a", "b"]


def test_a_trace_is_a_static_pytree_usable_under_jit():
    t = _sample()
    assert jax.tree_util.tree_leaves(t) == []

    @jax.jit
    def size(trace):
        return fws.worst_case(trace, like=fws.initial_state(2, 2)).capacity((0, 0))

    assert size(t) == 4352


def test_torch_free_dtype_spellings_agree():
    t = fws.Trace().acquire((0, 0), ((2,), np.float32), ((2,), np.dtype("float32")))
    import jax.numpy as jnp

    t = t.acquire((0, 0), ((2,), jnp.float32), ((2,), jnp.bfloat16))
    assert [d for e in t for _, d in e.views] == ["float32"] * 3 + ["bfloat16"]


def test_repr_is_one_line_and_str_lists_events():
    t = _sample()
    assert (
        repr(t) == "Trace(3 events in slots (0, 0), (0, 1), (1, 0): 1 acquire, 1 retain, 1 claim)"
    )
    lines = str(t).splitlines()
    assert lines[0] == repr(t)
    assert lines[1].strip() == "0  get_simultaneous(4.00 KiB float16, 256 B int32) in slot (0, 0)"
    assert lines[2].strip() == "1  get_retained(('deepseek', 3), 1.00 KiB float32) in slot (1, 0)"
    assert lines[3].strip() == "2  persistent key 'scales' in slot (0, 1)"
    assert repr(fws.Trace()) == "Trace(0 events)"


def test_a_long_trace_prints_its_first_events_and_a_count():
    t = fws.Trace()
    for n in range(1, 41):
        t = t.acquire((0, 0), ((n,), U8))
    lines = str(t).splitlines()
    assert len(lines) == 1 + 30 + 1 and lines[-1].strip() == "... 10 more events"


def test_an_event_of_many_views_lists_its_first_and_counts_the_rest():
    """One request of 20,000 views was 1.8 MB of HTML and 200 KB of text: now its first
    views, how many more, and their bytes; a huge dtype name is cut too."""
    from functional_ws.display._sizing import SHOWN_VIEWS

    t = fws.Trace().acquire((0, 0), *[((1,), U8)] * 20_000)
    text, html = str(t), t._repr_html_()
    rest = 20_000 - SHOWN_VIEWS
    assert f"... {rest} more views (19.52 KiB)) in slot (0, 0)" in text  # 19,984 B
    assert text.count("1 B uint8") == SHOWN_VIEWS and len(text) < 1_000
    assert html.count('class="fws-dot"') == SHOWN_VIEWS and len(html) < 5_000
    shortfall = fws.replay(fws.initial_state(), t)[0]
    assert len(str(shortfall)) < 1_000 and len(shortfall._repr_html_()) < 5_000
    few = fws.Trace().acquire((0, 0), ((1,), U8), ((2,), U8))
    assert "more view" not in str(few) and "more view" not in few._repr_html_()
    odd = fws.TraceEvent("acquire", (0, 0), ((4, "x" * 100_000),))
    assert len(str(odd)) < 1_000


def test_html_is_a_table_of_every_event():
    html = _sample()._repr_html_()
    assert html.count("<tr>") == 4  # a header and three events
    assert "get_retained" in html and "(&#x27;deepseek&#x27;, 3)" in html
    assert 'title="4.00 KiB (4,096 B)"' in html


def test_a_key_whose_repr_raises_displays_a_placeholder():
    class Bad:
        def __repr__(self):
            raise RuntimeError("no")

    t = fws.Trace().claim((0, 0), Bad())
    assert "whose repr raised RuntimeError" in str(t)
    assert "whose repr raised RuntimeError" in t._repr_html_()
    with pytest.raises(fws.InvalidTraceError, match=r"events\[0\].*repr raised RuntimeError"):
        t.to_json()


class _Marked(int):
    """An int subclass whose repr is markup: what a slot may be (an IntEnum is one)."""

    def __repr__(self):
        return '<img src=x onerror="alert(1)">'


class _Phase(enum.IntEnum):
    DECODE = 1


def test_a_slot_of_int_subclasses_is_kept_as_plain_ints_and_shown_escaped():
    t = fws.Trace().acquire((_Marked(0), _Phase.DECODE), ((10,), U8))
    event = t.events[0]
    assert event.slot == (0, 1) and [type(i) for i in event.slot] == [int, int]
    direct = fws.TraceEvent("acquire", (_Marked(0), _Phase.DECODE), ((10, "uint8"),))
    assert [type(i) for i in direct.slot] == [int, int]
    shortfall = fws.replay(fws.lock(fws.initial_state(num_lanes=2)), t)[0]
    for html in (t._repr_html_(), shortfall._repr_html_()):
        assert "<img" not in html and "DECODE" not in html and "(0, 1)" in html


def test_a_key_whose_repr_raises_does_not_replace_the_trace_errors():
    class Bad:
        def __repr__(self):
            raise RuntimeError("no")

        __hash__ = None

    with pytest.raises(fws.InvalidTraceError, match=r"an acquire has no key.*repr raised"):
        fws.TraceEvent("acquire", (0, 0), (), _Hashable())
    with pytest.raises(fws.InvalidTraceError, match=r"hashable.*repr raised RuntimeError"):
        fws.TraceEvent("claim", (0, 0), (), [Bad()])


class _Hashable:
    def __repr__(self):
        raise RuntimeError("no")


# ----- JSON -----


def test_json_is_the_documented_format():
    data = json.loads(_sample().to_json())
    assert data == {
        "format": "functional-ws/trace",
        "version": 1,
        "events": [
            {"kind": "acquire", "slot": [0, 0], "views": [[4096, "float16"], [256, "int32"]]},
            {
                "kind": "retain",
                "slot": [1, 0],
                "views": [[1024, "float32"]],
                "key": {"tuple": ["deepseek", 3]},
            },
            {"kind": "claim", "slot": [0, 1], "key": "scales"},
        ],
    }


JSON_KEYS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=4)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3).map(tuple),
    max_leaves=6,
)


@given(traces(2, 2, key_pool=("a", ("deepseek", 3), 7, None, True, -1.5, ((1, "x"), ()))))
def test_json_round_trip(trace):
    assert fws.Trace.from_json(trace.to_json()) == trace
    assert fws.Trace.from_json(trace.to_json(indent=2).encode()) == trace


@given(JSON_KEYS)
def test_every_json_able_key_comes_back_equal_and_of_the_same_type(key):
    back = fws.Trace.from_json(fws.Trace().claim((0, 0), key).to_json()).events[0].key
    assert back == key and type(back) is type(key)
    assert repr(back) == repr(key)  # 1 stays 1, True stays True, (1,) stays a tuple


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    "key",
    [Colour.RED, frozenset({1}), np.float32, ("tensor", Colour.RED), float("nan")],
    ids=["int-enum", "frozenset", "class", "tuple-with-enum", "nan"],
)
def test_other_keys_go_by_repr_and_read_back_stably(key):
    t = fws.Trace().claim((0, 0), key)
    back = fws.Trace.from_json(t.to_json())
    assert repr(back.events[0].key) == repr(key)
    assert fws.Trace.from_json(back.to_json()) == back  # a second round trip changes nothing


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize(
    ("live", "held"),
    [(("scales", np.int64(3)), ("scales", 3)), (Point(4, 4), (4, 4)), (np.float32(0.5), 0.5)],
    ids=["numpy-int", "named-tuple", "numpy-float"],
)
def test_a_key_equal_to_a_plain_one_reads_back_as_it_and_replays_as_written(live, held):
    """Its repr would spell it otherwise than the key the manager holds for it."""
    state = fws.lock(fws.claim(fws.initial_state(), (0, 0), held)[0])
    written = fws.Trace().claim((0, 0), live)
    back = fws.Trace.from_json(written.to_json())
    assert back.events[0].key == live and type(back.events[0].key) is type(held)
    assert fws.replay(state, back) == fws.replay(state, written) == ()


@pytest.mark.parametrize("live", [1.0, True, np.int64(1)], ids=["float", "bool", "numpy-int"])
def test_a_key_read_back_by_repr_whose_other_parts_equal_the_held_ones_replays_as_written(live):
    """(Trace, 1.0) is the held (Trace, 1) at run time: the class part reads back as its
    repr, and was matched with the rest by the whole key's spelling ("1.0" is not "1"), a
    shortfall the written trace does not have."""
    state = fws.lock(fws.claim(fws.initial_state(), (0, 0), (fws.Trace, 1))[0])
    written = fws.Trace().claim((0, 0), (fws.Trace, live))
    back = fws.Trace.from_json(written.to_json())
    assert isinstance(back.events[0].key[0], fws.ReprKey)
    assert fws.replay(state, back) == fws.replay(state, written) == ()
    other = fws.Trace.from_json(fws.Trace().claim((0, 0), (fws.Trace, 2)).to_json())
    assert len(fws.replay(state, other)) == 1  # another key still falls short


def test_a_key_read_back_by_repr_is_a_repr_key():
    back = fws.Trace.from_json(fws.Trace().claim((0, 0), (np.float32, "p20")).to_json())
    key = back.events[0].key
    assert isinstance(key[0], fws.ReprKey) and key[1] == "p20"
    assert key[0] == fws.ReprKey("<class 'numpy.float32'>")


BAD_JSON = [
    # id, text, error, fragments
    ("not-text", 42, fws.TraceTypeError, ["text", "int", "42"]),
    ("not-json", "{", fws.InvalidTraceError, ["not JSON"]),
    ("not-object", "[]", fws.InvalidTraceError, ["JSON object", "[]"]),
    ("format", '{"format": "x", "version": 1, "events": []}', fws.InvalidTraceError,
     ["format", "'x'"]),
    ("version", '{"format": "functional-ws/trace", "version": 2, "events": []}',
     fws.InvalidTraceError, ["version", "2"]),
    ("events", '{"format": "functional-ws/trace", "version": 1, "events": {}}',
     fws.InvalidTraceError, ["trace['events']", "{}"]),
    ("version-true", '{"format": "functional-ws/trace", "version": true, "events": []}',
     fws.InvalidTraceError, ["version=True"]),
    ("version-float", '{"format": "functional-ws/trace", "version": 1.0, "events": []}',
     fws.InvalidTraceError, ["version=1.0"]),
    ("field-twice", '{"format": "functional-ws/trace", "version": 1, "events": [{"kind": '
     '"acquire", "slot": [0, 0], "views": [[4000000, "uint8"]], "views": [[4, "uint8"]]}]}',
     fws.InvalidTraceError, ["field 'views' twice"]),
    ("nested-json", "[" * 100_000 + "]" * 100_000, fws.InvalidTraceError, ["nested too deeply"]),
    ("nested-key", '{"format": "functional-ws/trace", "version": 1, "events": [{"kind": '
     '"claim", "slot": [0, 0], "key": ' + '{"tuple": [' * 2000 + "]}" * 2000 + "}]}",
     fws.InvalidTraceError, ["nested too deeply"]),
    ("top-level-field", '{"format": "functional-ws/trace", "version": 1, "events": [], '
     '"more_events": [{"kind": "acquire", "slot": [0, 0], "views": [[4096, "uint8"]]}]}',
     fws.InvalidTraceError, ["'more_events'", "version-1 trace does not have"]),
]  # fmt: skip


def _doc(*events):
    return json.dumps({"format": "functional-ws/trace", "version": 1, "events": list(events)})


BAD_EVENTS = [
    ("kind", {"kind": "grow", "slot": [0, 0]}, ["['kind']", "'grow'"]),
    ("event-not-object", [1], ["trace['events'][0]", "[1]"]),
    ("slot-not-pair", {"kind": "claim", "slot": [0], "key": "k"}, ["['slot']", "[0]"]),
    ("slot-negative", {"kind": "claim", "slot": [0, -1], "key": "k"}, ["['slot'][1]", "-1"]),
    ("slot-bool", {"kind": "claim", "slot": [True, 0], "key": "k"}, ["['slot'][0]", "True"]),
    ("no-views", {"kind": "acquire", "slot": [0, 0]}, ["no field 'views'"]),
    ("no-key", {"kind": "retain", "slot": [0, 0], "views": [[1, "u8"]]}, ["no field 'key'"]),
    ("extra-field", {"kind": "claim", "slot": [0, 0], "key": "k", "views": []},
     ["['views']", "claim"]),
    ("view-not-pair", {"kind": "acquire", "slot": [0, 0], "views": [[1]]},
     ["['views'][0]", "[1]"]),
    ("negative-bytes", {"kind": "acquire", "slot": [0, 0], "views": [[-1, "u8"]]},
     ["views[0]", "-1"]),
    ("float-bytes", {"kind": "acquire", "slot": [0, 0], "views": [[1.5, "u8"]]},
     ["views[0]", "1.5"]),
    ("huge-bytes", {"kind": "acquire", "slot": [0, 0], "views": [[2**63, "u8"]]},
     ["views[0]", str(2**63)]),
    ("empty-dtype", {"kind": "acquire", "slot": [0, 0], "views": [[1, ""]]},
     ["dtype name", "''"]),
    ("retain-two-views", {"kind": "retain", "slot": [0, 0], "views": [[1, "a"], [1, "a"]],
                          "key": "k"}, ["exactly one view"]),
    ("bad-key", {"kind": "claim", "slot": [0, 0], "key": {"set": [1]}},
     ["['key']", "{'set': [1]}"]),
    ("bad-nested-key", {"kind": "claim", "slot": [0, 0], "key": {"tuple": [[1]]}},
     ["['key']['tuple'][0]", "[1]"]),
    ("list-key", {"kind": "claim", "slot": [0, 0], "key": [1]}, ["['key']", "[1]"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "error", "fragments"),
    [case[1:] for case in BAD_JSON]
    + [(_doc(event), fws.InvalidTraceError, fragments) for _, event, fragments in BAD_EVENTS],
    ids=[case[0] for case in BAD_JSON] + [case[0] for case in BAD_EVENTS],
)
def test_malformed_json_is_refused_naming_the_field(text, error, fragments):
    with pytest.raises(error) as info:
        fws.Trace.from_json(text)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert isinstance(info.value, ValueError)


BAD_BUILDS = [
    ("bad-slot", lambda t: t.acquire(0, ((3,), U8)), fws.InvalidSlotError, ["slot", "0"]),
    ("negative-lane", lambda t: t.claim((0, -1), "k"), fws.InvalidSlotError, ["lane", "-1"]),
    ("bad-spec", lambda t: t.acquire((0, 0), ((3,), U8), ((-2,), U8)), fws.InvalidSpecError,
     ["specs[1]", "-2"]),
    ("retain-bad-spec", lambda t: t.retain((0, 0), "k", ((3,), "f4")), fws.InvalidSpecError,
     ["'f4'"]),
    ("unhashable-key", lambda t: t.claim((0, 0), ["k"]), fws.InvalidSpecError, ["key", "['k']"]),
    ("events-not-tuple", lambda t: fws.Trace([]), fws.TraceTypeError, ["events", "list"]),
    ("event-not-event", lambda t: fws.Trace((1,)), fws.TraceTypeError, ["events[0]", "1"]),
    ("event-kind", lambda t: fws.TraceEvent("grow", (0, 0)), fws.InvalidTraceError, ["'grow'"]),
    ("event-acquire-key", lambda t: fws.TraceEvent("acquire", (0, 0), (), "k"),
     fws.InvalidTraceError, ["no key", "'k'"]),
    ("event-views-list", lambda t: fws.TraceEvent("acquire", (0, 0), [(1, "u8")]),
     fws.InvalidTraceError, ["views", "[(1, 'u8')]"]),
    ("event-unhashable", lambda t: fws.TraceEvent("claim", (0, 0), (), ["k"]),
     fws.InvalidTraceError, ["hashable", "['k']"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "error", "fragments"),
    [case[1:] for case in BAD_BUILDS],
    ids=[case[0] for case in BAD_BUILDS],
)
def test_bad_builds_are_refused_naming_the_argument(build, error, fragments):
    t = _sample()
    before = hash(t)
    with pytest.raises(error) as info:
        build(t)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert hash(t) == before and len(t) == 3


def test_add_refuses_what_is_not_a_trace():
    with pytest.raises(TypeError):
        _sample() + [1]  # noqa: RUF005


@given(traces(2, 2))
def test_appending_builds_what_the_constructor_builds(trace):
    again = fws.Trace(tuple(trace.events))
    assert again == trace and hash(again) == hash(trace)
    assert (trace + again).events == trace.events * 2


def test_a_key_json_cannot_write_is_an_invalid_trace_and_replays_as_unspellable():
    """An int of more digits than Python converts, or a key nested past the recursion
    limit: to_json raised ValueError or RecursionError; replay of a trace read back from
    JSON raised ValueError on a state holding such a key."""
    huge, deep = 10**5000, ()
    for _ in range(5000):
        deep = (deep,)
    for key in (huge, deep):
        with pytest.raises(fws.InvalidTraceError, match=r"events\[1\]"):  # names the event
            fws.Trace().acquire((0, 0), ((1,), U8)).claim((0, 0), key).to_json()
    state = fws.lock(fws.claim(fws.initial_state(), (0, 0), huge)[0])
    back = fws.Trace.from_json(fws.Trace().claim((0, 0), (fws.Trace, "scales")).to_json())
    assert isinstance(back.events[0].key[0], fws.ReprKey)  # compared by its spelling
    (shortfall,) = fws.replay(state, back)  # a new key: a locked state refuses it
    assert shortfall.index == 0


@pytest.mark.parametrize("indent", [[1], 1.5, b" "])
def test_to_json_refuses_an_indent_json_does_not_take_naming_it(indent):
    with pytest.raises(fws.TraceTypeError, match=r"indent=") as info:
        _sample().to_json(indent=indent)
    assert repr(indent) in str(info.value)
    for taken in ("\t", True, np.int64(2)):  # what json.dumps takes, to_json takes
        assert fws.Trace.from_json(_sample().to_json(indent=taken)) == _sample()


def test_the_one_line_summary_of_a_trace_in_many_slots_names_their_count_and_range():
    trace = fws.Trace()
    for ubatch in range(5000):
        trace = trace.acquire((ubatch, 0), ((1,), U8))
    assert repr(trace) == "Trace(5000 events in 5,000 slots, (0, 0) to (4999, 0): 5000 acquire)"
    assert len(str(trace).splitlines()[0]) < 100 and len(trace._repr_html_()) < 60_000
    two = fws.Trace().acquire((0, 0), ((1,), U8)).acquire((1, 0), ((1,), U8))
    assert repr(two) == "Trace(2 events in slots (0, 0), (1, 0): 2 acquire)"


def test_the_one_line_summary_names_up_to_eight_slots_one_by_one():
    """A trace in exactly 8 slots lists them all; only past 8 does it give count and range."""
    eight = fws.Trace(tuple(fws.TraceEvent("claim", (u, 0), (), "k") for u in range(8)))
    slots = ", ".join(str((u, 0)) for u in range(8))
    assert repr(eight) == f"Trace(8 events in slots {slots}: 8 claim)"
    nine = fws.Trace(tuple(fws.TraceEvent("claim", (u, 0), (), "k") for u in range(9)))
    assert repr(nine) == "Trace(9 events in 9 slots, (0, 0) to (8, 0): 9 claim)"


def test_an_empty_retain_records_zero_bytes_and_sizes_nothing():
    """get_retained of an empty view is a 0-byte request: the trace and worst_case say 0."""
    t = fws.Trace().retain((0, 0), "k", ((0,), np.dtype("float32")))
    assert t.events[0].views == ((0, "float32"),)
    assert fws.worst_case(t, like=fws.initial_state()).capacity((0, 0)) == 0


@pytest.mark.parametrize(
    "key",
    [{"tuple": ["a", 1], "repr": "x"}, {"repr": "x", "extra": 1}, {"tuple": [], "other": None}],
    ids=["tuple-and-repr", "repr-and-extra", "tuple-and-extra"],
)
def test_a_key_object_with_more_than_its_one_field_is_refused(key):
    """A key's JSON object holds exactly one field ('tuple' or 'repr'); more is refused."""
    text = json.dumps(
        {
            "format": "functional-ws/trace",
            "version": 1,
            "events": [{"kind": "claim", "slot": [0, 0], "key": key}],
        }
    )
    with pytest.raises(fws.InvalidTraceError, match=r"\['key'\]"):
        fws.Trace.from_json(text)


@pytest.mark.parametrize(
    "key",
    [float("inf"), float("-inf"), np.float64("inf"), ("scales", float("inf"))],
    ids=["inf", "minus-inf", "numpy-inf", "tuple-with-inf"],
)
def test_an_infinite_float_key_goes_by_repr_and_replays_as_written(key):
    """JSON has no infinity: such a key is written as its repr, read back as a ReprKey."""
    t = fws.Trace().claim((0, 0), key)
    back = fws.Trace.from_json(t.to_json())
    assert repr(back.events[0].key) == repr(key)
    assert fws.Trace.from_json(back.to_json()) == back
    state = fws.lock(fws.claim(fws.initial_state(), (0, 0), key)[0])
    assert fws.replay(state, back) == fws.replay(state, t) == ()
