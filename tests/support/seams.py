"""The supported ways tests look inside a manager: one place, so the rooms can move.

A slot's buffer comes through ``_current_workspaces`` (upstream vLLM's attribute, which
its own tests read); the allocator a test wraps to inject faults, the retired-buffer
records and a slot's memo through the manager's rooms.
"""

from __future__ import annotations

from typing import Any

import torch

from interop import WorkspaceManager


def slot_buffer(ws: WorkspaceManager, slot: tuple[int, int] = (0, 0)) -> torch.Tensor | None:
    """The aligned ``uint8`` buffer slot ``slot`` holds now (``None`` while it has none)."""
    return ws._current_workspaces[ws.state.index(slot)]


def base_of(ws: WorkspaceManager, slot: tuple[int, int] = (0, 0)) -> int:
    """The address of slot ``slot``'s buffer (it must have one)."""
    buffer = slot_buffer(ws, slot)
    assert buffer is not None, f"slot {slot} has no buffer"
    return buffer.data_ptr()


def allocator_of(ws: WorkspaceManager) -> Any:
    """The allocator every growth of ``ws`` asks (patch its ``allocate`` to inject faults)."""
    return ws._allocator


def retired_of(ws: WorkspaceManager) -> Any:
    """The records of the buffers growth retired that something may still hold."""
    return ws._allocator.retired


def in_slot_buffer(
    ws: WorkspaceManager, view: torch.Tensor, slot: tuple[int, int] = (0, 0)
) -> bool:
    """Whether ``view``'s bytes lie inside ``slot``'s current buffer."""
    buffer = slot_buffer(ws, slot)
    assert buffer is not None, f"slot {slot} holds no buffer"
    start, end = buffer.data_ptr(), buffer.data_ptr() + buffer.numel()
    return start <= view.data_ptr() and view.data_ptr() + view.numel() * view.element_size() <= end


def memo_of(ws: WorkspaceManager, index: int = 0) -> Any:
    """Slot ``index``'s ``get_simultaneous`` memo."""
    return ws._memos.acquired[index]


def slots_snapshot(
    ws: WorkspaceManager, ubatches: int = 2, *, bytes_at: str = "start"
) -> tuple[Any, list[tuple[int, torch.Tensor] | None]]:
    """What a refused call must leave alone: the state (compare it with ``is``) and, for
    each ubatch slot ``(u, 0)`` below ``ubatches``, its buffer's address and a copy of 64 of
    its bytes, from the buffer's start (``bytes_at="start"``) or from its retained span's
    (``"retained"``); ``None`` for a slot without a buffer."""
    slots: list[tuple[int, torch.Tensor] | None] = []
    for ubatch in range(ubatches):
        buffer = slot_buffer(ws, (ubatch, 0))
        if buffer is None:
            slots.append(None)
            continue
        start = 0
        if bytes_at == "retained":
            start = ws.state.slots[ws.state.index((ubatch, 0))].retained[1]
        slots.append((buffer.data_ptr(), buffer[start : start + 64].clone()))
    return ws.state, slots


def mutex_is_free(ws: WorkspaceManager) -> bool:
    """Whether no one holds the manager's mutex (taken and released at once if free)."""
    mutex = ws._engine._mutex
    if not mutex.acquire(blocking=False):
        return False
    mutex.release()
    return True


def inconsistencies(ws: WorkspaceManager) -> list[str]:
    """What in ``ws`` disagrees with itself, as sentences (empty when nothing): a held
    mutex, a slot whose state claims another size than its buffer's (bytes it does not
    hold, or none while it holds some), a dead memo in the tables."""
    problems = [] if mutex_is_free(ws) else ["the mutex is held"]
    state = ws.state
    for index, slot in enumerate(state.slots):
        buffer = ws._engine.buffers.buffer(index)
        size = 0 if buffer is None else buffer.numel()
        if size != slot.capacity:  # too much is unsafe; too little refuses what fits
            problems.append(f"slot {index} claims {slot.capacity} bytes, its buffer has {size}")
    for table in (ws._memos.acquired_at, ws._memos.retained_at):
        for row in table:
            problems.extend(f"memo of slot {memo.index} is dead" for memo in row if memo.dead)
    return problems


def with_old_generation(ws: WorkspaceManager) -> Any:
    """Fill ``ws``'s ``get_simultaneous`` memo, whose bound a test set to 8 (generations of
    four): requests of 1-4 bytes memoised, then 5, so 1-4 are the old generation. Returns
    ``use(n)``, the request of ``n`` bytes."""
    ws.get_simultaneous(((4096,), torch.uint8))

    def use(n: int) -> list[torch.Tensor]:
        return ws.get_simultaneous(((n,), torch.uint8))

    for n in (1, 2, 3, 4):
        use(n), use(n)  # memoised
    use(5), use(5)  # the young generation was full: 1-4 are the old one now
    return use
