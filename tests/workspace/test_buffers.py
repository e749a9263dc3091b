"""Slot buffers (``interop/_workspace/_buffers.py``): one aligned buffer per slot, by index,
each with its carver; a new buffer never overlaps the other slots' where the allocator may
hand out memory in use."""

import pytest
import torch
from support.helpers import manager

from interop import use_workspace_lane, use_workspace_ubatch
from interop._workspace._allocators import allocator_stack
from interop._workspace._buffers import SlotBuffers

F32, U8 = torch.float32, torch.uint8
CPU = torch.device("cpu")

# ----- through the façade (every allocator) -----


@pytest.mark.usefixtures("allocator")
def test_ubatch_by_lane_slots_are_distinct():
    ws = manager(num_ubatches=2, num_lanes=2)
    bases = set()
    for ubatch in range(2):
        for lane in range(2):
            with use_workspace_ubatch(ubatch), use_workspace_lane(lane):
                (view,) = ws.get_simultaneous(((64,), F32))
                bases.add(view.data_ptr())
    assert len(bases) == 4


# ----- the room itself -----


def _buffers(allocator="torch", count=3):
    return SlotBuffers(CPU, count, 256, allocator_stack(allocator, CPU))


def test_an_allocation_is_aligned_exact_and_not_installed_until_asked():
    buffers = _buffers()
    allocation = buffers.allocate(1, 1000, slot=(1, 0))
    assert allocation.buffer.numel() == 1000 and allocation.buffer.data_ptr() % 256 == 0
    assert buffers.buffer(1) is None and buffers.current(1).block is None
    buffers.install(1, allocation)
    assert buffers.buffer(1) is allocation.buffer
    carver = buffers.current(1)
    assert carver.block is allocation.block and carver.start == allocation.start
    (view,) = carver.carve((0,), (((1000,), torch.uint8),))
    assert view.data_ptr() == allocation.buffer.data_ptr()
    assert buffers.buffers() == [None, allocation.buffer, None]


def test_a_torch_buffer_is_carved_from_its_block_and_sliced_only_when_asked_for():
    # torch's CPU block is larger than the buffer (it aligns to 64 bytes): a growth carves
    # from the block and never pays for the exact slice (a tensor as costly as the block).
    buffers = _buffers()
    allocation = buffers.allocate(0, 1000)
    block = allocation.block
    assert block.numel() == 1000 + 256 - 64 and (block.data_ptr() + allocation.start) % 256 == 0
    buffers.install(0, allocation)
    for dtype in (torch.uint8, torch.float16, torch.float32, torch.int64):
        (view,) = buffers.current(0).carve((256,), (((8,), dtype),))
        assert view.data_ptr() == block.data_ptr() + allocation.start + 256
    assert allocation._buffer is None  # no slice made
    buffer = buffers.buffer(0)
    assert buffer is not None and buffer.numel() == 1000 and buffer.data_ptr() % 256 == 0
    assert buffer._base is block and buffers.buffer(0) is buffer  # made once
    assert buffers.take(0) is block and buffers.buffer(0) is None


def test_buffers_is_a_new_list_each_time():
    buffers = _buffers()
    listed = buffers.buffers()
    listed[0] = torch.empty(1)
    assert buffers.buffer(0) is None and buffers.buffers() is not buffers.buffers()


def test_taking_a_buffer_empties_the_slot_and_its_carver():
    buffers = _buffers()
    allocation = buffers.allocate(0, 512)
    buffers.install(0, allocation)
    carver = buffers.current(0)
    taken = buffers.take(0)
    assert taken is allocation.block and taken.numel() >= 512  # the block the buffer is in
    assert buffers.buffer(0) is None and buffers.current(0) is not carver
    assert buffers.current(0).block is None
    assert buffers.take(0) is None  # nothing left to take


def test_a_jax_buffer_keeps_its_owner_while_installed():
    buffers = _buffers("jax")
    allocation = buffers.allocate(0, 512)
    assert allocation.owner is not None  # the JAX array whose memory the buffer is
    buffers.install(0, allocation)
    assert buffers.owner(0) is allocation.owner
    buffers.take(0)
    assert buffers.owner(0) is None


def test_only_an_allocator_that_may_reuse_memory_is_checked_for_overlap():
    def pool(nbytes, device):
        return torch.empty((nbytes,), dtype=U8, device=device)

    for allocator, checked in (("torch", False), (pool, True)):
        buffers = _buffers(allocator)
        for index in (0, 2):
            buffers.install(index, buffers.allocate(index, 256))
        others = buffers.others(0)
        if checked:
            assert len(others) == 1 and others[0] is buffers.buffer(2)
        else:
            assert others == []


def test_a_new_buffer_must_not_overlap_the_buffers_in_use():
    import interop

    arena = torch.empty((4096,), dtype=U8)

    def one_arena(nbytes, device):  # every block from the arena's start
        return arena[:nbytes]

    buffers = _buffers(one_arena)
    buffers.install(0, buffers.allocate(0, 512))
    with pytest.raises(interop.errors.AllocationOverlapError):
        buffers.allocate(1, 512)  # the same bytes as slot 0's buffer
    assert buffers.buffer(1) is None


def test_buffers_allocated_apart_overlap_neither_kept_buffers_nor_each_other():
    import interop

    arena = torch.empty((8192,), dtype=U8)
    starts = iter(range(0, 8192, 1024))

    def bump(nbytes, device):  # a fresh region each call, until told to repeat one
        start = next(starts)
        return arena[start : start + nbytes]

    buffers = _buffers(bump)
    buffers.install(0, buffers.allocate(0, 512))  # region 0
    fresh = buffers.allocate_apart([(1, 512, (1, 0), 0), (2, 256, (2, 0), 0)])
    assert sorted(fresh) == [1, 2] and buffers.buffer(1) is None  # allocated, not installed
    assert {fresh[1].nbytes, fresh[2].nbytes} == {512, 256}
    assert fresh[1].buffer.data_ptr() != fresh[2].buffer.data_ptr()

    def same(nbytes, device):  # every block the same bytes
        return arena[4096 : 4096 + nbytes]

    buffers = _buffers(same)
    with pytest.raises(interop.errors.AllocationOverlapError):
        buffers.allocate_apart([(1, 512, (1, 0), 0), (2, 512, (2, 0), 0)])
    buffers.install(0, buffers.allocate(0, 512))  # slot 0 keeps those bytes
    with pytest.raises(interop.errors.AllocationOverlapError):
        buffers.allocate_apart([(1, 512, (1, 0), 0)])
    fresh = buffers.allocate_apart([(0, 512, (0, 0), 512)])  # slot 0's own bytes: it grows
    start = fresh[0].buffer.data_ptr() - arena.data_ptr()
    assert fresh[0].nbytes == 512 and 4096 <= start < 4096 + 256  # (aligned within them)
