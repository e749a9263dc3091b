"""Every bad input to the façade: the original's exception type, a message naming the argument
and value, and a manager that lost nothing (state, retained bytes, persistent contents)."""

import contextlib
import json
import os

import numpy as np
import pytest
import torch
from conftest import TEST_DEVICE as DEVICE
from support.allocators import workspace
from support.seams import slots_snapshot

import functional_ws as fws
import interop
from interop import WorkspaceManager, use_workspace_lane, use_workspace_ubatch
from interop.testing import ReferenceWorkspaceManager

F32, U8 = torch.float32, torch.uint8


def _in_slot(ubatch, lane, call):
    def run(ws):
        with use_workspace_ubatch(ubatch), use_workspace_lane(lane):
            return call(ws)

    return run


def _with_provider(value):
    def run(ws):
        previous = interop.set_ubatch_provider(lambda: value)
        try:
            return ws.get_simultaneous(((4,), F32))
        finally:
            interop.set_ubatch_provider(previous)

    return run


def _load(text):
    def run(ws, tmp_path):
        path = tmp_path / "plan.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ws.load_plan(path)

    return run


def _plan(**changes):
    """The plan of a 2 x 2 manager with ``changes`` applied (a callable edits the dict)."""
    data = fws.to_dict(WorkspaceManager("cpu", num_ubatches=2, num_lanes=2).state)
    for name, value in changes.items():
        if callable(value):
            value(data)
        else:
            data[name] = value
    return json.dumps(data)


def _huge_int(field, digits=5000, sign=""):
    """A plan whose ``field`` (of the plan, or ``slots.<name>`` of slot 0) holds an integer of
    ``digits`` digits: more than Python reads by default (``sys.get_int_max_str_digits``)."""
    data = json.loads(_plan())
    where, name = (data["slots"][0], field[6:]) if field.startswith("slots.") else (data, field)
    where[name] = "HUGE"
    return json.dumps(data).replace('"HUGE"', sign + "9" * digits)


def _save_over_fifo(ws, tmp_path):
    os.mkfifo(tmp_path / "plan.json")
    return ws.save_plan(tmp_path / "plan.json")


def _slot0(**fields):
    return lambda data: data["slots"][0].update(fields)


_other_plan = json.dumps(fws.to_dict(WorkspaceManager("cpu", num_ubatches=2, num_lanes=3).state))


def _twice(ws, *pairs):
    """The request twice: the error of its second sighting (the first's is another path)."""
    with contextlib.suppress(ValueError):
        ws.get_simultaneous(*pairs)
    ws.get_simultaneous(*pairs)


