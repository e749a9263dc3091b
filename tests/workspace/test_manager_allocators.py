"""WorkspaceManager(allocator=...): bad allocators refused cleanly, JAX-owned buffers kept,
released, reported and handed back to JAX zero-copy, and the ordering contract.

The façade's behavioural tests and the stateful machine run under every allocator already
(``tests/support/allocators.py``); this module covers what only the allocators have.
"""

from __future__ import annotations

import gc
import logging
import weakref

import jax
import jax.numpy as jnp
import pytest
import torch
from conftest import TEST_DEVICE as DEVICE
from conftest import needs_cuda
from support.allocators import misaligned_pool
from support.races import TRIALS, slow_sum
from support.seams import slot_buffer, slots_snapshot

import interop
from interop import WorkspaceManager, use_workspace_ubatch
from interop.errors import (
    AllocationTypeError,
    AllocationValueError,
    AllocatorError,
    AllocatorNotCallableError,
    UnknownAllocatorError,
)

F32, U8 = torch.float32, torch.uint8


class Pool:
    """A callable allocator that serves aligned blocks until told to misbehave.

    ``bad`` maps ``(nbytes, device)`` to what a broken pool returns; it applies from the
    ``after``-th call on (one call per slot: the good blocks are aligned already).
    """

    def __init__(self):
        self.calls = 0
        self.bad = None
        self.after = 0

    def __call__(self, nbytes, device):
        self.calls += 1
        if self.bad is not None and self.calls > self.after:
            return self.bad(nbytes, device)
        block = torch.empty((nbytes + 256,), dtype=U8, device=device)
        skip = -block.data_ptr() % 256
        return block[skip : skip + nbytes]


def _raise(nbytes, device):
    raise MemoryError(f"pool exhausted at {nbytes} bytes")


