"""The allocators the façade's behavioural tests run under, and the manager they build.

A test module opts in with ``pytestmark = pytest.mark.usefixtures("allocator")`` (the fixture
lives in ``conftest.py``) and builds its managers with :func:`workspace`: every test then
runs once per allocator, with readable ids (``[torch]``, ``[jax]``, ``[callable]``).
"""

from __future__ import annotations

from typing import Any

import torch

from interop import WorkspaceManager


def misaligned_pool(nbytes: int, device: torch.device) -> torch.Tensor:
    """A user's pool as a callable allocator: a fresh block per call, starting 64 bytes in,
    so the manager has to realign it most of the time (its own storage, as a pool's tensor
    made through DLPack or ``torch.cuda.MemPool`` has)."""
    return torch.empty((nbytes + 64,), dtype=torch.uint8, device=device)[64:]


#: id -> the ``allocator=`` argument.
ALLOCATORS: dict[str, Any] = {"torch": "torch", "jax": "jax", "callable": misaligned_pool}
#: The allocator the current test runs under (set by the ``allocator`` fixture).
CHOSEN: dict[str, Any] = {"allocator": "torch"}


def workspace(device: torch.device | str, *args: Any, **kwargs: Any) -> WorkspaceManager:
    """``WorkspaceManager(device, *args, **kwargs)`` with the current test's allocator."""
    kwargs.setdefault("allocator", CHOSEN["allocator"])
    return WorkspaceManager(device, *args, **kwargs)