# id, call(ws) or call(ws, tmp_path), locked first?, error type, fragments of the message
CASES = [
    ("negative-dim", lambda ws: ws.get_simultaneous(((-1,), F32)), False, ValueError,
     ["-1", "shape"]),
    ("float-dim", lambda ws: ws.get_simultaneous(((1.5,), F32)), False, ValueError, ["1.5"]),
    ("bool-dim", lambda ws: ws.get_simultaneous(((True,), F32)), False, ValueError, ["True"]),
    ("huge-dim-beside-zero", lambda ws: ws.get_simultaneous(((2**63, 0), U8)), False,
     ValueError, ["2**63", "shape"]),
    ("extent-beside-zero", lambda ws: ws.get_simultaneous(((2**40, 2**40, 0), F32)), False,
     ValueError, ["2**63", "elements"]),
    ("retain-huge-dim-beside-zero", lambda ws: ws.get_retained("kv", (0, 2**63), U8), False,
     ValueError, ["2**63"]),
    ("persistent-extent", lambda ws: ws.get_persistent("x", (2**32, 2**32, 0), U8), False,
     ValueError, ["2**63"]),
    ("tensor-dim", lambda ws: ws.get_simultaneous(((torch.tensor(3),), F32)), False, ValueError,
     ["tensor(3)", "int(t)"]),
    ("tensor-dim-named", lambda ws: ws.get_simultaneous(((2, torch.tensor(3)), F32)), False,
     fws.InvalidShapeError, ["shapes_and_dtypes[0] shape[1]", "tensor(3)", "int(t)"]),
    # an ndarray of one element has an __index__ that refuses
    ("ndarray-dim", lambda ws: ws.get_simultaneous(((np.array([3]),), F32)), False,
     fws.InvalidShapeError, ["shapes_and_dtypes[0] shape[0]", "array([3])"]),
    ("list-ndarray-dim", lambda ws: ws.get_simultaneous(((3,), F32), ([2, np.array([3])], F32)),
     False, fws.InvalidShapeError, ["shapes_and_dtypes[1] shape[1]", "array([3])"]),
    ("try-get-ndarray-dim", lambda ws: ws.try_get_simultaneous(((np.array([3]),), F32)), True,
     fws.InvalidShapeError, ["shapes_and_dtypes[0] shape[0]", "array([3])"]),
    ("retain-ndarray-dim", lambda ws: ws.get_retained("kv", (np.array([3]),), U8), False,
     fws.InvalidShapeError, ["shape[0] must", "array([3])"]),
    ("persistent-ndarray-dim", lambda ws: ws.get_persistent("p", (np.array([2]),), F32),
     False, fws.InvalidShapeError, ["shape[0] must", "array([2])"]),
    ("reserve-ndarray-dim", lambda ws: ws.reserve(((np.array([3]),), U8)), False,
     fws.InvalidShapeError, ["shapes_and_dtypes[0] shape[0]", "array([3])"]),
    ("reserve-many-ndarray-dim", lambda ws: ws.reserve_many([[((np.array([3]),), U8)]]), False,
     fws.InvalidShapeError, ["requests[0][0] shape[0]", "array([3])"]),
    ("numpy-bool-dim", lambda ws: ws.get_simultaneous(((np.bool_(True),), F32)), False,
     ValueError, ["True"]),
    ("list-float-dim", lambda ws: ws.get_simultaneous(([1.5], F32)), False, ValueError, ["1.5"]),
    # a list shape (converted on the hot path) beside a dtype that cannot be hashed
    ("list-shape-list-dtype", lambda ws: ws.get_simultaneous(([2, 3], [1])), False, ValueError,
     ["dtype", "[1]"]),
    ("list-shape-dict-dtype", lambda ws: ws.get_simultaneous(([2], {"a": 1})), False,
     ValueError, ["dtype", "{'a': 1}"]),
    ("retain-tensor-dim", lambda ws: ws.get_retained("kv", (torch.tensor(2),), U8), False,
     ValueError, ["int(t)"]),
    ("int-shape", lambda ws: ws.get_simultaneous((3, F32)), False, ValueError, ["(3,)"]),
    ("numpy-dtype", lambda ws: ws.get_simultaneous(((3,), np.float32)), False, ValueError,
     ["torch.dtype", "float32"]),
    ("string-dtype", lambda ws: ws.get_simultaneous(((3,), "float32")), False, ValueError,
     ["dtype", "'float32'"]),
    ("not-a-pair", lambda ws: ws.get_simultaneous(((3,),)), False, ValueError,
     ["shapes_and_dtypes[0]"]),
    ("second-spec", lambda ws: ws.get_simultaneous(((3,), F32), ((-2,), F32)), False,
     ValueError, ["shapes_and_dtypes[1] shape[0]", "-2"]),
    ("overflow", lambda ws: ws.get_simultaneous(((2**62, 2), U8)), False, ValueError,
     ["shapes_and_dtypes:", "2**63"]),
    ("overflow-seen-before", lambda ws: _twice(ws, ((2**62,), U8), ((2**62,), U8)), False,
     ValueError, ["shapes_and_dtypes:", "2**63"]),
    ("try-get-bad-spec", lambda ws: ws.try_get_simultaneous(((-1,), F32)), True, ValueError,
     ["-1"]),
    ("retain-negative", lambda ws: ws.get_retained("kv", (-5,), U8), False, ValueError,
     ["shape[0] must", "-5"]),
    ("retain-unhashable-key", lambda ws: ws.get_retained(["k"], (5,), U8), False, ValueError,
     ["key", "['k']"]),
    ("retain-numpy-dtype", lambda ws: ws.get_retained("kv", (5,), np.uint8), False,
     ValueError, ["dtype", "torch.dtype"]),
    ("persistent-negative", lambda ws: ws.get_persistent("p", (-2,), F32), False, ValueError,
     ["-2", "shape"]),
    ("persistent-numpy-dtype", lambda ws: ws.get_persistent("p", (2,), np.float32), False,
     ValueError, ["dtype", "torch.dtype"]),
    ("persistent-unhashable-key", lambda ws: ws.get_persistent({"k": 1}, (2,), F32), False,
     ValueError, ["key must be hashable, got {'k': 1}."]),  # the caller's key, not ours
    ("persistent-changed-shape", lambda ws: ws.get_persistent("w", (5,), F32), False,
     ValueError, ["requested shape=(5,)", "'w'"]),
    ("persistent-changed-dtype", lambda ws: ws.get_persistent("w", (4,), U8), False,
     ValueError, ["requested shape", "torch.uint8"]),
    ("resource-unhashable-key", lambda ws: ws.get_persistent_resource([1], dict), False,
     ValueError, ["key", "[1]"]),
    ("resource-factory-not-callable", lambda ws: ws.get_persistent_resource("new", 5), False,
     TypeError, ["factory", "5"]),
    ("locked-growth", lambda ws: ws.get_simultaneous(((4096,), U8)), True, AssertionError,
     ["Workspace is locked", "test_manager_bad_inputs.py"]),
    ("locked-retain-growth", lambda ws: ws.get_retained("kv", (4096,), U8), True,
     AssertionError, ["Workspace is locked"]),
    ("locked-new-resource", lambda ws: ws.get_persistent_resource("new", dict), True,
     AssertionError, ["'new'", "was not allocated during warmup"]),
    ("locked-new-persistent", lambda ws: ws.get_persistent("new", (2,), F32), True,
     AssertionError, ["'new'", "was not allocated during warmup"]),
    ("locked-reserve", lambda ws: ws.reserve(((4096,), U8)), True, AssertionError,
     ["Workspace is locked"]),
    ("reserve-bad-request", lambda ws: ws.reserve(((-3,), U8)), False, ValueError,
     ["shapes_and_dtypes[0]", "-3"]),
    ("reserve-bad-slot", lambda ws: ws.reserve(((3,), U8), slots=[(0, 7)]), False,
     RuntimeError, ["lane 7", "is not configured"]),
    ("reserve-slots-not-a-list", lambda ws: ws.reserve(((3,), U8), slots=5), False,
     ValueError, ["slots", "5"]),
    ("lane-not-configured", _in_slot(0, 7, lambda ws: ws.get_simultaneous(((4,), F32))), False,
     RuntimeError, ["lane 7", "is not configured"]),
    ("ubatch-not-configured", _in_slot(3, 0, lambda ws: ws.get_retained("kv", (4,), F32)),
     False, RuntimeError, ["ubatch 3", "is not configured"]),
    ("resource-lane-not-configured", _in_slot(0, 7, lambda ws: ws.get_persistent("w", (4,), F32)),
     False, RuntimeError, ["lane 7"]),
    ("provider-negative", _with_provider(-1), False, ValueError, ["non-negative", "-1"]),
    ("provider-not-int", _with_provider("0"), False, ValueError, ["provider", "'0'"]),
    ("plan-not-json", _load("{"), False, ValueError, ["Expecting"]),
    ("plan-malformed", _load('{"format": "nope"}'), False, ValueError, ["format", "'nope'"]),
    ("plan-other-lanes", _load(_other_plan), False, ValueError, ["num_lanes=3"]),
    ("plan-empty", _load(""), False, ValueError, ["plan.json", "empty"]),
    ("plan-slots-short", _load(_plan(x=lambda d: d["slots"].pop())), False, ValueError,
     ["must list 4 slots", "got a list of 3."]),
    ("reserve-for-nothing", lambda ws: ws.reserve_for(), False, ValueError,
     ["reserve_for needs at least one trace"]),
    # JSON keeps the last of a field written twice: 4 B claimed where the file said 4 MiB
    ("plan-field-twice",
     _load(_plan().replace('"capacity": 0', '"capacity": 4194304, "capacity": 4', 1)),
     False, ValueError, ["plan.json", "'capacity' twice"]),
    ("plan-version-true", _load(_plan(version=True)), False, ValueError, ["version=True"]),
    ("plan-version-float", _load(_plan(version=1.0)), False, ValueError, ["version=1.0"]),
    ("plan-truncated", _load(_plan()[:40]), False, ValueError, ["plan.json", "not valid JSON"]),
    ("plan-not-utf8", _load(b"\xff\xfe{}"), False, ValueError, ["plan.json", "UTF-8"]),
    ("plan-deeply-nested", _load("[" * 100_000 + "]" * 100_000), False, ValueError,
     ["plan.json", "nested too deeply"]),
    ("plan-slot-twice", _load(_plan(x=lambda d: d["slots"].__setitem__(1, d["slots"][0]))),
     False, ValueError, ["plan.json", "(0, 0)", "a second time"]),
    ("plan-capacity-2**63", _load(_plan(x=_slot0(capacity=2**63, growths=1))), False,
     ValueError, ["plan.json", "['capacity']", str(2**63)]),
    ("plan-capacity-2**200", _load(_plan(x=_slot0(capacity=2**200, growths=1))), False,
     ValueError, ["plan.json", "['capacity']"]),
    ("plan-5000-digit-alignment", _load(_huge_int("alignment")), False, fws.InvalidPlanError,
     ["plan.json", "['alignment']", "5000 digits"]),
    ("plan-5000-digit-capacity", _load(_huge_int("slots.capacity")), False,
     fws.InvalidPlanError, ["plan.json", "['capacity']", "5000 digits"]),
    ("plan-negative-5000-digit-growths", _load(_huge_int("slots.growths", sign="-")), False,
     fws.InvalidPlanError, ["plan.json", "['growths']", "5000 digits"]),
    ("plan-4301-digit-num-ubatches", _load(_huge_int("num_ubatches", 4301)), False,
     fws.InvalidPlanError, ["plan.json", "num_ubatches", "4301 digits"]),
    ("save-plan-over-a-fifo", _save_over_fifo, False, FileExistsError,
     ["save_plan(path=", "plan.json", "a FIFO", "nothing was written"]),
    ("plan-high-water-without-growth",
     _load(_plan(x=_slot0(capacity=0, high_water=1024, growths=0))), False, ValueError,
     ["plan.json", "high_water 1024", "growths 0"]),
    ("plan-capacity-without-growth", _load(_plan(x=_slot0(capacity=512, growths=0))), False,
     ValueError, ["plan.json", "growths 0"]),
    ("plan-2**40-ubatches", _load(_plan(num_ubatches=2**40)), False, ValueError,
     ["plan.json", "num_ubatches", "slots"]),
    ("plan-2**62-lanes", _load(_plan(num_lanes=2**62)), False, ValueError,
     ["plan.json", "num_lanes"]),
]  # fmt: skip


