"""The growth's contracts that bugs planted in the manager's memory machinery
(``interop/_workspace/``: engine, buffers, allocators, retired buffers) showed untested:
what the debug log and a failed growth's note say, the slot a suppressed allocation names,
the bytes a kept view pins; and a Ctrl-C during a failed growth's restore, which was
swallowed. Each test fails with its planted bug (the last failed on the code itself)."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from support.allocators import workspace
from support.seams import allocator_of, retired_of, slot_buffer

from interop import use_workspace_ubatch

U8 = torch.uint8
MB = 1 << 20


class Flaky:
    """Wraps a manager's allocator: allocations above ``limit`` bytes fail, as a full device."""

    def __init__(self, ws, limit, error=torch.OutOfMemoryError):
        self.real, self.limit, self.error = allocator_of(ws).allocate, limit, error

    def __call__(self, nbytes, *args, **kwargs):
        if nbytes > self.limit:
            raise self.error(f"pretend the device cannot hold {nbytes} bytes")
        return self.real(nbytes, *args, **kwargs)


def _resize_lines(caplog):
    return [r.getMessage() for r in caplog.records if "Resized workspace" in r.getMessage()]


def test_the_debug_log_of_a_second_growth_names_the_old_and_the_new_size(
    allocator, monkeypatch, caplog
):
    monkeypatch.setenv("FUNCTIONAL_WS_DEBUG", "1")
    caplog.set_level(logging.INFO, logger="interop")
    ws = workspace("cpu")
    ws.get_simultaneous(((MB,), U8))
    caplog.clear()
    ws.get_simultaneous(((2 * MB,), U8))
    (line,) = _resize_lines(caplog)
    assert "1.00 MB -> 2.00 MB (ubatch 0, lane 0)" in line, line


def test_a_failed_growth_logs_no_resize_for_the_old_capacity_allocated_again(monkeypatch, caplog):
    monkeypatch.setenv("FUNCTIONAL_WS_DEBUG", "1")
    caplog.set_level(logging.INFO, logger="interop")
    ws = workspace("cpu", allocator="torch")
    ws.get_simultaneous(((MB,), U8))
    caplog.clear()
    monkeypatch.setattr(allocator_of(ws), "allocate", Flaky(ws, limit=MB))
    with pytest.raises(torch.OutOfMemoryError):
        ws.get_simultaneous(((4 * MB,), U8))
    assert ws.state.capacity((0, 0)) == MB and slot_buffer(ws).numel() == MB
    assert _resize_lines(caplog) == []  # the slot did not grow: nothing resized


def test_a_growth_over_several_slots_logs_them_in_slot_order(allocator, monkeypatch, caplog):
    monkeypatch.setenv("FUNCTIONAL_WS_DEBUG", "1")
    caplog.set_level(logging.INFO, logger="interop")
    ws = workspace("cpu", num_ubatches=3, growth="ubatches")
    with use_workspace_ubatch(0):
        ws.get_simultaneous(((MB,), U8))
    lines = _resize_lines(caplog)
    assert [line[-len("(ubatch 0, lane 0)") :] for line in lines] == [
        "(ubatch 0, lane 0)",
        "(ubatch 1, lane 0)",
        "(ubatch 2, lane 0)",
    ], lines


