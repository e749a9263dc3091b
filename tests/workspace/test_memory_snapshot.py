"""A recording as torch's memory snapshot: ``History.memory_snapshot()`` and
``History.save_memory_snapshot(path)``, read by torch's own readers (``torch.cuda._memory_viz``:
``segsum``, ``trace``, ``segments``, ``memory``, ``segment_plot``, ``trace_plot``, all on
the CPU) and checked the way the viewer at https://pytorch.org/memory_viz reads them: its
unpickler knows a few opcodes only, and it walks the trace back from the segments."""

import base64
import contextlib
import pickle
import pickletools
import re

import hypothesis.strategies as st
import pytest
import torch
import torch.cuda._memory_viz as viz
from hypothesis import given, settings
from support.scenes import recorded_history
from support.seams import allocator_of

import functional_ws as fws
from interop import WorkspaceLockedError, WorkspaceManager, use_workspace_ubatch

F32, BF16, I32, U8 = torch.float32, torch.bfloat16, torch.int32, torch.uint8

#: The opcodes the viewer's unpickler reads (``unpickle`` in torch/utils/viz/MemoryViz.js);
#: any other makes it throw "UNKNOWN OPCODE".
VIEWER_OPCODES = {
    "PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET",
    "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1",
    "LONG_BINGET", "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT",
    "SHORT_BINUNICODE", "BINUNICODE", "STOP", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "BINFLOAT",
}  # fmt: skip
#: ``_snapshot()``'s fields (torch/csrc/cuda/memory_snapshot.cpp).
SEGMENT_FIELDS = {"device", "address", "total_size", "allocated_size", "active_size",
                  "requested_size", "stream", "segment_type", "segment_pool_id",
                  "is_expandable", "frames", "blocks"}  # fmt: skip
BLOCK_FIELDS = {"address", "size", "requested_size", "state", "frames"}
ENTRY_FIELDS = {"action", "addr", "size", "stream", "frames"}
OOM_FIELDS = {"action", "device_free", "size", "stream", "frames"}


def replay_backwards(snapshot, device=0):
    """Walk the trace back from the segments as the viewer's segment view does: every
    ``alloc`` finds its block alive, every ``segment_alloc`` its segment (with no block
    left in it), every block lies in a segment. Returns the segments and blocks there were
    before the first entry."""
    segments = {s["address"]: s["total_size"] for s in snapshot["segments"]
                if s["device"] == device}  # fmt: skip
    blocks = {b["address"]: b["requested_size"] for s in snapshot["segments"]
              for b in s["blocks"] if b["state"] == "active_allocated"}  # fmt: skip

    def inside(addr):
        return any(a <= addr < a + size for a, size in segments.items())

    for i, e in enumerate(reversed(snapshot["device_traces"][device])):
        action, where = e["action"], f"entry -{i + 1}: {e}"
        if action == "alloc":
            assert blocks.pop(e["addr"]) == e["size"], where
        elif action == "free_completed":
            assert e["addr"] not in blocks, where
            blocks[e["addr"]] = e["size"]
        elif action == "free_requested":
            assert blocks[e["addr"]] == e["size"], where
        elif action == "segment_alloc":
            assert segments.pop(e["addr"]) == e["size"], where
            assert not [b for b in blocks if e["addr"] <= b < e["addr"] + e["size"]], where
        elif action == "segment_free":
            assert e["addr"] not in segments, where
            segments[e["addr"]] = e["size"]
        else:
            assert action == "oom", where
        assert all(map(inside, blocks)), where
    return segments, blocks


def check_snapshot(snapshot, device=0):
    """Everything a reader of ``_snapshot()`` relies on: the fields, blocks tiling their
    segment from its address, torch's readers accepting it, the viewer's walk back."""
    for seg in snapshot["segments"]:
        assert set(seg) == SEGMENT_FIELDS and seg["device"] == device
        at = seg["address"]
        for block in seg["blocks"]:
            assert set(block) == BLOCK_FIELDS and block["address"] == at
            assert block["state"] in ("active_allocated", "inactive") and block["size"] > 0
            assert block["requested_size"] <= block["size"]
            at += block["size"]
        assert at == seg["address"] + seg["total_size"]
        active = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
        assert seg["allocated_size"] == seg["active_size"] == sum(b["size"] for b in active)
    assert len(snapshot["device_traces"]) == device + 1
    for entry in snapshot["device_traces"][device]:
        assert set(entry) == (OOM_FIELDS if entry["action"] == "oom" else ENTRY_FIELDS)
    viz.segsum(snapshot)  # asserts its own accounting
    viz.trace(snapshot)
    viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    for html in (viz.segment_plot(snapshot), viz.trace_plot(snapshot)):
        assert pickle.loads(_embedded(html)) == snapshot
    opcodes = {op.name for op, _, _ in pickletools.genops(pickle.dumps(snapshot, protocol=4))}
    assert opcodes <= VIEWER_OPCODES, opcodes - VIEWER_OPCODES
    return replay_backwards(snapshot, device)


