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


def allocator_of(ws: WorkspaceManager) -> Any:
    """The allocator every growth of ``ws`` asks (patch its ``allocate`` to inject faults)."""
    return ws._allocator


def retired_of(ws: WorkspaceManager) -> Any:
    """The records of the buffers growth retired that something may still hold."""
    return ws._allocator.retired


def memo_of(ws: WorkspaceManager, index: int = 0) -> Any:
    """Slot ``index``'s ``get_simultaneous`` memo."""
    return ws._memos.acquired[index]
