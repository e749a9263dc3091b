"""Upstream vLLM's newer API, with only the import changed (issue: a drop-in for today's
vLLM, part 1).

vllm-project/vllm commit bf94fe2 added ``reserve`` (ONE simultaneous layout of all the
pairs, in every ubatch slot) and ``try_get_simultaneous`` (``None`` only when locked and too
small), and its tests read ``manager._current_workspaces``. Each scenario below is one of
upstream's test cases (``tests/v1/worker/test_workspace.py``, and the lane tests that
followed), written as our own: it runs on our façade and on the reference copy of upstream's
algorithm (``interop.testing.ReferenceWorkspaceManager``), and both must agree.
"""

import pytest
import torch

import interop
from interop import WorkspaceManager
from interop.testing import ReferenceWorkspaceManager

F32, BF16, U8 = torch.float32, torch.bfloat16, torch.uint8
#: Upstream's test shapes (issue #42544's decode scratch).
SHAPES = (((24, 4, 8, 257), F32), ((24, 4, 256), BF16), ((24, 4), F32))


class Ours:
    """Our façade, with upstream's slot selection."""

    make = staticmethod(lambda **kw: WorkspaceManager(torch.device("cpu"), **kw))
    ubatch = staticmethod(interop.use_workspace_ubatch)
    lane = staticmethod(interop.use_workspace_lane)


class Upstream:
    """The reference copy of upstream's algorithm."""

    make = staticmethod(lambda **kw: ReferenceWorkspaceManager(torch.device("cpu"), **kw))
    ubatch = staticmethod(ReferenceWorkspaceManager.use_ubatch)
    lane = staticmethod(ReferenceWorkspaceManager.use_lane)


def _sizes(ws):
    return [None if b is None else b.numel() for b in ws._current_workspaces]


def _shapes(views):
    return None if views is None else [(tuple(v.shape), v.dtype) for v in views]


# Each scenario takes a side (Ours or Upstream) and returns what it observed.
def grows_when_unlocked(side):
    ws = side.make(num_ubatches=1)
    views = ws.get_simultaneous(((16,), F32), ((8,), F32))
    return _shapes(views), _sizes(ws)


def raises_on_locked_undersized(side):
    ws = side.make(num_ubatches=1)
    ws.lock()
    with pytest.raises(AssertionError, match="Workspace is locked"):
        ws.get_simultaneous(((1024,), F32))
    return _sizes(ws)


def succeeds_on_locked_when_fits(side):
    ws = side.make(num_ubatches=1)
    ws.get_simultaneous(((1024,), F32))
    ws.lock()
    return _shapes(ws.get_simultaneous(((128,), F32))), _sizes(ws)


def try_returns_none_when_locked_undersized(side):
    ws = side.make(num_ubatches=1)
    ws.lock()
    return ws.try_get_simultaneous(*SHAPES), _sizes(ws)


def try_returns_views_when_locked_and_fits(side):
    ws = side.make(num_ubatches=1)
    ws.get_simultaneous(*SHAPES)
    ws.lock()
    return _shapes(ws.try_get_simultaneous(*SHAPES)), _sizes(ws)


def try_grows_when_unlocked(side):
    ws = side.make(num_ubatches=1)
    return _shapes(ws.try_get_simultaneous(((1024,), F32))), _sizes(ws)


def reserve_sizes_every_ubatch_slot(side):
    ws = side.make(num_ubatches=2)
    ws.reserve(*SHAPES)
    ws.reserve(*SHAPES)  # idempotent
    ws.lock()
    seen = []
    for ubatch in range(2):
        with side.ubatch(ubatch):
            seen.append(_shapes(ws.try_get_simultaneous(*SHAPES)))
    return seen, _sizes(ws)


def get_simultaneous_does_not_size_sibling(side):
    ws = side.make(num_ubatches=2)
    with side.ubatch(0):
        ws.get_simultaneous(((1024,), F32))
    ws.lock()
    with side.ubatch(1):
        return ws.try_get_simultaneous(((128,), F32)), _sizes(ws)


def lanes_do_not_alias_and_restore_context(side):
    ws = side.make(num_ubatches=2, num_lanes=2)
    before = _sizes(ws)
    (target,) = ws.get_simultaneous(((512,), U8))
    with side.lane(1):
        (draft,) = ws.get_simultaneous(((256,), U8))
        (draft_reused,) = ws.get_simultaneous(((8,), U8))
    (target_reused,) = ws.get_simultaneous(((8,), U8))
    return (
        before,
        _sizes(ws),
        target.data_ptr() != draft.data_ptr(),
        draft.data_ptr() == draft_reused.data_ptr(),
        target.data_ptr() == target_reused.data_ptr(),
    )


def lanes_compose_with_ubatches(side):
    ws = side.make(num_ubatches=2, num_lanes=2)
    pointers = set()
    for ubatch in range(2):
        for lane in range(2):
            with side.ubatch(ubatch), side.lane(lane):
                (buffer,) = ws.get_simultaneous(((16,), U8))
                pointers.add(buffer.data_ptr())
    return len(pointers), _sizes(ws)