# id, what the broken pool returns, error class, builtin, reason, fragments of the message
BAD_RESULTS = [
    ("wrong-dtype", lambda n, d: torch.empty((n,), dtype=F32, device=d), AllocationTypeError,
     TypeError, "dtype", ["allocator 'Pool'", "torch.float32", "torch.uint8"]),
    ("too-small", lambda n, d: torch.empty((n - 1,), dtype=U8, device=d), AllocationValueError,
     ValueError, "size", ["allocator 'Pool'", "too small", "bytes"]),
    ("wrong-device", lambda n, d: torch.empty((n,), dtype=U8, device="meta"),
     AllocationValueError, ValueError, "device", ["allocator 'Pool'", "device=meta"]),
    ("non-contiguous", lambda n, d: torch.empty((2 * n,), dtype=U8, device=d)[::2],
     AllocationValueError, ValueError, "layout", ["allocator 'Pool'", "stride=(2,)",
                                                   "contiguous"]),
    ("not-a-tensor", lambda n, d: bytearray(n), AllocationTypeError, TypeError, "type",
     ["allocator 'Pool'", "bytearray", "torch.Tensor"]),
    ("two-dimensional", lambda n, d: torch.empty((1, n), dtype=U8, device=d),
     AllocationValueError, ValueError, "ndim", ["allocator 'Pool'", "shape=(1, ", "1-D"]),
    ("negative-bit", lambda n, d: torch.zeros((n,), dtype=U8, device=d)._neg_view(),
     interop.errors.AllocationNegativeBitError, ValueError, "negative", ["allocator 'Pool'",
                                                                  "negative bit"]),
    ("raising-allocator", _raise, MemoryError, MemoryError, None, ["pool exhausted"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "kind", "builtin", "reason", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_RESULTS],
)
def test_bad_allocator_results_are_refused_and_change_nothing(
    bad, kind, builtin, reason, fragments
):
    pool = Pool()
    ws = WorkspaceManager(DEVICE, num_ubatches=2, growth="ubatches", allocator=pool)
    ws.get_simultaneous(((1000,), U8))  # grows both ubatch slots
    for ubatch in range(2):
        with use_workspace_ubatch(ubatch):
            view, _ = ws.get_retained("kv", (64,), U8)
            view.copy_(torch.arange(64, dtype=U8) + ubatch)
    ws.get_persistent("w", (4,), F32).fill_(2.0)
    state, slots = slots_snapshot(ws, bytes_at="retained")
    pool.bad, pool.after = bad, pool.calls + 1  # the first slot's block is fine, not the next
    with pytest.raises(kind) as info:
        ws.get_simultaneous(((5000,), U8))
    assert isinstance(info.value, builtin)
    assert reason is None or (
        isinstance(info.value, AllocatorError) and info.value.reason == reason
    )
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    after_state, after_slots = slots_snapshot(ws, bytes_at="retained")
    assert after_state is state
    for (base, kept), (after_base, after_kept) in zip(slots, after_slots, strict=True):
        assert after_base == base and torch.equal(after_kept, kept)
    for ubatch in range(2):
        with use_workspace_ubatch(ubatch):
            assert ws.get_retained("kv", (64,), U8)[1], "the retained span is still intact"
    assert ws.get_persistent("w", (4,), F32).eq(2.0).all()
    pool.bad = None
    ws.get_simultaneous(((5000,), U8))  # a good pool again: it grows
    assert [s.capacity for s in ws.state.slots] == [5120, 5120]


BAD_ARGUMENTS = [
    ("unknown-name", "numpy", UnknownAllocatorError, ValueError, ["allocator", "'numpy'"]),
    ("not-callable", 5, AllocatorNotCallableError, TypeError, ["allocator", "5"]),
    ("jax-on-a-device-jax-cannot-see", "jax", interop.errors.DeviceNotVisibleError, ValueError,
     ["meta"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "kind", "builtin", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_ARGUMENTS],
)
def test_bad_allocator_argument_is_refused_at_construction(value, kind, builtin, fragments):
    device = "meta" if kind is interop.errors.DeviceNotVisibleError else DEVICE
    with pytest.raises(kind) as info:
        WorkspaceManager(device, allocator=value)
    assert isinstance(info.value, builtin)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_stats_repr_and_module_api_name_the_allocator():
    ws = WorkspaceManager(DEVICE, num_ubatches=2, allocator=misaligned_pool)
    ws.get_simultaneous(((100,), U8))
    assert [s.allocator for s in ws.stats().slots] == ["misaligned_pool"] * 2
    assert "allocator misaligned_pool" in str(ws.stats()) and "misaligned_pool" in repr(ws)
    assert "allocator" not in repr(WorkspaceManager(DEVICE))  # the default says nothing new
    interop.init_workspace_manager(DEVICE, allocator="jax")
    try:
        assert interop.current_workspace_manager().allocator == "jax"
    finally:
        interop.reset_workspace_manager()


# ----- JAX-owned buffers -----


def _jax_owner(buffer):
    """The live JAX array whose memory holds ``buffer`` (``None`` if none does)."""
    start = buffer.data_ptr()
    for array in jax.live_arrays():
        base = array.unsafe_buffer_pointer()
        if array.dtype == jnp.uint8 and base <= start < base + array.size:
            return array
    return None


def test_jax_owned_buffer_lies_in_the_jax_array_the_slot_keeps():
    ws = WorkspaceManager(DEVICE, allocator="jax")
    ws.get_simultaneous(((1000,), U8))
    buffer = slot_buffer(ws, (0, 0))
    owner = _jax_owner(buffer)
    assert isinstance(owner, jax.Array) and owner.dtype == jnp.uint8
    start = owner.unsafe_buffer_pointer()
    assert start <= buffer.data_ptr() and buffer.data_ptr() + 1000 <= start + owner.size
    assert buffer.data_ptr() % 256 == 0
    buffer.fill_(7)  # torch writes land in the JAX array's memory
    offset = buffer.data_ptr() - start
    assert int(jnp.sum(owner[offset : offset + 1000])) == 7000


def test_growth_releases_the_jax_array_unless_a_view_pins_its_memory(caplog):
    caplog.set_level(logging.WARNING, logger="interop")
    ws = WorkspaceManager(DEVICE, allocator="jax")
    ws.get_simultaneous(((1000,), U8))
    first = weakref.ref(_jax_owner(slot_buffer(ws, (0, 0))))
    ws.get_simultaneous(((5000,), U8))
    gc.collect()
    assert first() is None and ws.stats().pinned_bytes == 0 and caplog.text == ""
    (kept,) = ws.get_simultaneous(((1000,), F32))
    kept.fill_(1.5)
    second = weakref.ref(_jax_owner(kept))
    ws.get_simultaneous(((50000,), U8))
    gc.collect()
    # The manager let go of the array; the view holds its memory, and is reported.
    assert ws.stats().slots[0].pinned_buffers == 1 and "still pinned" in caplog.text
    assert kept.eq(1.5).all()
    del kept
    gc.collect()
    assert second() is None and ws.stats().pinned_bytes == 0


@pytest.mark.parametrize("dtype", [U8, torch.int8, torch.bfloat16, torch.int32, F32], ids=str)
def test_views_of_a_jax_owned_buffer_go_back_to_jax_zero_copy(dtype):
    ws = WorkspaceManager(DEVICE, allocator="jax")
    small, view = ws.get_simultaneous(((3,), U8), ((16, 4), dtype))
    retained, _ = ws.get_retained("kv", (8,), dtype)
    for tensor in (small, view, retained):
        tensor.fill_(1)
        array = interop.to_jax(tensor)
        assert array.unsafe_buffer_pointer() == tensor.data_ptr()
        assert int(jnp.sum(array.astype(jnp.int32))) == tensor.numel()
    back = interop.to_torch(interop.to_jax(view))
    assert back.data_ptr() == view.data_ptr()


def test_torch_writes_after_jax_call_never_change_the_result():
    """The ordering contract on JAX-owned memory: a jitted reduction of a workspace view
    through ``jax_call``, then torch overwrites the view at once (the next request hands the
    region out again); the result must not change."""
    ws = WorkspaceManager(DEVICE, allocator="jax")
    (view,) = ws.get_simultaneous(((1 << 18,), F32))
    expected = float(slow_sum(jnp.ones(1 << 18, jnp.float32)))
    call = interop.jax_call(slow_sum)
    wrong = 0
    for _ in range(TRIALS):
        view.fill_(1.0)
        result = call(view)
        (again,) = ws.get_simultaneous(((1 << 18,), F32))
        again.fill_(3.0)
        wrong += float(result) != expected
    assert wrong == 0


@needs_cuda
def test_a_jax_workspace_on_cuda_leaves_torch_memory_allocated_alone():
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    ws = WorkspaceManager(DEVICE, allocator="jax")
    (view,) = ws.get_simultaneous(((64 << 20,), U8))
    view.fill_(1)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before < (1 << 20)
    assert interop.to_jax(view).unsafe_buffer_pointer() == view.data_ptr()


# ----- pools that keep their own references (issue 20 #4) -----


class Arena:
    """Slices of one arena, handed out in turn (never freed)."""

    def __init__(self, nbytes=4 << 20):
        self.memory = torch.zeros(nbytes, dtype=torch.uint8, device=DEVICE)
        self.used = 0

    def __call__(self, nbytes, device):
        start = self.used
        self.used += -(-nbytes // 256) * 256 + 256
        return self.memory[start : start + nbytes]


class FreeList:
    """Every block it hands out stays on its list (whole blocks, no slicing)."""

    def __init__(self):
        self.blocks = []

    def __call__(self, nbytes, device):
        self.blocks.append(torch.empty(nbytes, dtype=torch.uint8, device=device))
        return self.blocks[-1]


class SegmentPool:
    """A MemPool-style pool: a new segment per request, twice the size, kept by the pool;
    the block is its front."""

    def __init__(self):
        self.segments = []

    def __call__(self, nbytes, device):
        self.segments.append(torch.empty(2 * nbytes, dtype=torch.uint8, device=device))
        return self.segments[-1][:nbytes]


POOLS = {"arena": Arena, "free-list": FreeList, "segment-pool": SegmentPool}


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_a_pools_own_references_are_not_views_pinning_the_buffer(pool, caplog):
    allocator = POOLS[pool]()
    ws = WorkspaceManager(DEVICE, allocator=allocator)
    with caplog.at_level(logging.WARNING, logger="interop"):
        for n in (1000, 100_000, 1_000_000, 1_000_000):
            (view,) = ws.get_simultaneous(((n,), torch.uint8))
            view.fill_(7)
            del view
    gc.collect()
    assert "pinned" not in caplog.text
    assert ws.stats().pinned_bytes == 0
    # The buffer is the pool's memory, zero-copy.
    buffer = slot_buffer(ws)
    (view,) = ws.get_simultaneous(((16,), torch.uint8))
    view.fill_(3)
    pool_memory = {
        "arena": lambda: [allocator.memory],
        "free-list": lambda: allocator.blocks,
        "segment-pool": lambda: allocator.segments,
    }[pool]()
    (home,) = [m for m in pool_memory if 0 <= buffer.data_ptr() - m.data_ptr() < m.numel()]
    offset = buffer.data_ptr() - home.data_ptr()
    assert bool((home[offset : offset + 16] == 3).all())


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_a_view_kept_across_a_growth_of_a_pools_buffer_still_counts_its_bytes(pool, caplog):
    ws = WorkspaceManager(DEVICE, allocator=POOLS[pool]())
    (kept,) = ws.get_simultaneous(((4096,), torch.uint8))
    with caplog.at_level(logging.WARNING, logger="interop"):
        ws.get_simultaneous(((1 << 16,), torch.uint8))
    assert "still pinned" in caplog.text
    # The retired block (what was asked of the pool, aligned), not the pool's memory.
    assert 4096 <= ws.stats().pinned_bytes <= 4096 + 256
    del kept
    gc.collect()
    assert ws.stats().pinned_bytes == 0