def _base():
    ws = workspace(DEVICE, num_ubatches=2, num_lanes=2)
    ws.get_simultaneous(((1000,), U8))
    view, _ = ws.get_retained("kv", (64,), U8)
    view.copy_(torch.arange(64, dtype=U8))
    ws.get_persistent("w", (4,), F32).copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    ws.get_persistent_resource("r", lambda: ["resource"])
    return ws


@pytest.mark.usefixtures("allocator")
@pytest.mark.parametrize(
    ("call", "locked", "kind", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_bad_input_is_refused_clearly_and_loses_nothing(call, locked, kind, fragments, tmp_path):
    ws = _base()
    if locked:
        ws.lock()
    state, [(base, retained)] = slots_snapshot(ws, ubatches=1, bytes_at="retained")
    persistent = ws.get_persistent("w", (4,), F32).clone()
    with pytest.raises(kind) as info:
        call(ws, tmp_path) if call.__code__.co_argcount == 2 else call(ws)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert ws.state is state
    _, [(after_base, after_retained)] = slots_snapshot(ws, ubatches=1, bytes_at="retained")
    after_persistent = ws.get_persistent("w", (4,), F32).clone()
    assert after_base == base
    assert torch.equal(after_retained, retained) and torch.equal(after_persistent, persistent)
    assert ws.get_retained("kv", (64,), U8)[1], "the retained span is still intact"
    assert ws.get_persistent_resource("r", list) == ["resource"]


CONSTRUCTION = [
    ("no-lanes", lambda: WorkspaceManager(DEVICE, num_lanes=0), ValueError,
     ["num_lanes", "at least one", "0"]),
    ("no-ubatches", lambda: WorkspaceManager(DEVICE, num_ubatches=0), ValueError,
     ["num_ubatches", "at least one"]),
    ("string-lanes", lambda: WorkspaceManager(DEVICE, num_lanes="2"), ValueError,
     ["num_lanes", "'2'"]),
    ("alignment-not-power-of-two", lambda: WorkspaceManager(DEVICE, alignment=100), ValueError,
     ["alignment", "100"]),
    ("alignment-below-an-itemsize", lambda: WorkspaceManager(DEVICE, alignment=4), ValueError,
     ["alignment=4", "16", "itemsize"]),
    ("alignment-8", lambda: WorkspaceManager(DEVICE, alignment=8), ValueError,
     ["alignment=8", "complex128"]),
    ("unknown-growth-policy", lambda: WorkspaceManager(DEVICE, growth="all"), ValueError,
     ["growth", "'all'"]),
    ("alloc-context-not-callable", lambda: WorkspaceManager(DEVICE, alloc_context=5),
     TypeError, ["alloc_context", "5"]),
    ("unknown-device", lambda: WorkspaceManager("bogus"), RuntimeError, ["bogus"]),
    ("negative-lane", lambda: use_workspace_lane(-1), ValueError, ["non-negative", "-1"]),
    ("bool-lane", lambda: use_workspace_lane(True), ValueError, ["lane", "True"]),
    ("negative-ubatch", lambda: use_workspace_ubatch(-2), ValueError, ["non-negative", "-2"]),
    ("provider-not-callable", lambda: interop.set_ubatch_provider(5), TypeError,
     ["provider", "5"]),
    ("init-no-lanes", lambda: interop.init_workspace_manager(DEVICE, num_lanes=0), ValueError,
     ["at least one"]),
    ("2**40-ubatches", lambda: WorkspaceManager(DEVICE, num_ubatches=2**40), ValueError,
     ["num_ubatches", "slots"]),
    ("2**62-lanes", lambda: WorkspaceManager(DEVICE, num_lanes=2**62), ValueError,
     ["num_lanes", "slots"]),
    ("init-2**40-ubatches", lambda: interop.init_workspace_manager(DEVICE, num_ubatches=2**40),
     ValueError, ["num_ubatches"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "kind", "fragments"), [pytest.param(*c[1:], id=c[0]) for c in CONSTRUCTION]
)
def test_bad_construction_is_refused_clearly(call, kind, fragments):
    with pytest.raises(kind) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert not interop.is_workspace_manager_initialized()


def test_numpy_integers_configure_as_the_original_accepts_them():
    """The original takes NumPy integers for its counts and slot indices (as shapes take
    them here); a bool is still refused."""
    ws = WorkspaceManager(DEVICE, num_ubatches=np.int64(2), num_lanes=np.int32(2))
    assert (ws.state.num_ubatches, ws.state.num_lanes) == (2, 2)
    assert type(ws.state.num_ubatches) is int and type(ws.state.num_lanes) is int
    with use_workspace_ubatch(np.int64(1)), use_workspace_lane(np.uint8(1)):
        (view,) = ws.get_simultaneous(((4,), torch.float32))
    assert ws.state.capacity((1, 1)) > 0 and ws.state.capacity((0, 0)) == 0 and view.numel() == 4
    previous = interop.set_ubatch_provider(lambda: np.int64(1))
    try:
        ws.get_simultaneous(((8,), torch.uint8))
        assert ws.state.slots[ws.state.index((1, 0))].capacity > 0
    finally:
        interop.set_ubatch_provider(previous)
    with pytest.raises(ValueError, match="True"):
        WorkspaceManager(DEVICE, num_lanes=np.bool_(True))


WRONG_TYPES = [
    ("float-lanes", {"num_lanes": 2.0}, "num_lanes", "2.0"),
    ("fractional-lanes", {"num_lanes": 1.5}, "num_lanes", "1.5"),
    ("float-ubatches", {"num_ubatches": 2.0}, "num_ubatches", "2.0"),
    ("string-ubatches", {"num_ubatches": "2"}, "num_ubatches", "'2'"),
]


@pytest.mark.parametrize(
    ("config", "name", "shown"), [pytest.param(*c[1:], id=c[0]) for c in WRONG_TYPES]
)
def test_a_count_of_the_wrong_type_is_the_originals_type_error(config, name, shown):
    """The original raises ``TypeError`` for a count that is no int (it multiplies its slot
    list by it); ours is that and our ``InvalidConfigError`` (a ``ValueError``) at once."""
    with pytest.raises(TypeError):
        ReferenceWorkspaceManager(DEVICE, **config)
    with pytest.raises(TypeError) as info:
        WorkspaceManager(DEVICE, **config)
    assert isinstance(info.value, fws.InvalidConfigTypeError)
    assert isinstance(info.value, fws.InvalidConfigError) and isinstance(info.value, ValueError)
    assert name in str(info.value) and shown in str(info.value)
    with pytest.raises(fws.InvalidConfigTypeError):
        interop.init_workspace_manager(DEVICE, **config)
    assert not interop.is_workspace_manager_initialized()


@pytest.mark.parametrize("lane", [1.5, "0", None])
def test_a_slot_index_of_the_wrong_type_is_a_type_error(lane):
    """The original's lane check compares the index (``"0" < 0``) or indexes its list with
    it: a ``TypeError``. Ours is also ``InvalidSlotError`` and leaves the manager as it was."""
    ws = WorkspaceManager(DEVICE, num_lanes=2)
    with pytest.raises(TypeError) as info, use_workspace_lane(lane):
        ws.get_simultaneous(((4,), torch.uint8))
    assert isinstance(info.value, fws.InvalidSlotTypeError)
    assert isinstance(info.value, ValueError) and repr(lane) in str(info.value)
    assert ws.state == WorkspaceManager(DEVICE, num_lanes=2).state
    with pytest.raises(interop.errors.InvalidSlotTypeError), use_workspace_ubatch(lane):
        ws.get_simultaneous(((4,), torch.uint8))


BAD_REQUESTS = [
    ("float-dim", ((2.0,), torch.float32)),
    ("bool-dim", ((True,), torch.float32)),
    ("nested-dims", (((2,),), torch.float32)),
    ("int-shape", (4, torch.float32)),
    ("negative-dim", ((-1,), torch.float32)),
    ("negative-dim-not-inferred", ((-4,), torch.float32)),  # reshape's RuntimeError
    ("negative-dim-of-two", ((4, -2), torch.float32)),
    ("huge", ((2**62,), torch.float32)),
    ("string-dtype", ((4,), "float32")),
    ("none-dtype", ((4,), None)),
    ("numpy-dtype", ((4,), np.float32)),
]


@pytest.mark.parametrize("request_", [pytest.param(r, id=i) for i, r in BAD_REQUESTS])
@pytest.mark.parametrize("grown", [False, True], ids=["fresh", "grown"])
def test_a_bad_request_raises_what_the_original_raises_and_loses_nothing(request_, grown):
    """Code written ``except TypeError:`` (or ``AttributeError``) around the original keeps
    catching ours: each refusal is an ``InvalidSpecError`` and the original's class too."""
    original, ours = ReferenceWorkspaceManager(DEVICE), WorkspaceManager(DEVICE)
    if grown:
        for ws in (original, ours):
            ws.get_simultaneous(((64,), torch.uint8))
    try:
        original.get_simultaneous(request_)
        builtin: type[BaseException] = ValueError  # it served garbage: ours refuses
    except Exception as theirs:  # whatever the original raises
        builtin = type(theirs)
    before = ours.state
    with pytest.raises(fws.InvalidSpecError) as caught:
        ours.get_simultaneous(request_)
    assert isinstance(caught.value, builtin), (builtin, type(caught.value))
    assert ours.state == before


def test_a_persistent_key_holding_no_tensor_is_the_originals_attribute_error():
    """A resource put under ``(torch.Tensor, key)``: the original fails reading its
    ``shape`` (``AttributeError``); ours says what the key holds, and keeps it."""
    for ws in (ReferenceWorkspaceManager(DEVICE), WorkspaceManager(DEVICE)):
        ws.get_persistent_resource((torch.Tensor, "p"), lambda: "a string")
        with pytest.raises(AttributeError) as caught:
            ws.get_persistent("p", (4,), torch.float32)
        if isinstance(ws, WorkspaceManager):
            assert isinstance(caught.value, interop.errors.PersistentMismatchError)
            assert "holds a str, not a tensor" in str(caught.value)
        assert ws.get_persistent_resource((torch.Tensor, "p"), list) == "a string"


class _ReprRaises:
    """A key whose ``__repr__`` raises: errors that name it must still be the errors."""

    def __repr__(self):
        raise RuntimeError("no repr")


def test_a_key_whose_repr_raises_gets_the_refusal_it_earned():
    ws = WorkspaceManager(DEVICE)
    key = _ReprRaises()
    ws.get_persistent(key, (2,), torch.float32)
    with pytest.raises(interop.errors.PersistentMismatchError, match="whose repr raised"):
        ws.get_persistent(key, (3,), torch.float32)
    with pytest.raises(fws.InvalidSpecError, match=r"hashable.*whose repr raised"):
        ws.get_persistent_resource([key], dict)
    ws.lock()
    with pytest.raises(AssertionError, match="Workspace is locked but <a key"):
        ws.get_persistent_resource(_ReprRaises(), dict)
    with pytest.raises(fws.PersistentKeyLockedError):
        fws.claim(ws.state, (0, 0), _ReprRaises())


def test_the_smallest_alignment_a_torch_view_can_start_at_is_accepted():
    ws = WorkspaceManager(DEVICE, alignment=16)  # complex128's itemsize: every view starts
    a, b = ws.get_simultaneous(((1,), torch.uint8), ((1,), torch.complex128))
    assert b.data_ptr() - a.data_ptr() == 16


@pytest.mark.parametrize("shape", [(1.0,), (True,)], ids=["float", "bool"])
def test_a_persistent_shape_equal_to_the_kept_one_but_not_ints_is_refused_on_repeat(shape):
    """(1.0,) and (True,) equal torch.Size([1]): the repeat's short check must still refuse
    them, as a first request is refused."""
    ws = WorkspaceManager(DEVICE)
    ws.get_persistent("p", (1,), torch.float32)
    for _ in range(2):
        with pytest.raises(fws.InvalidShapeError, match="must be a non-negative int"):
            ws.get_persistent("p", shape, torch.float32)
