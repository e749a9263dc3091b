"""Growth beyond the original: retired buffers pinned by live views are reported, growth during
CUDA graph capture is refused, and a growth's peak memory stays at the new buffer."""

import gc
import logging

import pytest
import torch
from conftest import TEST_DEVICE as DEVICE
from conftest import needs_cuda
from support.allocators import workspace
from support.seams import slot_buffer

from interop import WorkspaceManager, use_workspace_ubatch
from interop.errors import GrowthDuringCaptureError

U8 = torch.uint8


@pytest.fixture
def warnings_log(caplog):
    caplog.set_level(logging.WARNING, logger="interop")
    return caplog


@pytest.mark.usefixtures("allocator")
def test_warning_fires_when_a_view_outlives_growth(warnings_log):
    ws = workspace(DEVICE)
    (kept,) = ws.get_simultaneous(((1000,), U8))
    ws.get_simultaneous(((5000,), U8))
    assert "slot (0, 0)" in warnings_log.text and "still pinned" in warnings_log.text
    stats = ws.stats()
    assert stats.slots[0].pinned_buffers == 1 and stats.slots[0].pinned_bytes >= 1024
    assert stats.pinned_bytes == stats.slots[0].pinned_bytes
    del kept
    gc.collect()
    assert ws.stats().pinned_bytes == 0


@pytest.mark.usefixtures("allocator")
def test_silent_when_no_view_outlives_growth(warnings_log):
    ws = workspace(DEVICE)
    for _ in range(3):  # memoised: the manager's own references must not count
        ws.get_simultaneous(((1000,), U8), ((10,), torch.float32))
    ws.get_retained("kv", (100,), U8)
    ws.get_persistent("w", (8,), torch.float32)
    ws.get_simultaneous(((5000,), U8))
    assert warnings_log.text == ""
    assert ws.stats().pinned_bytes == 0


@pytest.mark.usefixtures("allocator")
def test_a_retained_view_kept_across_growth_is_reported(warnings_log):
    ws = workspace(DEVICE)
    view, _ = ws.get_retained("kv", (1000,), U8)
    ws.reserve(((4096,), U8))
    assert "still pinned" in warnings_log.text
    assert ws.stats().slots[0].pinned_buffers == 1
    del view


@pytest.mark.usefixtures("allocator")
def test_ubatches_policy_reports_the_other_slot(warnings_log):
    ws = workspace(DEVICE, num_ubatches=2, growth="ubatches")
    ws.get_simultaneous(((100,), U8))
    with use_workspace_ubatch(1):
        (other,) = ws.get_simultaneous(((100,), U8))
    ws.get_simultaneous(((5000,), U8))  # grows both ubatch slots of lane 0
    assert "slot (1, 0)" in warnings_log.text and "slot (0, 0)" not in warnings_log.text
    assert [s.pinned_buffers for s in ws.stats().slots] == [0, 1]
    del other


@pytest.mark.skipif(DEVICE.type != "cpu", reason="JAX here is CPU-only")
@pytest.mark.usefixtures("allocator")
def test_a_jax_array_imported_from_a_view_pins_the_retired_buffer(warnings_log):
    jax = pytest.importorskip("jax")
    ws = workspace(DEVICE)
    (view,) = ws.get_simultaneous(((256,), torch.float32))
    view.fill_(1.5)
    array = jax.dlpack.from_dlpack(view)
    del view
    gc.collect()
    ws.get_simultaneous(((10000,), U8))
    assert "still pinned" in warnings_log.text
    assert ws.stats().slots[0].pinned_buffers == 1
    assert float(array[0]) == 1.5
    del array
    gc.collect()
    assert ws.stats().pinned_bytes == 0


def test_growth_during_capture_is_refused_and_changes_nothing(monkeypatch):
    # Without a GPU, pretend one is capturing: the check runs before any allocation.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr("interop._workspace._facade.device_memory", lambda device: None)
    ws = WorkspaceManager(torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    before = ws.state
    with pytest.raises(GrowthDuringCaptureError, match="captured") as info:
        ws.get_simultaneous(((64,), U8))
    assert isinstance(info.value, RuntimeError)
    assert ws.state is before and slot_buffer(ws, (0, 0)) is None


@needs_cuda
def test_growth_during_real_capture_is_refused_and_replay_works():
    ws = WorkspaceManager(DEVICE)
    ws.reserve([((1024,), torch.float32), ((1024,), torch.float32)])
    ws.lock()
    ws.unlock()  # unlocked on purpose: only the capture check may refuse
    source, target = ws.get_simultaneous(((1024,), torch.float32), ((1024,), torch.float32))
    source.fill_(1.0)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        target.copy_(source * 2)  # warm up on the side stream
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        a, b = ws.get_simultaneous(((1024,), torch.float32), ((1024,), torch.float32))
        b.copy_(a * 2)
        with pytest.raises(GrowthDuringCaptureError):
            ws.get_simultaneous(((1 << 20,), torch.float32))
    before = ws.state
    source.fill_(3.0)
    graph.replay()
    torch.cuda.synchronize()
    assert target.eq(6.0).all() and ws.state is before
    ws.get_simultaneous(((1 << 20,), torch.float32))  # outside capture: grows


@needs_cuda
def test_growth_peak_is_the_new_buffer_when_no_view_is_pinned():
    ws = WorkspaceManager(DEVICE)
    ws.get_simultaneous(((64 << 20,), U8))
    torch.cuda.synchronize()
    others = torch.cuda.memory_allocated() - (64 << 20)
    torch.cuda.reset_peak_memory_stats()
    ws.get_simultaneous(((128 << 20,), U8))
    peak = torch.cuda.max_memory_allocated() - others
    assert peak <= (128 << 20) + ws.state.alignment, peak
