"""ReferenceWorkspaceManager does what the original did (seeds/000), and upstream's additions.

The seed's behaviour, written down: layout, exact growth of the requesting slot only and
its order (drop, empty the cache, allocate inside ``alloc_context``), the retained span,
persistent resources, lanes and ubatches, and the original's errors and messages. Then
upstream's test cases for ``reserve`` and ``try_get_simultaneous`` (vllm-project/vllm
bf94fe2, ``tests/v1/worker/test_workspace.py``), written as our own.
"""

import gc
import weakref
from contextlib import contextmanager

import pytest
import torch

import interop.testing
from interop.testing import ReferenceWorkspaceManager, _reference

CPU = torch.device("cpu")
F32, BF16, U8 = torch.float32, torch.bfloat16, torch.uint8
use_lane, use_ubatch = ReferenceWorkspaceManager.use_lane, ReferenceWorkspaceManager.use_ubatch
#: Upstream's test shapes: 789,504 + 49,152 + 512 bytes laid out together.
UPSTREAM_SHAPES = (((24, 4, 8, 257), F32), ((24, 4, 256), BF16), ((24, 4), F32))
UPSTREAM_BYTES = 839_168


def _manager(**kwargs) -> ReferenceWorkspaceManager:
    return ReferenceWorkspaceManager(CPU, **kwargs)


def _capacities(ws: ReferenceWorkspaceManager) -> list[int]:
    return [0 if w is None else w.numel() for w in ws._current_workspaces]


def test_exported_from_interop_testing():
    assert interop.testing.ReferenceWorkspaceManager is _reference.ReferenceWorkspaceManager


def test_views_lie_back_to_back_at_256_byte_offsets_of_one_buffer():
    ws = _manager()
    views = ws.get_simultaneous(((3, 5), F32), ((7,), torch.int8), ((2, 2), BF16))
    assert [(v.shape, v.dtype) for v in views] == [
        ((3, 5), F32), ((7,), torch.int8), ((2, 2), BF16),
    ]  # fmt: skip
    base = ws._current_workspaces[0]
    assert [v.data_ptr() - base.data_ptr() for v in views] == [0, 256, 512]
    assert all(v.untyped_storage().data_ptr() == base.data_ptr() for v in views)
    assert _capacities(ws) == [768]  # each view rounded up to 256, exactly


def test_growth_is_exact_never_shrinks_and_keeps_a_buffer_that_fits():
    ws = _manager()
    ws.get_simultaneous(((1000,), U8))
    first = ws._current_workspaces[0]
    ws.get_simultaneous(((10,), U8))
    assert ws._current_workspaces[0] is first and _capacities(ws) == [1024]
    ws.get_simultaneous(((300,), F32))
    assert _capacities(ws) == [1280]


def test_only_the_requesting_slot_grows():
    ws = _manager(num_ubatches=2, num_lanes=2)
    with use_ubatch(1), use_lane(1):
        ws.get_simultaneous(((100,), U8))
    with use_lane(1):
        ws.get_retained("k", (10,), U8)
    assert _capacities(ws) == [0, 10, 0, 256]  # slots ubatch-major: (0,0) (0,1) (1,0) (1,1)


def test_growth_drops_the_old_buffer_empties_the_cache_then_allocates_in_context(monkeypatch):
    events = []
    watched = {}  # "ws" and "old": the manager and a weak reference to its outgrown buffer

    def seen(what):
        old = watched.get("old")
        buffer = watched["ws"]._current_workspaces[0]
        events.append((what, buffer is None, old is not None and old() is not None))

    @contextmanager
    def alloc_context():
        seen("enter")
        yield
        seen("exit")

    monkeypatch.setattr(_reference, "_accelerator_present", True)
    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: seen("empty_cache"))
    watched["ws"] = ws = _manager(alloc_context=alloc_context)
    ws.get_simultaneous(((256,), U8))
    watched["old"] = weakref.ref(ws._current_workspaces[0])
    events.clear()
    gc.disable()  # the old buffer must go by reference counting, before the allocation
    try:
        ws.get_simultaneous(((512,), U8))
    finally:
        gc.enable()
    # (what, slot empty, old buffer alive): dropped, cache emptied, allocated in the context
    assert events == [("empty_cache", True, False), ("enter", True, False), ("exit", False, False)]
    assert _capacities(ws) == [512]


