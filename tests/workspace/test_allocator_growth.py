"""A growth asks its provider once, and never holds two new blocks at once (issue 11).

torch's and JAX's CPU allocators align to 64 bytes: asking for the exact size and retrying
when the address is not 256-aligned cost two allocations, and with ``allocator="jax"`` the
first block was still referenced during the retry (a peak of three times the new size).
"""

from __future__ import annotations

import gc

import jax
import pytest
import torch
from support.seams import slot_buffer
from torch.multiprocessing.reductions import StorageWeakRef

import interop
from interop import _device
from interop._bridge import _jax_allocator
from interop._device import aligned_block

U8 = torch.uint8
ALIGNMENT = 256
SIZES = (1000, 5000, 70_000, 300_000)  # each a growth of a one-slot workspace


def _capacity(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


class Provider:
    """Blocks whose addresses sit ``offset`` bytes past a 256-byte boundary; records each
    request and whether the block of the request before it (same growth) was released."""

    def __init__(self, offset: int):
        self.offset = offset
        self.requests: list[int] = []
        self.previous_alive: list[bool] = []
        self._previous: StorageWeakRef | None = None

    def new_growth(self) -> None:
        self._previous = None

    def __call__(self, nbytes: int, device: torch.device | None = None) -> torch.Tensor:
        self.previous_alive.append(self._previous is not None and not self._previous.expired())
        self.requests.append(nbytes)
        block = torch.empty((nbytes + 2 * ALIGNMENT,), dtype=U8)
        start = -block.data_ptr() % ALIGNMENT + self.offset
        block = block[start : start + nbytes]
        self._previous = StorageWeakRef(block.untyped_storage())
        return block


# ----- aligned_block on its own -----


@pytest.mark.parametrize("offset", [0, 64, 128, 192])
def test_a_provider_known_to_align_to_64_is_asked_once(offset):
    provider = Provider(offset)
    block = aligned_block(provider, 1000, ALIGNMENT, provider_alignment=64)
    assert provider.requests == [1000 + ALIGNMENT - 64]
    assert block.numel() == 1000 and block.data_ptr() % ALIGNMENT == 0


def test_a_provider_known_to_align_enough_is_asked_for_the_exact_size():
    provider = Provider(0)
    block = aligned_block(provider, 1000, ALIGNMENT, provider_alignment=512)
    assert provider.requests == [1000] and block.data_ptr() % ALIGNMENT == 0


@pytest.mark.parametrize(("known", "offset"), [(64, 32), (512, 64), (None, 64)])
def test_a_misaligned_block_is_released_before_the_one_retry(known, offset):
    provider = Provider(offset)
    block = aligned_block(provider, 1000, ALIGNMENT, provider_alignment=known)
    assert len(provider.requests) == 2 and provider.requests[1] == 1000 + ALIGNMENT
    assert provider.previous_alive == [False, False], "two new blocks were held at once"
    assert block.numel() == 1000 and block.data_ptr() % ALIGNMENT == 0


def test_an_unknown_provider_with_room_to_spare_is_not_asked_again():
    def roomy(nbytes):
        return Provider(64)(nbytes + ALIGNMENT)  # more than asked, at a misaligned address

    block = aligned_block(roomy, 1000, ALIGNMENT)
    assert block.numel() == 1000 and block.data_ptr() % ALIGNMENT == 0


# ----- the allocators, through a workspace -----


def _grow_through(ws: interop.WorkspaceManager, before_each=None) -> list[torch.Tensor]:
    """Grow ``ws`` through ``SIZES``, dropping every view; the buffers it ends up with."""
    buffers = []
    for nbytes in SIZES:
        if before_each is not None:
            before_each()
        ws.get_simultaneous(((nbytes,), U8))  # the view is dropped at once
        buffers.append(slot_buffer(ws, (0, 0)))
    return buffers


def test_torch_growth_allocates_once(monkeypatch):
    calls: list[int] = []
    real = _device.torch_block

    def counted(nbytes, device):
        calls.append(nbytes)
        return real(nbytes, device)

    monkeypatch.setattr(_device, "torch_block", counted)
    buffers = _grow_through(interop.WorkspaceManager("cpu"))
    expected = [_capacity(n) + ALIGNMENT - 64 for n in SIZES]
    assert calls == expected
    # the buffer is a slice of exactly that one allocation
    assert [b.untyped_storage().nbytes() for b in buffers] == expected
    assert all(b.data_ptr() % ALIGNMENT == 0 for b in buffers)


def _live_jax_bytes(exclude: set[int]) -> int:
    """Bytes of the distinct live JAX buffers not in ``exclude`` (addresses)."""
    seen = {}
    for array in jax.live_arrays():
        address = array.unsafe_buffer_pointer()
        if address not in exclude:
            seen[address] = array.nbytes
    return sum(seen.values())


def test_jax_growth_allocates_once_and_peaks_at_the_new_block(monkeypatch):
    ws = interop.WorkspaceManager("cpu", allocator="jax")
    ws.get_simultaneous(((1000,), U8))
    gc.collect()
    old = StorageWeakRef(slot_buffer(ws, (0, 0)).untyped_storage())
    old_address = slot_buffer(ws, (0, 0)).data_ptr()
    baseline = {a.unsafe_buffer_pointer() for a in jax.live_arrays()}
    baseline = {address for address in baseline if not 0 <= old_address - address < 4096}
    calls, peaks, old_alive = [], [], []
    real = _jax_allocator.jax_block

    def watched(nbytes, device):
        old_alive.append(not old.expired())
        peaks.append(_live_jax_bytes(baseline))
        array = real(nbytes, device)
        peaks.append(_live_jax_bytes(baseline))
        calls.append(nbytes)
        return array

    monkeypatch.setattr(_jax_allocator, "jax_block", watched)
    ws.get_simultaneous(((300_000,), U8))
    block = _capacity(300_000) + ALIGNMENT - 64
    assert calls == [block], "one JAX allocation, sized to start at an aligned address"
    assert old_alive == [False], "the old buffer is released before the new one is made"
    assert max(peaks) <= block, (peaks, block)
    assert slot_buffer(ws, (0, 0)).untyped_storage().nbytes() == block


def test_a_callable_is_asked_once_per_growth_once_its_alignment_is_seen():
    provider = Provider(offset=64)  # never 256-aligned
    ws = interop.WorkspaceManager("cpu", allocator=provider)
    _grow_through(ws, before_each=provider.new_growth)
    first = _capacity(SIZES[0])
    assert provider.requests[:2] == [first, first + ALIGNMENT]  # learns: 64-byte aligned
    assert provider.requests[2:] == [_capacity(n) + ALIGNMENT - 64 for n in SIZES[1:]]
    assert not any(provider.previous_alive), "two new blocks were held at once"


def test_a_callable_whose_alignment_drops_is_asked_once_per_growth_from_then_on():
    """The alignment learned is the least the pool has shown, not the first."""
    asked, arenas = [], []

    def pool(n: int, device: torch.device) -> torch.Tensor:
        asked.append(n)
        arena = torch.empty(n + 8192, dtype=U8)
        arenas.append(arena)
        skip = -arena.data_ptr() % 4096 + (64 if len(asked) > 1 else 0)
        return arena[skip : skip + n]  # 4096-aligned first, then 64 past a page

    ws = interop.WorkspaceManager("cpu", allocator=pool)
    ws.get_simultaneous(((1024,), U8))
    ws.get_simultaneous(((2048,), U8))  # a 64-aligned block: asked again, larger
    asked.clear()
    ws.get_simultaneous(((4096,), U8))
    assert asked == [4096 + ALIGNMENT - 64]
    assert slot_buffer(ws, (0, 0)).data_ptr() % ALIGNMENT == 0


def test_an_aligned_callable_is_asked_for_exact_sizes():
    provider = Provider(offset=0)
    buffers = _grow_through(interop.WorkspaceManager("cpu", allocator=provider))
    assert provider.requests == [_capacity(n) for n in SIZES]
    assert all(b.data_ptr() % ALIGNMENT == 0 for b in buffers)


def test_a_jax_block_asked_again_for_alignment_lets_the_first_go_and_is_kept(monkeypatch):
    """Where JAX's blocks are less aligned than claimed, ``aligned_block`` asks again for a
    larger block: the first is let go before, and the second's array is the buffer's owner."""
    monkeypatch.setitem(_jax_allocator.JAX_ALIGNMENT, "cpu", 4096)  # more than JAX gives
    real, live = _jax_allocator.jax_block, []

    def jax_block(nbytes, device):
        gc.collect()
        live.append(sum(a.nbytes for a in jax.live_arrays()))
        return real(nbytes, device)

    monkeypatch.setattr(_jax_allocator, "jax_block", jax_block)
    ws = interop.WorkspaceManager("cpu", allocator="jax")
    before = sum(a.nbytes for a in jax.live_arrays())
    (view,) = ws.get_simultaneous(((1 << 20,), torch.uint8))
    owner = ws._engine.buffers.owner(0)
    start = owner.unsafe_buffer_pointer()
    assert start <= view.data_ptr() < start + owner.nbytes  # the kept array holds the bytes
    assert all(n == before for n in live)  # nothing of an earlier block alive at each ask
