"""The retired-buffer records stay bounded without ``stats()``, and still find every pin.

Issue 10, item 11: every growth appended a record that only ``stats()`` ever swept, 333 B of
Python heap per growth (6.6 MB after 20,000 growths). The records are counted as the
``RetiredBuffer`` objects alive in the process, whatever container holds them.
"""

from __future__ import annotations

import gc
import sys
import threading

import torch
from support.seams import retired_of

from interop import WorkspaceManager
from interop._workspace._retired import RESUME_PREFIX, SWEEP_AT_LEAST, RetiredBuffer, RetiredBuffers


def _records_alive() -> int:
    gc.collect()
    return sum(type(o) is RetiredBuffer for o in gc.get_objects())


def test_growths_without_views_keep_the_records_bounded():
    before = _records_alive()
    ws = WorkspaceManager("cpu")
    for i in range(1, 20_001):  # every request is 256 bytes larger: 20,000 growths
        ws.get_simultaneous(((256 * i,), torch.uint8))
    assert _records_alive() - before <= SWEEP_AT_LEAST  # before stats(), which sweeps too
    assert ws.stats().slots[0].growths == 20_000


def test_pinned_buffers_are_reported_among_many_growths(caplog):
    ws = WorkspaceManager("cpu")
    kept: list[torch.Tensor] = []
    kept_bytes = 0
    for i in range(1, 2_001):
        (view,) = ws.get_simultaneous(((256 * i,), torch.uint8))
        if i % 100 == 0:  # 20 views kept across calls pin their buffers
            kept.append(view)
            kept_bytes += view.untyped_storage().nbytes()  # its buffer, alignment included
        del view
    ws.get_simultaneous(((256 * 2_001,), torch.uint8))  # retire the last kept buffer too
    assert len(retired_of(ws)) <= max(SWEEP_AT_LEAST, 2 * len(kept))
    assert ws.stats().slots[0].pinned_bytes == kept_bytes
    # 20 growths left a buffer pinned: told at the 1st to 4th, then at the 8th and 16th
    warned = [r.getMessage() for r in caplog.records if "is still pinned" in r.getMessage()]
    assert len(warned) == 6 and len(kept) == 20
    assert warned[3].endswith("(4 growths of this manager have left a buffer pinned so far; "
                              "the next warning comes at 8)")  # fmt: skip
    assert "so far" not in warned[2] and "comes at 32" in warned[5]
    kept.clear()
    assert ws.stats().slots[0].pinned_bytes == 0


def test_records_of_freed_buffers_are_dropped_on_retire_alone():
    retired = RetiredBuffers()
    pinned = [torch.empty(512, dtype=torch.uint8) for _ in range(3)]
    for buffer in pinned:
        retired.retire((0, 0), buffer)
    for _ in range(10 * SWEEP_AT_LEAST):
        retired.retire((0, 1), torch.empty(256, dtype=torch.uint8))
    assert len(retired) <= max(SWEEP_AT_LEAST, 2 * len(pinned))
    assert sorted(r.slot for r in retired.pinned()) == [(0, 0)] * 3


def test_threads_retiring_and_sweeping_lose_no_pinned_record():
    retired = RetiredBuffers()
    kept: list[list[torch.Tensor]] = [[] for _ in range(4)]
    start = threading.Barrier(5)

    def grow(lane: int) -> None:
        start.wait()
        for i in range(1_000):
            buffer = torch.empty(256, dtype=torch.uint8)
            if i % 10 == 0:
                kept[lane].append(buffer[:1])
            retired.retire((0, lane), buffer)

    def sweep() -> None:
        start.wait()
        for _ in range(200):
            retired.pinned()

    threads = [threading.Thread(target=grow, args=(lane,)) for lane in range(4)]
    threads.append(threading.Thread(target=sweep))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    found = retired.pinned()
    assert sorted(r.slot for r in found) == [(0, lane) for lane in range(4) for _ in kept[lane]]
    assert all(r.nbytes == 256 for r in found)


def test_a_weak_reference_built_halfway_is_finalised_quietly(monkeypatch):
    """Dynamo's polyfill makes the object with ``__new__`` and may never run ``__init__``."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    record = RetiredBuffers().retire((0, 0), torch.empty(256, dtype=torch.uint8))
    assert record is not None
    kind = type(record.storage)
    halfway = kind.__new__(kind)
    del halfway
    gc.collect()
    assert unraisable == []


def test_nothing_is_recorded_while_dynamo_traces(monkeypatch):
    retired = RetiredBuffers()
    buffer = torch.empty(256, dtype=torch.uint8)
    view = buffer[:1]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert retired.retire((0, 0), buffer) is None
    retired.report(None)  # what the caller passes on
    monkeypatch.undo()
    assert retired.pinned() == []
    assert view.untyped_storage().nbytes() == 256


def _retire_holding_a_view(retired: RetiredBuffers) -> None:
    buffer = torch.empty(256, dtype=torch.uint8)
    view = buffer[:1]  # noqa: F841 - alive until this function returns
    record = retired.retire((0, 0), buffer)
    del buffer
    retired.report(record)


def test_a_pin_is_warned_about_in_eager_code(caplog):
    retired = RetiredBuffers()
    _retire_holding_a_view(retired)
    assert [r.levelname for r in caplog.records] == ["WARNING"]


def test_a_pin_inside_a_compiled_function_is_counted_not_warned_about(caplog):
    """Dynamo's resume functions hold what a graph break passed on until they return."""
    retired = RetiredBuffers()

    def resume(retired):
        return _retire_holding_a_view(retired)

    named = resume.__code__.replace(co_name=f"{RESUME_PREFIX}step_at_7")
    type(resume)(named, resume.__globals__)(retired)
    assert caplog.records == []
    assert retired.pinned() == []  # its view died with the function


def test_a_buffer_freed_before_its_report_is_not_warned_about(caplog):
    retired = RetiredBuffers()
    buffer = torch.empty(512, dtype=torch.uint8)
    view = buffer[:8]
    record = retired.retire((0, 0), buffer)
    del buffer
    retired.report(record)  # the view still holds it
    assert len(caplog.records) == 1 and "still pinned" in caplog.records[0].getMessage()
    caplog.clear()
    record = retired.retire((0, 0), view)
    del view
    gc.collect()
    retired.report(record)  # nothing holds it any more
    assert caplog.records == []