class _Swallowing:
    """An ``alloc_context`` whose ``__exit__`` suppresses what went wrong inside it."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def test_a_suppressed_allocation_names_the_slot_that_got_no_buffer(allocator, monkeypatch):
    ws = workspace("cpu", alloc_context=_Swallowing)
    ws.get_simultaneous(((1000,), U8))
    provider = allocator_of(ws)
    name = "allocate_apart" if hasattr(provider, "allocate_apart") else "allocate"

    def fails(*args, **kwargs):
        raise MemoryError("pretend the device is full")

    monkeypatch.setattr(provider, name, fails)
    with pytest.raises(Exception, match=r"workspace slot\(s\) \[\(0, 0\)\] allocated"):
        ws.get_simultaneous(((100_000,), U8))


def test_a_failed_growths_note_names_the_size_it_grew_to(monkeypatch):
    ws = workspace("cpu", allocator="torch")
    ws.get_simultaneous(((1024,), U8))
    monkeypatch.setattr(allocator_of(ws), "allocate", Flaky(ws, limit=4096))
    with pytest.raises(torch.OutOfMemoryError) as info:
        ws.get_simultaneous(((100_000,), U8))
    (note,) = info.value.__notes__
    assert "growing workspace slot (0, 0) to 100096 bytes failed" in note, note
    assert "its old capacity (1024 bytes) was allocated again" in note


def test_a_pinned_buffers_bytes_are_its_whole_storage_whatever_the_allocator(allocator):
    """``stats()`` counts what a view kept across a growth holds: its buffer's whole storage
    (a pool's realigned block is larger than the buffer cut from it)."""
    ws = workspace("cpu")
    (kept,) = ws.get_simultaneous(((1000,), U8))
    ws.get_simultaneous(((100_000,), U8))  # retires the buffer ``kept`` pins
    assert ws.stats().slots[0].pinned_bytes == kept.untyped_storage().nbytes()
    assert [r.nbytes for r in retired_of(ws).pinned()] == [kept.untyped_storage().nbytes()]
    del kept
    assert ws.stats().slots[0].pinned_bytes == 0


def test_a_ctrl_c_while_a_failed_growth_restores_the_old_capacity_is_raised(monkeypatch):
    """The growth failed, and the user's Ctrl-C came while the slot's old capacity was being
    allocated again: the interrupt is what the caller gets (its context the failure), not
    the allocation error with the interrupt swallowed; the slot says it has no buffer."""
    ws = workspace("cpu", allocator="torch")
    ws.get_simultaneous(((MB,), U8))
    real = allocator_of(ws).allocate

    def allocate(nbytes, *args, **kwargs):
        if nbytes > MB:
            raise torch.OutOfMemoryError("pretend the device is full")
        raise KeyboardInterrupt  # the old capacity, allocated again

    monkeypatch.setattr(allocator_of(ws), "allocate", allocate)
    with pytest.raises(KeyboardInterrupt) as info:
        ws.get_simultaneous(((4 * MB,), U8))
    assert isinstance(info.value.__context__, torch.OutOfMemoryError)
    (note,) = info.value.__notes__
    assert f"allocating its old capacity ({MB} bytes) again was interrupted, so" in note
    assert ws.state.capacity((0, 0)) == 0
    monkeypatch.setattr(allocator_of(ws), "allocate", real)
    (view,) = ws.get_simultaneous(((MB,), U8))  # the next call works
    assert view.numel() == MB and ws.state.capacity((0, 0)) == MB


def test_a_failed_growths_pinned_buffer_warning_does_not_say_the_slot_grew(caplog):
    # The warning is logged as the old buffer is released, before the allocation that may
    # fail: it must read true whether the slot then grew or got its old capacity again.
    caplog.set_level(logging.WARNING, logger="interop")
    ws = workspace("cpu", allocator="torch")
    (kept,) = ws.get_simultaneous(((MB,), U8))  # a view the caller keeps: pins the buffer
    failing = Flaky(ws, limit=MB)
    allocator_of(ws).allocate = failing
    with pytest.raises(torch.OutOfMemoryError):
        ws.get_simultaneous(((4 * MB,), U8))
    assert ws.state.capacity((0, 0)) == MB  # the slot did not grow
    (warning,) = [r.getMessage() for r in caplog.records if "still pinned" in r.getMessage()]
    assert "grew" not in warning and "slot (0, 0)" in warning, warning
    assert "beside the slot's next buffer" in warning, warning
    del kept


@pytest.mark.parametrize("kept", ["untyped_storage", "storage"])
def test_a_buffer_held_only_by_a_storage_object_is_counted_pinned(allocator, kept, caplog):
    """A caller keeping ``view.untyped_storage()`` (or the typed ``storage()``) keeps the
    retired buffer allocated, as a kept view does: counted and warned about. Torch hands
    the count's own ``untyped_storage()`` call that same object, which the count took for
    one of the manager's own."""
    caplog.set_level(logging.WARNING, logger="interop")
    ws = workspace("cpu")
    (view,) = ws.get_simultaneous(((MB,), U8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated
        storage = getattr(view, kept)()
    del view
    ws.get_simultaneous(((2 * MB,), U8))
    assert ws.stats().slots[0].pinned_buffers == 1
    assert any("still pinned" in r.getMessage() for r in caplog.records)
    del storage
