"""A failed growth loses nothing it can keep (issue: faults, races and hostile input, item 3).

The order is the original's: release the old buffer, empty the cache, enter
``alloc_context()``, allocate. What changes is the failure path: a request that can never
fit is refused before anything is released; a growth over several slots passes every check
first; and an allocation (or a context) that fails after the release gets every growing slot
its old capacity back, drops the retained span and says so.
"""

import contextlib
import json

import pytest
import torch
from support.allocators import workspace
from support.helpers import manager_with_patterned_tail, patterned_tail_is_intact
from support.seams import allocator_of, slot_buffer

import functional_ws as fws
from interop import CapacityLimitError, errors, use_workspace_ubatch

U8, I8 = torch.uint8, torch.int8


@pytest.mark.parametrize(
    "call",
    [
        lambda ws: ws.get_simultaneous(((10**15,), U8)),
        lambda ws: ws.get_simultaneous(((2**31, 2**31), I8)),  # 4 EiB: an overflow
        lambda ws: ws.get_retained("other", (10**15,), U8),
        lambda ws: ws.reserve(((10**15,), U8)),
        lambda ws: ws.reserve_many([[((10**15,), U8)]], slots="all"),
    ],
    ids=["get_simultaneous", "int8-overflow", "get_retained", "reserve", "reserve_many"],
)
def test_a_request_that_can_never_fit_is_refused_before_anything_is_released(allocator, call):
    ws = manager_with_patterned_tail()
    before, buffer = ws.state, slot_buffer(ws, (0, 0))
    with pytest.raises(CapacityLimitError, match="can never fit") as info:
        call(ws)
    assert isinstance(info.value, RuntimeError)  # what torch raises for out of memory
    assert ws.state is before and slot_buffer(ws, (0, 0)) is buffer
    assert patterned_tail_is_intact(ws)


def test_an_unsatisfiable_plan_is_refused_before_anything_grows(allocator, tmp_path):
    ws = manager_with_patterned_tail(num_ubatches=2)
    plan = fws.to_dict(ws.state)
    plan["slots"][0].update(capacity=2**61, high_water=2**61)  # slot (0, 0) can never fit
    plan["slots"][1].update(capacity=4096, high_water=4096, growths=1)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    before = ws.state
    with pytest.raises(CapacityLimitError):
        ws.load_plan(path)
    assert ws.state is before and ws.state.capacity((1, 0)) == 0  # nothing applied halfway
    assert patterned_tail_is_intact(ws)


class Flaky:
    """Wraps a manager's allocator: allocations above ``limit`` bytes fail, as a full device."""

    def __init__(self, ws, limit, error=torch.OutOfMemoryError):
        self.real, self.limit, self.error, self.asked = (
            allocator_of(ws).allocate,
            limit,
            error,
            [],
        )

    def __call__(self, nbytes, *args, **kwargs):
        self.asked.append(nbytes)
        if nbytes > self.limit:
            raise self.error(f"pretend the device cannot hold {nbytes} bytes")
        return self.real(nbytes, *args, **kwargs)


def test_a_real_out_of_memory_gets_the_slot_its_old_capacity_back(monkeypatch):
    ws = manager_with_patterned_tail()
    flaky = Flaky(ws, limit=4096)
    monkeypatch.setattr(allocator_of(ws), "allocate", flaky)
    with pytest.raises(torch.OutOfMemoryError) as info:  # the allocator's own error
        ws.get_simultaneous(((100_000,), U8))
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "old capacity (1024 bytes) was allocated again" in notes and "(0, 0)" in notes
    assert flaky.asked == [100_096, 1024]  # released first, then the old size again
    slot = ws.state.slots[0]
    assert (slot.capacity, slot.retained, slot.growths, slot.high_water) == (1024, None, 2, 1024)
    assert slot_buffer(ws, (0, 0)).numel() == 1024  # the state records the buffer that exists
    _tail, intact = ws.get_retained("kv", (16,), U8)
    assert not intact  # new bytes: reported not intact
    (view,) = ws.get_simultaneous(((1000,), U8))  # the manager keeps working
    assert view.data_ptr() % 256 == 0


def test_when_even_the_old_capacity_fails_the_slot_is_empty_and_the_error_says_so(monkeypatch):
    ws = manager_with_patterned_tail()
    monkeypatch.setattr(allocator_of(ws), "allocate", Flaky(ws, limit=0, error=MemoryError))
    with pytest.raises(MemoryError) as info:
        ws.get_simultaneous(((100_000,), U8))
    assert "has no buffer now (capacity 0)" in " ".join(info.value.__notes__)
    assert ws.state.capacity((0, 0)) == 0 and slot_buffer(ws, (0, 0)) is None
    assert ws.state.slots[0].retained is None
    monkeypatch.undo()
    (view,) = ws.get_simultaneous(((10,), U8))  # its next request allocates one
    assert ws.state.capacity((0, 0)) == 256 and view.numel() == 10


