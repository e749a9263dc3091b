"""A callable allocator's buffer at any byte address serves every dtype (issue 29, item 10).

A pool that slices one arena hands out blocks at any byte; the buffer starts at the first
aligned address in the block, which may sit at an odd byte of the block's storage, and torch
views bytes as a wider dtype only at a multiple of its itemsize in the storage ("storage_offset()
must be divisible by 4"). The buffer is seen through a storage that starts at its first byte
(``interop._device.storage_from_start``), so every dtype torch has is served at every offset
of the arena: on a fresh manager, after a growth, and in the retained span.
"""

from __future__ import annotations

import pytest
import torch
from conftest import TEST_DEVICE as DEVICE

from interop import WorkspaceManager

U8 = torch.uint8
ALL_DTYPES = sorted({d for d in vars(torch).values() if isinstance(d, torch.dtype)}, key=str)
OFFSETS = range(32)


_BLOCK = torch.zeros(1 << 16, dtype=U8, device=DEVICE)
ARENA = _BLOCK[-_BLOCK.data_ptr() % 256 :]  # one arena for every test's fresh manager


class BumpArena:
    """A pool that hands out consecutive blocks of :data:`ARENA`, each at ``offset`` bytes
    past a 256-byte boundary."""

    def __init__(self, offset: int) -> None:
        self.arena, self.offset, self.next, self.blocks = ARENA, offset, 0, []

    def __call__(self, nbytes: int, device: torch.device) -> torch.Tensor:
        start = self.next + self.offset
        self.next = (start + nbytes + 511) // 256 * 256
        block = self.arena[start : start + nbytes]
        self.blocks.append(block)
        return block

    def buffer_start(self) -> int:
        """The address of the current buffer: the first 256-aligned byte of the last block."""
        address = self.blocks[-1].data_ptr()
        return address + -address % 256


def _served(ws, pool, dtype):
    """Views of ``dtype`` from the buffer: their addresses, and bytes written through them."""
    first, second = ws.get_simultaneous(((10,), dtype), ((3, 2), dtype))
    tail, _ = ws.get_retained("kv", (5,), dtype)
    start = pool.buffer_start()
    capacity = ws.state.capacity((0, 0))
    assert first.data_ptr() == start and second.data_ptr() == start + 256
    assert tail.data_ptr() == start + (capacity - 5 * dtype.itemsize) // 256 * 256
    for view, shape in ((first, (10,)), (second, (3, 2)), (tail, (5,))):
        assert view.dtype == dtype and tuple(view.shape) == shape
        offset = view.data_ptr() - pool.arena.data_ptr()
        covered = pool.arena[offset : offset + view.numel() * dtype.itemsize]
        covered.zero_()
        view.view(U8).fill_(7)  # the bytes the view covers are the arena's
        assert covered.eq(7).all()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_a_callable_allocators_buffer_at_any_byte_serves_every_dtype(dtype):
    for offset in OFFSETS:
        pool = BumpArena(offset)
        ws = WorkspaceManager(DEVICE, allocator=pool)
        _served(ws, pool, dtype)  # the first growth
        (big,) = ws.get_simultaneous(((4096 // dtype.itemsize + 1,), dtype))  # a growth
        assert big.data_ptr() == pool.buffer_start() and ws.state.slots[0].growths == 2
        _served(ws, pool, dtype)
