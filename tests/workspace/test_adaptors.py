"""The allocator's adaptors (``interop/_workspace/_allocators.py``): each adds one concern to the
allocator it wraps and passes every other call on, unchanged."""

from __future__ import annotations

import logging

import torch

from interop._workspace._allocators import Adaptor, ResizeLog, RetiredTracking, allocator_stack
from interop._workspace._providers import Allocation, SlotAllocator

CPU = torch.device("cpu")


class Recording(SlotAllocator):
    """A provider that records each call it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def allocate(self, nbytes, device, alignment, *, in_use=(), slot=None, previous=0):
        self.calls.append(("allocate", (nbytes, slot, previous)))
        return Allocation(torch.zeros(nbytes, dtype=torch.uint8), nbytes)

    def release(self, slot, buffer):
        self.calls.append(("release", slot))

    def report(self):
        self.calls.append(("report", None))


def test_the_stack_is_retired_tracking_over_the_resize_log_over_the_provider():
    stack = allocator_stack("torch", CPU)
    assert repr(stack) == "RetiredTracking(ResizeLog(SlotAllocator('torch')))"
    assert stack.name == "torch" and stack.releases_first and not stack.checks_overlap


def test_every_call_reaches_the_provider_through_both_adaptors():
    provider = Recording()
    stack = RetiredTracking(ResizeLog(provider))
    allocation = stack.allocate(512, CPU, 256, slot=(0, 1), previous=256)
    stack.release((0, 1), allocation.block)
    stack.report()
    assert provider.calls == [
        ("allocate", (512, (0, 1), 256)),
        ("release", (0, 1)),
        ("report", None),
    ]


def test_a_method_an_adaptor_does_not_override_is_its_upstreams_own():
    provider = Recording()
    log = ResizeLog(provider)
    tracking = RetiredTracking(log)
    assert tracking.allocate == log.allocate  # RetiredTracking adds nothing to allocate
    assert log.release == provider.release  # nor ResizeLog to release
    assert tracking.release != log.release and log.allocate != provider.allocate
    plain = Adaptor(provider)  # adds nothing at all
    assert (plain.allocate, plain.release, plain.report) == (
        provider.allocate,
        provider.release,
        provider.report,
    )


def test_the_adaptors_own_concerns_still_run(monkeypatch, caplog):
    monkeypatch.setenv("FUNCTIONAL_WS_DEBUG", "1")
    stack = allocator_stack("torch", CPU)
    with caplog.at_level(logging.INFO, logger="interop"):  # on for the whole growth
        allocation = stack.allocate(1024, CPU, 256, slot=(0, 0), previous=512)
        kept = allocation.buffer[:8]  # a view outliving the buffer's release
        block = allocation.block
        del allocation
        stack.release((0, 0), block)
        del block
        assert len(stack.pending) == 2  # what the engine sees before it calls report
        stack.report()
    assert stack.pending == []
    messages = [record.getMessage() for record in caplog.records]
    assert any("Resized workspace" in m and "0.00 MB" in m for m in messages)  # the log
    assert any("still pinned" in m for m in messages)  # retired-buffer tracking
    assert [r.slot for r in stack.retired.pinned()] == [(0, 0)]
    del kept


def test_nothing_is_queued_for_a_growth_the_log_would_not_write_and_nothing_pins():
    # The engine calls report only when something is queued (count_growth_calls' budget).
    stack = allocator_stack("torch", CPU)
    allocation = stack.allocate(1024, CPU, 256, slot=(0, 0), previous=512)
    block = allocation.block
    del allocation
    stack.release((0, 0), block)
    assert stack.pending == [] and SlotAllocator().pending == ()