def _embedded(html):
    """The pickle a viewer page carries (base64, padded with NULs to a multiple of 3)."""
    data = re.search(r'"base64": "([^"]+)"', html).group(1)
    return base64.b64decode(data).rstrip(b"\x00") + b"."  # STOP is the last byte


def _trace(snapshot):
    return [(e["action"], e["size"]) for e in snapshot["device_traces"][0]]


def test_a_warm_up_reads_in_torchs_readers_with_a_segment_per_slot_buffer():
    ws, history = recorded_history()
    snapshot = history.memory_snapshot()
    start_segments, start_blocks = check_snapshot(snapshot)
    assert start_segments == {} and start_blocks == {}  # the recording began empty
    segments = {s["address"]: s for s in snapshot["segments"]}
    assert sorted(s["total_size"] for s in segments.values()) == sorted(
        s.capacity for s in ws.state.slots if s.capacity
    )
    growths = sum(s.growths for s in ws.state.slots)
    actions = [e["action"] for e in snapshot["device_traces"][0]]
    assert actions.count("segment_alloc") == growths and actions.count("oom") == 1
    assert actions.count("segment_free") == growths - len(segments)
    summary = viz.segsum(snapshot)
    assert f"segments: {len(segments)}" in summary


def test_the_blocks_are_the_last_views_of_each_slot_and_the_intact_span():
    ws = WorkspaceManager("cpu", num_ubatches=2)
    with ws.recording() as history:
        ws.get_simultaneous(((1000,), F32), ((10,), I32))
        ws.get_retained("kv", (100,), U8)
        with use_workspace_ubatch(1):
            ws.get_simultaneous(((64,), BF16))
        ws.get_simultaneous(((300,), F32), ((0,), I32), ((5,), U8))  # below the span
    (seg0, seg1) = sorted(history.memory_snapshot()["segments"], key=lambda s: s["address"])
    check_snapshot(history.memory_snapshot())
    layout, span = ws.last_layouts[(0, 0)], ws.last_spans[(0, 0)]
    assert ws.state.slots[0].retained == ("kv", span.offset)
    active = [(b["address"] - seg0["address"], b["requested_size"]) for b in seg0["blocks"]
              if b["state"] == "active_allocated"]  # fmt: skip
    views = [(o, s.nbytes) for o, s in zip(layout.offsets, layout.specs, strict=True) if s.nbytes]
    assert active == [*views, (span.offset, 100)]  # the zero-sized view takes nothing
    sizes = [b["size"] for b in seg0["blocks"] if b["state"] == "active_allocated"]
    assert sizes == [1280, 256, seg0["total_size"] - span.offset]  # padding is rounding
    assert [(b["state"], b["requested_size"]) for b in seg1["blocks"]] == [
        ("active_allocated", 128)
    ]
    frames = [b["frames"] for b in seg0["blocks"] if b["state"] == "active_allocated"]
    assert frames[0] == [{"filename": "history", "line": 4,
                          "name": "get_simultaneous(((300,), float32), ((0,), int32), "
                                  "((5,), uint8)): view 0 (float32) in slot (0, 0)"}]  # fmt: skip


def test_a_growth_frees_the_views_and_the_old_segment_before_allocating_the_new_one():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_simultaneous(((100,), F32))  # bytes 0 to 400 of 512
        ws.get_retained("kv", (16,), U8)  # from 256: it takes the view's bytes
        ws.get_simultaneous(((1000,), F32))  # grows: the span goes with the buffer
    snapshot = history.memory_snapshot()
    check_snapshot(snapshot)
    assert _trace(snapshot) == [
        ("segment_alloc", 512), ("alloc", 400),
        ("free_requested", 400), ("free_completed", 400), ("alloc", 16),
        ("free_requested", 16), ("free_completed", 16), ("segment_free", 512),
        ("segment_alloc", 4096), ("alloc", 4000),
    ]  # fmt: skip
    span = snapshot["device_traces"][0][4]
    assert span["addr"] == snapshot["device_traces"][0][0]["addr"] + 256


def test_a_span_handed_out_again_intact_stays_one_block():
    ws = WorkspaceManager("cpu")
    _ = ws.get_simultaneous(((1024,), U8))
    with ws.recording() as history:
        ws.get_retained("kv", (16,), F32)
        assert ws.get_retained("kv", (16,), F32)[1]  # intact
        ws.get_retained("other", (16,), F32)  # another key takes the span over
        ws.get_simultaneous(((1000,), U8))  # reaches into it
    snapshot = history.memory_snapshot()
    start_segments, _ = check_snapshot(snapshot)
    assert list(start_segments.values()) == [1024]  # a buffer from before the recording
    assert _trace(snapshot) == [
        ("alloc", 64),
        ("free_requested", 64), ("free_completed", 64), ("alloc", 64),
        ("free_requested", 64), ("free_completed", 64), ("alloc", 1000),
    ]  # fmt: skip