def test_growth_on_cpu_only_torch_does_not_call_empty_cache(monkeypatch):
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is present")

    def refuse():
        raise RuntimeError("Cannot access accelerator device when none is available")

    monkeypatch.setattr(torch.accelerator, "empty_cache", refuse)
    monkeypatch.setattr(_reference, "_accelerator_present", None)
    ws = _manager()
    ws.get_simultaneous(((100,), U8))
    ws.get_simultaneous(((1000,), U8))
    assert _capacities(ws) == [1024]


def test_locked_growth_is_refused_with_the_original_message_naming_the_caller():
    ws = _manager()
    ws.get_simultaneous(((1 << 20,), U8))
    ws.lock()
    assert ws.is_locked()
    (view,) = ws.get_simultaneous(((1000,), U8))  # what fits is served
    assert view.shape == (1000,)
    message = (
        r"Workspace is locked but allocation from "
        r"'test_reference\.py:\d+:test_locked_growth_is_refused_with_the_original_message_"
        r"naming_the_caller' requires 2\.00 MB, current size is 1\.00 MB\. "
        r"Workspace growth is not allowed after locking\.$"
    )
    with pytest.raises(AssertionError, match=message):
        ws.get_simultaneous(((2 << 20,), U8))
    with pytest.raises(AssertionError, match=r"requires 4\.00 MB"):
        ws.get_retained("k", (1 << 20,), F32)
    ws.unlock()
    assert not ws.is_locked() and ws.get_retained("k", (1 << 20,), F32)[0].numel() == 1 << 20


def test_a_zero_byte_request_to_a_slot_that_never_grew_fails_as_the_original():
    with pytest.raises(TypeError, match="'NoneType' object is not subscriptable"):
        _manager().get_simultaneous(((0,), F32))


def test_a_zero_byte_retained_span_on_a_slot_that_never_grew_fails_as_vllm_0_34_0():
    """vLLM 0.34.0's ``get_retained`` asks the missing buffer for its size."""
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'numel'"):
        _manager().get_retained("kv", (0,), F32)


def test_retained_span_is_the_buffer_tail_and_intact_only_while_untouched():
    ws = _manager()
    ws.get_simultaneous(((1000,), U8))  # capacity 1024
    view, intact = ws.get_retained("kv", (100,), U8)
    assert not intact and view.data_ptr() - ws._current_workspaces[0].data_ptr() == 768
    assert ws.get_retained("kv", (100,), U8)[1]
    ws.get_simultaneous(((768,), U8))  # up to the span, not into it
    assert ws.get_retained("kv", (100,), U8)[1]
    ws.get_simultaneous(((769,), U8))  # rounded to 1024: reaches into it
    assert not ws.get_retained("kv", (100,), U8)[1]
    assert not ws.get_retained("other", (100,), U8)[1]  # another key takes it over
    assert not ws.get_retained("kv", (100,), U8)[1]
    assert not ws.get_retained("kv", (300,), U8)[1]  # another size starts elsewhere
    ws.get_simultaneous(((4096,), U8))  # growth: the span is gone
    assert not ws.get_retained("kv", (300,), U8)[1]


def test_a_retained_span_that_grows_its_buffer_is_not_intact_though_it_starts_at_zero():
    ws = _manager()
    assert ws.get_retained("kv", (100,), U8)[0].data_ptr() == ws._current_workspaces[0].data_ptr()
    assert ws.get_retained("kv", (100,), U8)[1]
    view, intact = ws.get_retained("kv", (200,), U8)  # grows: same key, start 0, new bytes
    assert not intact and _capacities(ws) == [200]
    assert view.data_ptr() == ws._current_workspaces[0].data_ptr()