def reserve_in_another_lane_sizes_that_lanes_ubatches(side):
    ws = side.make(num_ubatches=2, num_lanes=2)
    with side.lane(1):
        ws.reserve(((300,), U8), ((10,), F32))
    return _sizes(ws)


def reserve_while_locked_and_too_small_raises(side):
    ws = side.make(num_ubatches=2)
    ws.reserve(((100,), U8))
    ws.lock()
    ws.reserve(((100,), U8))  # fits: nothing to do
    with pytest.raises(AssertionError, match="Workspace is locked"):
        ws.reserve(((1000,), U8))
    return _sizes(ws)


SCENARIOS = [
    grows_when_unlocked,
    raises_on_locked_undersized,
    succeeds_on_locked_when_fits,
    try_returns_none_when_locked_undersized,
    try_returns_views_when_locked_and_fits,
    try_grows_when_unlocked,
    reserve_sizes_every_ubatch_slot,
    get_simultaneous_does_not_size_sibling,
    lanes_do_not_alias_and_restore_context,
    lanes_compose_with_ubatches,
    reserve_in_another_lane_sizes_that_lanes_ubatches,
    reserve_while_locked_and_too_small_raises,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_ours_behaves_as_upstream(scenario):
    assert scenario(Ours) == scenario(Upstream)


def test_upstream_reserve_sizes_one_layout_not_one_per_pair():
    ws = WorkspaceManager("cpu", num_ubatches=2)
    ws.reserve(*SHAPES)
    # 24*4*8*257*4 + 24*4*256*2 + 24*4*4, each rounded up to 256 bytes, back to back
    assert _sizes(ws) == [839_168, 839_168]
    assert [s.capacity for s in ws.state.slots] == [839_168, 839_168]


def test_current_workspaces_is_read_only():
    ws = WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((100,), U8))
    seen = ws._current_workspaces
    seen[0] = None
    assert ws._current_workspaces[0] is not None and ws._current_workspaces[1] is None
    with pytest.raises(AttributeError):
        ws._current_workspaces = []


def test_reserve_slots_all_and_explicit():
    ws = WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    ws.reserve(((1000,), U8))  # the current lane (0): both ubatches
    assert [s.capacity for s in ws.state.slots] == [1024, 0, 1024, 0]
    ws.reserve(((2000,), U8), slots="all")
    assert [s.capacity for s in ws.state.slots] == [2048] * 4
    ws.reserve(((4000,), U8), slots=[(1, 1)])
    assert [s.capacity for s in ws.state.slots] == [2048, 2048, 2048, 4096]


def test_reserve_many_takes_the_largest_request():
    ws = WorkspaceManager("cpu")
    ws.reserve_many([list(SHAPES), [((900_000,), U8)], [((10,), F32)] * 3])
    assert ws.state.capacity((0, 0)) == 900_096
    ws.lock()
    assert ws.try_get_simultaneous(*SHAPES) is not None


def test_module_level_reserve_workspace_before_lock_workspace():
    interop.init_workspace_manager("cpu", num_ubatches=2)
    try:
        interop.reserve_workspace(*SHAPES)
        interop.lock_workspace()
        manager = interop.current_workspace_manager()
        for ubatch in range(2):
            with interop.use_workspace_ubatch(ubatch):
                assert manager.try_get_simultaneous(*SHAPES) is not None
    finally:
        interop.reset_workspace_manager()


def test_reserve_workspace_needs_a_manager():
    interop.reset_workspace_manager()
    with pytest.raises(AssertionError, match="not initialized"):
        interop.reserve_workspace(((8,), U8))


@pytest.mark.parametrize(
    ("call", "kind", "fragments"),
    [
        (lambda ws: ws.reserve(((8,), "float32")), ValueError, ["shapes_and_dtypes[0]", "torch"]),
        (lambda ws: ws.reserve((8, U8)), ValueError, ["shapes_and_dtypes[0]", "8"]),
        (lambda ws: ws.reserve(((8,), U8), slots="some"), ValueError, ["slots", "'some'"]),
        (lambda ws: ws.reserve_many(((8,), U8)), ValueError, ["requests[0]"]),
        (lambda ws: ws.reserve_many(5), ValueError, ["requests", "5"]),
        (lambda ws: ws.reserve(((8,), U8), slots=[(0, 3)]), RuntimeError, ["lane 3"]),
    ],
    ids=["dtype", "not-a-pair", "slots-word", "many-not-nested", "many-not-a-list", "lane"],
)
def test_reserve_refuses_bad_input_and_changes_nothing(call, kind, fragments):
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((10,), U8))
    before = ws.state
    with pytest.raises(kind) as info:
        call(ws)
    assert all(f in str(info.value) for f in fragments), str(info.value)
    assert ws.state is before


def test_try_get_simultaneous_changes_nothing_when_it_returns_none():
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((100,), U8))
    _tail, _ = ws.get_retained("kv", (4,), U8)
    ws.lock()
    before = ws.state
    assert ws.try_get_simultaneous(((10**6,), U8)) is None
    assert ws.state is before and ws.get_retained("kv", (4,), U8)[1]