def test_refused_growths_are_oom_entries():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_simultaneous(((100,), F32))
        ws.lock()
        assert ws.try_get_simultaneous(((1000,), F32)) is None
        with pytest.raises(WorkspaceLockedError):
            ws.get_retained("kv", (4096,), U8)
        ws.unlock()
        with pytest.raises(fws.CapacityLimitError):  # above the device's memory
            ws.get_simultaneous(((10**15,), U8))
    snapshot = history.memory_snapshot()
    check_snapshot(snapshot)
    ooms = [e for e in snapshot["device_traces"][0] if e["action"] == "oom"]
    assert [(e["size"], e["device_free"]) for e in ooms] == [
        (4096, 512),
        (4096, 512),
        (10**15, 512),
    ]
    assert "holds 512 B (WorkspaceLockedError" in ooms[1]["frames"][0]["name"]
    assert "raise OutOfMemoryError # 4.0KiB requested, 512.0B free in CUDA" in viz.trace(snapshot)


def test_a_failed_allocation_frees_the_old_segment_then_the_oom_then_the_old_size_again(
    monkeypatch,
):
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((1024,), U8))
    real = allocator_of(ws).allocate

    def flaky(nbytes, *args, **kwargs):
        if nbytes > 4096:
            raise torch.OutOfMemoryError("pretend the device is full")
        return real(nbytes, *args, **kwargs)

    monkeypatch.setattr(allocator_of(ws), "allocate", flaky)
    with ws.recording() as history, contextlib.suppress(torch.OutOfMemoryError):
        ws.get_simultaneous(((100_000,), U8))
    snapshot = history.memory_snapshot()
    check_snapshot(snapshot)
    assert _trace(snapshot) == [("segment_free", 1024), ("oom", 100_096),
                                ("segment_alloc", 1024)]  # fmt: skip


def test_ubatches_growth_allocates_a_segment_per_slot():
    ws = WorkspaceManager("cpu", num_ubatches=2, growth="ubatches")
    with ws.recording() as history:
        ws.get_simultaneous(((1000,), U8))
        ws.reserve(((5000,), U8))
    snapshot = history.memory_snapshot(device=1)
    check_snapshot(snapshot, device=1)
    assert snapshot["device_traces"][0] == []
    assert [(e["action"], e["size"]) for e in snapshot["device_traces"][1]] == [
        ("segment_alloc", 1024), ("segment_alloc", 1024), ("alloc", 1000),
        ("free_requested", 1000), ("free_completed", 1000),
        ("segment_free", 1024), ("segment_free", 1024),
        ("segment_alloc", 5120), ("segment_alloc", 5120),
    ]  # fmt: skip
    addresses = [s["address"] for s in snapshot["segments"]]
    assert len(set(addresses)) == 2 and all(a % (2 * 1024 * 1024) == 0 for a in addresses)


def test_the_file_is_a_protocol_4_pickle_the_viewer_reads(tmp_path):
    _, history = recorded_history()
    path = tmp_path / "workspace.pickle"
    history.save_memory_snapshot(path)
    data = path.read_bytes()
    assert data[:2] == b"\x80\x04"  # PROTO 4
    assert pickle.loads(data) == history.memory_snapshot()
    assert {op.name for op, _, _ in pickletools.genops(data)} <= VIEWER_OPCODES
    assert history.memory_snapshot() == history.memory_snapshot()  # the same every time


@pytest.mark.parametrize("device", [-1, 1.0, "0", True])
def test_a_bad_device_index_is_refused(device, tmp_path):
    _, history = recorded_history()
    with pytest.raises(ValueError, match=f"device must be an int from 0, got {device!r}"):
        history.save_memory_snapshot(tmp_path / "x.pickle", device=device)
    assert not (tmp_path / "x.pickle").exists()


CALLS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "retain", "reserve", "lock", "unlock", "try"]),
        st.integers(0, 1),  # the ubatch
        st.lists(st.integers(0, 3000), min_size=1, max_size=3),  # bytes per view
        st.sampled_from(["kv", "other"]),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(calls=CALLS, growth=st.sampled_from(["slot", "ubatches"]))
def test_any_recording_reads_back_as_the_buffers_and_views_it_left(calls, growth):
    ws = WorkspaceManager("cpu", num_ubatches=2, growth=growth)
    with ws.recording() as history:
        for kind, ubatch, sizes, key in calls:
            with use_workspace_ubatch(ubatch), contextlib.suppress(WorkspaceLockedError):
                pairs = [((n,), U8) for n in sizes]
                if kind == "acquire":
                    ws.get_simultaneous(*pairs)
                elif kind == "try":
                    ws.try_get_simultaneous(*pairs)
                elif kind == "retain":
                    ws.get_retained(key, (sizes[0],), U8)
                elif kind == "reserve":
                    ws.reserve(*pairs)
                else:
                    getattr(ws, kind)()
    snapshot = history.memory_snapshot()
    start_segments, start_blocks = check_snapshot(snapshot)
    assert start_segments == {} and start_blocks == {}
    capacities = sorted(s["total_size"] for s in snapshot["segments"])
    assert capacities == sorted(s.capacity for s in ws.state.slots if s.capacity)