def test_persistent_resources_are_made_once_per_slot_and_refused_new_when_locked():
    ws = _manager(num_lanes=2)
    calls = []
    make = lambda: calls.append(1) or object()  # noqa: E731
    first = ws.get_persistent_resource("r", make)
    assert ws.get_persistent_resource("r", make) is first and len(calls) == 1
    with use_lane(1):
        assert ws.get_persistent_resource("r", make) is not first
    zeros = ws.get_persistent("w", (4,), F32, zero_init=True)
    assert zeros.tolist() == [0.0] * 4
    zeros.fill_(7.0)
    assert ws.get_persistent("w", (4,), F32, zero_init=True).tolist() == [7.0] * 4
    ws.lock()
    assert ws.get_persistent_resource("r", make) is first
    with pytest.raises(
        AssertionError,
        match=r"^Workspace is locked but 'new' was not allocated during warmup for the "
        r"current ubatch and lane\.$",
    ):
        ws.get_persistent_resource("new", make)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: _manager(num_lanes=0), ValueError, r"^num_lanes must be at least one, got 0\.$"),
        (lambda: use_lane(-1).__enter__(), ValueError,
         r"^Workspace lane must be non-negative, got -1\.$"),
        (lambda: use_ubatch(-2).__enter__(), ValueError,
         r"^Workspace ubatch must be non-negative, got -2\.$"),
        (lambda: _lane_two_of_two(), RuntimeError,
         r"^Workspace lane 2 is not configured; manager has 2 lane\(s\)\.$"),
        (lambda: _persistent_mismatch(), ValueError,
         r"^Persistent workspace 'w' has shape=torch\.Size\(\[4\]\), dtype=torch\.float32; "
         r"requested shape=\(2, 2\), dtype=torch\.float32\.$"),
    ],
    ids=["zero-lanes", "negative-lane", "negative-ubatch", "lane-not-configured",
         "persistent-mismatch"],
)  # fmt: skip
def test_bad_input_raises_the_originals_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def _lane_two_of_two():
    with use_lane(2):
        _manager(num_lanes=2).get_simultaneous(((1,), U8))


def _persistent_mismatch():
    ws = _manager()
    ws.get_persistent("w", (4,), F32)
    ws.get_persistent("w", (2, 2), F32)


# ----- upstream's reserve and try_get_simultaneous (bf94fe2) -----


def test_get_simultaneous_grows_when_unlocked():
    a, b = _manager().get_simultaneous(((16,), F32), ((8,), F32))
    assert (a.shape, b.shape, a.dtype) == ((16,), (8,), F32)


def test_try_get_simultaneous_returns_none_when_locked_and_too_small():
    ws = _manager()
    ws.lock()
    assert ws.try_get_simultaneous(*UPSTREAM_SHAPES) is None
    assert _capacities(ws) == [0]


def test_try_get_simultaneous_returns_views_when_locked_and_it_fits():
    ws = _manager()
    ws.get_simultaneous(*UPSTREAM_SHAPES)
    ws.lock()
    result = ws.try_get_simultaneous(*UPSTREAM_SHAPES)
    assert result is not None
    assert [(v.shape, v.dtype) for v in result] == list(UPSTREAM_SHAPES)
    expected = [v.data_ptr() for v in ws.get_simultaneous(*UPSTREAM_SHAPES)]
    assert [v.data_ptr() for v in result] == expected


def test_try_get_simultaneous_grows_when_unlocked():
    ws = _manager()
    result = ws.try_get_simultaneous(((1024,), F32))
    assert result is not None and result[0].shape == (1024,) and _capacities(ws) == [4096]


def test_try_get_simultaneous_forgets_a_retained_span_it_reaches():
    ws = _manager()
    ws.get_simultaneous(((1024,), U8))
    ws.get_retained("kv", (256,), U8)
    ws.lock()
    ws.try_get_simultaneous(((1024,), U8))
    assert not ws.get_retained("kv", (256,), U8)[1]


def test_reserve_sizes_one_layout_of_all_pairs_in_every_ubatch_slot():
    ws = _manager(num_ubatches=2)
    ws.reserve(*UPSTREAM_SHAPES)
    assert _capacities(ws) == [UPSTREAM_BYTES, UPSTREAM_BYTES]
    buffers = list(ws._current_workspaces)
    ws.reserve(*UPSTREAM_SHAPES)  # idempotent
    assert all(a is b for a, b in zip(ws._current_workspaces, buffers, strict=True))
    ws.lock()
    for ubatch in range(2):
        with use_ubatch(ubatch):
            result = ws.try_get_simultaneous(*UPSTREAM_SHAPES)
            assert result is not None, f"ubatch {ubatch} fell back to None"
            assert [v.shape for v in result] == [s for s, _ in UPSTREAM_SHAPES]


def test_reserve_covers_the_current_lanes_ubatches_and_is_refused_locked_when_short():
    ws = _manager(num_ubatches=2, num_lanes=2)
    with use_lane(1):
        ws.reserve(((100,), U8))
    assert _capacities(ws) == [0, 256, 0, 256]
    ws.lock()
    with use_lane(1):
        ws.reserve(((100,), U8))
        with pytest.raises(AssertionError, match="Workspace is locked"):
            ws.reserve(((300,), U8))


def test_get_simultaneous_does_not_size_a_sibling_ubatch():
    ws = _manager(num_ubatches=2)
    ws.get_simultaneous(((1024,), F32))
    ws.lock()
    with use_ubatch(1):
        assert ws.try_get_simultaneous(((128,), F32)) is None