def test_an_interrupt_during_allocation_restores_the_slot(monkeypatch):
    ws = manager_with_patterned_tail()
    monkeypatch.setattr(allocator_of(ws), "allocate", Flaky(ws, 4096, KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        ws.get_simultaneous(((100_000,), U8))
    assert ws.state.capacity((0, 0)) == 1024 and slot_buffer(ws, (0, 0)).numel() == 1024


def test_ubatches_growth_failing_in_the_second_slot_leaves_every_slot_in_step(monkeypatch):
    """A growth over several slots completes or leaves every slot at its old capacity: the
    first slot's new buffer goes too, so the policy's slots stay in step."""
    ws = workspace("cpu", num_ubatches=2, growth="ubatches")
    ws.get_simultaneous(((4096,), U8))
    flaky = Flaky(ws, limit=10_000)
    calls = []

    def second_fails(nbytes, *args, **kwargs):
        calls.append(nbytes)
        if len(calls) == 2:  # the first slot grew; the second slot's allocation fails
            raise torch.OutOfMemoryError("pretend the device is full now")
        return flaky.real(nbytes, *args, **kwargs)

    monkeypatch.setattr(allocator_of(ws), "allocate", second_fails)
    with use_workspace_ubatch(0), pytest.raises(torch.OutOfMemoryError) as info:
        ws.get_simultaneous(((8192,), U8))
    assert [s.capacity for s in ws.state.slots] == [4096, 4096]  # not [8192, 4096]
    assert [slot_buffer(ws, (u, 0)).numel() for u in (0, 1)] == [4096, 4096]
    assert [s.high_water for s in ws.state.slots] == [4096, 0]  # the failed call served nothing
    notes = " ".join(info.value.__notes__)
    assert "slot (0, 0)" in notes and "slot (1, 0)" in notes


def test_a_context_that_fails_on_a_multi_slot_growth_keeps_every_slot_in_step(allocator):
    """``reserve`` over two slots with a context that raises: the built-ins released both
    old buffers first and get both old capacities back (in step, tails dropped); a
    callable allocator entered the context before anything was released (nothing changes)."""
    fail = [False]

    @contextlib.contextmanager
    def pool():
        if fail[0]:
            raise RuntimeError("sleep-mode pool unavailable")
        yield

    ws = workspace("cpu", num_ubatches=2, alloc_context=pool)
    with use_workspace_ubatch(1):
        ws.get_simultaneous(((512,), U8))
    ws.get_simultaneous(((1024,), U8))
    before, buffers = ws.state, [slot_buffer(ws, (u, 0)) for u in (0, 1)]
    fail[0] = True
    for call in (
        lambda: ws.reserve(((4096,), U8)),
        lambda: ws.reserve_many([[((8192,), U8)]], slots="all"),
    ):
        with pytest.raises(RuntimeError, match="pool unavailable"):
            call()
        if allocator == "callable":
            assert ws.state is before
            assert [slot_buffer(ws, (u, 0)) for u in (0, 1)] == buffers
        else:
            assert [s.capacity for s in ws.state.slots] == [1024, 512]
            assert [slot_buffer(ws, (u, 0)).numel() for u in (0, 1)] == [1024, 512]
            assert all(s.retained is None for s in ws.state.slots)


class _Swallowing:
    """An ``alloc_context`` whose ``__exit__`` suppresses what went wrong inside it."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def test_a_context_that_suppresses_a_failed_allocation_is_reported_and_loses_nothing(
    allocator, monkeypatch
):
    """The original goes on without a buffer (a TypeError); here the growth fails clearly,
    the state records the buffer that exists, and the next request allocates."""
    ws = workspace("cpu", alloc_context=_Swallowing)
    ws.get_simultaneous(((1000,), U8))
    provider = allocator_of(ws)
    name = "allocate_apart" if hasattr(provider, "allocate_apart") else "allocate"
    real = getattr(provider, name)

    def fails(*args, **kwargs):
        raise MemoryError("pretend the device is full")

    monkeypatch.setattr(provider, name, fails)
    with pytest.raises(errors.AllocationSuppressedError, match=r"suppressed an exception") as info:
        ws.get_simultaneous(((100_000,), U8))
    assert isinstance(info.value, TypeError) and isinstance(info.value, RuntimeError)
    buffer = slot_buffer(ws, (0, 0))
    assert ws.state.capacity((0, 0)) == (0 if buffer is None else buffer.numel())
    monkeypatch.setattr(provider, name, real)
    (big,) = ws.get_simultaneous(((100_000,), U8))  # allocating works again: so does the slot
    big.fill_(7)
    assert ws.state.capacity((0, 0)) >= 100_000 and int(big[-1]) == 7
