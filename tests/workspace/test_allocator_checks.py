"""Allocator results that pass the old checks but would break the workspace are refused:
memory another slot is using, torch's negative bit (issue 10, item 9), and storage that does not
hold the bytes (freed, fake)."""

from __future__ import annotations

import pytest
import torch
from conftest import TEST_DEVICE as DEVICE
from support.seams import slots_snapshot

import interop
from interop import WorkspaceManager, use_workspace_ubatch
from interop._workspace._providers import FunctionAllocator, check_allocation

U8 = torch.uint8
POOL = FunctionAllocator(lambda nbytes, device: torch.empty(0))  # named in the messages


def _arena(nbytes: int = 8192) -> torch.Tensor:
    return torch.empty((nbytes,), dtype=U8, device=DEVICE)


def _check(result, nbytes, in_use=()):
    return check_allocation(result, nbytes, DEVICE, POOL, in_use=in_use)


ARENA = _arena()
# id, the result, bytes asked for, the buffers in use
OVERLAPPING = [
    ("the-same-block", ARENA[:1024], 1024, [ARENA[:1024]]),
    ("starts-inside", ARENA[512:1536], 1024, [ARENA[:1024]]),
    ("ends-inside", ARENA[:1024], 1024, [ARENA[512:1536]]),
    ("contains-it", ARENA[:4096], 4096, [ARENA[1024:2048]]),
    ("inside-it", ARENA[1024:2048], 1024, [ARENA[:4096]]),
    ("one-byte", ARENA[1023:2047], 1024, [ARENA[:1024]]),
    ("its-last-byte", ARENA[:1024], 1024, [ARENA[1023:2047]]),
    ("the-second-of-several", ARENA[2048:3072], 1024, [ARENA[:1024], None, ARENA[2560:4096]]),
]  # fmt: skip
DISJOINT = [
    ("adjacent-after", ARENA[1024:2048], 1024, [ARENA[:1024]]),
    ("adjacent-before", ARENA[:1024], 1024, [ARENA[1024:2048]]),
    ("no-buffers-yet", ARENA[:1024], 1024, [None, None]),
    ("an-empty-buffer", ARENA[:1024], 1024, [ARENA[512:512]]),
    ("only-the-bytes-asked-count", ARENA[:2048], 1024, [ARENA[1024:2048]]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("result", "nbytes", "in_use"),
    [case[1:] for case in OVERLAPPING],
    ids=[case[0] for case in OVERLAPPING],
)
def test_memory_another_slot_uses_is_refused(result, nbytes, in_use):
    with pytest.raises(interop.errors.AllocationOverlapError) as info:
        _check(result, nbytes, in_use)
    err = info.value
    assert isinstance(err, interop.errors.AllocationValueError) and isinstance(err, ValueError)
    assert err.reason == "overlap"
    assert "overlap" in str(err) and f"{result.data_ptr():#x}" in str(err)
    assert "allocator '<lambda>'" in str(err)


@pytest.mark.parametrize(
    ("result", "nbytes", "in_use"),
    [case[1:] for case in DISJOINT],
    ids=[case[0] for case in DISJOINT],
)
def test_disjoint_memory_is_accepted(result, nbytes, in_use):
    assert _check(result, nbytes, in_use) is result


def test_a_buffer_with_the_negative_bit_is_refused():
    negated = _arena(1024)._neg_view()
    assert negated.is_neg() and negated.dtype == U8
    with pytest.raises(interop.errors.AllocationNegativeBitError) as info:
        _check(negated, 1024)
    assert isinstance(info.value, interop.errors.AllocationValueError)
    assert info.value.reason == "negative" and "negative bit" in str(info.value)


# ----- through the manager -----


def test_a_negated_buffer_is_refused_at_growth_and_changes_nothing():
    calls = []

    def negating_pool(nbytes, device):
        calls.append(nbytes)
        block = torch.empty((nbytes + 256,), dtype=U8, device=device)
        start = -block.data_ptr() % 256
        block = block[start : start + nbytes]
        return block._neg_view() if len(calls) > 1 else block

    ws = WorkspaceManager(DEVICE, allocator=negating_pool)
    (view,) = ws.get_simultaneous(((1000,), U8))
    view.fill_(9)
    before = slots_snapshot(ws, ubatches=1)
    with pytest.raises(interop.errors.AllocationNegativeBitError):
        ws.get_simultaneous(((5000,), U8))
    after = slots_snapshot(ws, ubatches=1)
    assert after[0] is before[0] and after[1][0][0] == before[1][0][0]
    assert torch.equal(after[1][0][1], before[1][0][1])
    (again,) = ws.get_simultaneous(((1000,), U8))  # the old buffer still serves
    assert again.eq(9).all()


class OneArena:
    """A broken pool: every request gets the start of the same arena."""

    def __init__(self):
        block = torch.empty((1 << 20) + 256, dtype=U8, device=DEVICE)
        start = -block.data_ptr() % 256
        self.arena = block[start : start + (1 << 20)]

    def __call__(self, nbytes, device):
        return self.arena[:nbytes]


@pytest.mark.parametrize("growth", ["slot", "ubatches"])
def test_one_arena_handed_to_two_slots_is_refused_and_changes_nothing(growth):
    ws = WorkspaceManager(DEVICE, num_ubatches=2, growth=growth, allocator=OneArena())
    with use_workspace_ubatch(0):
        if growth == "slot":
            (first,) = ws.get_simultaneous(((1000,), U8))
            first.fill_(1)
        before = slots_snapshot(ws)
        with use_workspace_ubatch(1), pytest.raises(interop.errors.AllocationOverlapError):
            ws.get_simultaneous(((1000,), U8))  # slot 1 (or both slots) from the same arena
        after = slots_snapshot(ws)
    assert after[0] is before[0]
    for was, now in zip(before[1], after[1], strict=True):
        assert (was is None and now is None) or (was[0] == now[0] and torch.equal(was[1], now[1]))


# ----- results that are not one plain run of bytes (issue 29, items 10 and 12) -----


def _nested(nbytes):
    return torch.nested.nested_tensor([torch.zeros(nbytes, dtype=U8)])


def _jagged(nbytes):
    return torch.nested.nested_tensor([torch.zeros(nbytes, dtype=U8)], layout=torch.jagged)


def _sparse(nbytes):
    return torch.zeros(nbytes, dtype=U8).to_sparse()


NOT_STRIDED = [("nested", _nested, "nested"), ("nested-jagged", _jagged, "nested"),
               ("sparse-coo", _sparse, "torch.sparse_coo")]  # fmt: skip


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize(("make", "kind"), [c[1:] for c in NOT_STRIDED],
                         ids=[c[0] for c in NOT_STRIDED])  # fmt: skip
def test_a_nested_or_sparse_result_is_refused_naming_the_allocator(make, kind):
    """A nested tensor used to raise torch's internal RuntimeError ("NestedTensorImpl doesn't
    support sizes") from the check itself."""
    with pytest.raises(interop.errors.AllocationNotStridedError) as info:
        _check(make(256), 256)
    err = info.value
    assert isinstance(err, interop.errors.AllocationLayoutError) and isinstance(err, ValueError)
    assert err.reason == "strided"
    assert "allocator '<lambda>'" in str(err) and kind in str(err) and "256 bytes" in str(err)


class ExportsElsewhere(torch.Tensor):
    """A tensor subclass whose ``__dlpack__`` exports the bytes of another tensor than its
    own ``data_ptr()`` (``exported``): the slot would keep what DLPack exports."""

    exported: torch.Tensor

    def __dlpack__(self, *args, **kwargs):
        return self.exported.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.exported.__dlpack_device__()


def test_what_dlpack_exports_is_what_is_checked_for_overlap():
    """Issue 29, item 12: slot (1, 0)'s result points at fresh bytes, but exports slot
    (0, 0)'s buffer: checked on its ``data_ptr()``, the two slots shared their bytes."""
    arena = OneArena().arena
    calls = []

    def pool(nbytes, device):
        calls.append(nbytes)
        if len(calls) == 1:
            return arena[:nbytes]  # slot (0, 0): honest
        own = torch.empty((nbytes,), dtype=U8, device=device).as_subclass(ExportsElsewhere)
        own.exported = arena[:nbytes]  # slot (1, 0): exports slot (0, 0)'s bytes
        return own

    ws = WorkspaceManager(DEVICE, num_ubatches=2, allocator=pool)
    with use_workspace_ubatch(0):
        ws.get_simultaneous(((1000,), U8))[0].fill_(1)
    before = slots_snapshot(ws)
    with use_workspace_ubatch(1), pytest.raises(interop.errors.AllocationOverlapError) as info:
        ws.get_simultaneous(((1000,), U8))
    assert "__dlpack__ exports" in str(info.value) and "data_ptr()" in str(info.value)
    after = slots_snapshot(ws)
    assert after[0] is before[0] and after[1][1] is None
    assert torch.equal(after[1][0][1], before[1][0][1])


def test_an_exported_region_that_fits_is_the_one_installed():
    arena = OneArena().arena

    def pool(nbytes, device):
        own = torch.empty((nbytes,), dtype=U8, device=device).as_subclass(ExportsElsewhere)
        own.exported = arena[4096 : 4096 + nbytes]
        return own

    ws = WorkspaceManager(DEVICE, allocator=pool)
    (view,) = ws.get_simultaneous(((1000,), U8))
    assert view.data_ptr() == arena[4096:].data_ptr()  # checked, and served, there


class NoExportNoStorage(torch.Tensor):
    """A tensor subclass DLPack cannot export and whose storage cannot be sliced."""

    def __dlpack__(self, *args, **kwargs):
        raise BufferError("this pool's tensors are not exportable")

    def untyped_storage(self):
        raise RuntimeError("this pool's storage is private")


def test_a_buffer_no_wide_dtype_can_start_at_is_refused_before_anything_changes():
    """Issue 29, item 10: a buffer at an odd byte of its storage serves no wider dtype; one
    that can be seen through no storage of its own is refused up front."""
    arena = OneArena().arena
    calls = []

    def pool(nbytes, device):
        calls.append(nbytes)
        if len(calls) == 1:
            return arena[:nbytes]
        odd = arena.untyped_storage()[4096 + 3 :]  # a storage that starts at an odd byte
        block = torch.empty((0,), dtype=U8, device=device).set_(odd)[:nbytes]
        return block.as_subclass(NoExportNoStorage)

    ws = WorkspaceManager(DEVICE, allocator=pool)
    (view,) = ws.get_simultaneous(((100,), torch.float32))
    view.fill_(2.0)
    before = slots_snapshot(ws, ubatches=1)
    with pytest.raises(interop.errors.AllocationStorageOffsetError) as info:
        ws.get_simultaneous(((5000,), torch.float32))
    assert isinstance(info.value, interop.errors.AllocationLayoutError)
    assert "allocator 'test_a_buffer" in str(info.value) and "of its storage" in str(info.value)
    after = slots_snapshot(ws, ubatches=1)
    assert after[0] is before[0] and after[1][0][0] == before[1][0][0]
    (again,) = ws.get_simultaneous(((100,), torch.float32))  # the old buffer still serves
    assert again.eq(2.0).all()


def _freed(nbytes, device):
    block = torch.empty((nbytes,), dtype=U8, device=device)
    block.untyped_storage().resize_(0)  # FSDP's way of freeing: the tensor's shape stays
    return block


def _fake(nbytes, device):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.empty((nbytes,), dtype=U8, device=device)


def _shrunk_by_one(nbytes, device):
    block = torch.empty((nbytes,), dtype=U8, device=device)
    block.untyped_storage().resize_(nbytes - 1)  # one byte short of its shape
    return block


def _slice_past_shrunk_end(nbytes, device):
    arena = torch.empty((2 * nbytes,), dtype=U8, device=device)
    block = arena[nbytes:]  # its storage holds nbytes from storage_offset() on ...
    arena.untyped_storage().resize_(nbytes + nbytes // 2)  # ... then half of them
    return block


@pytest.mark.parametrize(
    "short", [_shrunk_by_one, _slice_past_shrunk_end], ids=["one-byte-short", "past-the-end"]
)
def test_a_storage_holding_some_but_not_all_of_the_bytes_from_the_tensors_start_is_refused(
    short,
):
    # The bytes counted are those from the tensor's start (its storage_offset) to the
    # storage's end, all of them: a view carved at the end wrote past the memory.
    with pytest.raises(interop.errors.AllocationSizeError, match="holds"):
        _check(short(4096, DEVICE), 4096)
    assert _check(_arena(4096), 4096) is not None  # exactly enough is enough


@pytest.mark.parametrize(
    ("bad", "said"),
    [(_freed, "storage holds 0"), (_fake, "fake tensor")],
    ids=["storage-freed", "fake"],
)
def test_a_result_whose_storage_does_not_hold_its_bytes_is_refused_and_changes_nothing(bad, said):
    # Its numel() is what was asked: the storage holds fewer bytes (none). Accepted, a view
    # of it wrote to address 0: the process died (segmentation fault).
    with pytest.raises(interop.errors.AllocationSizeError, match=said):
        _check(bad(4096, DEVICE), 4096)
    broken = []

    def pool(nbytes, device):
        return bad(nbytes, device) if broken else _arena(nbytes)

    ws = WorkspaceManager(DEVICE, allocator=pool)
    (view,) = ws.get_simultaneous(((1000,), U8))
    view.fill_(9)
    before = slots_snapshot(ws, ubatches=1)
    broken.append(True)
    with pytest.raises(interop.errors.AllocationSizeError):
        ws.get_simultaneous(((5000,), U8))
    after = slots_snapshot(ws, ubatches=1)
    assert after[0] is before[0] and torch.equal(after[1][0][1], before[1][0][1])
    (again,) = ws.get_simultaneous(((1000,), U8))  # the old buffer still serves
    assert again.eq(9).all()
