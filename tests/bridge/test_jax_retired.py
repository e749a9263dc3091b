"""A JAX array imported from a workspace view pins the view's buffer after a growth.

The DLPack capsule keeps torch's storage alive while the array lives, so the manager's
retired-buffer report (weak references to storages) counts it, and stops once it is gone.
"""

from __future__ import annotations

import gc
import logging
import time

import jax.numpy as jnp
import pytest
import torch
from test_jax_views import workspace_manager

import interop

WorkspaceManager = workspace_manager()
if WorkspaceManager is None:
    pytest.skip("the workspace manager (issue 3) does not exist", allow_module_level=True)


def _grow(ws) -> None:
    ws.get_simultaneous(((4096,), torch.float32))  # larger than before: the slot grows


def _pinned_bytes_settle(ws, timeout: float = 5.0) -> int:
    """Pinned bytes once released buffers are gone (JAX frees a buffer when its last
    computation is done, possibly on a worker thread, a moment after the result is ready)."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        pinned = ws.stats().pinned_bytes
        if pinned == 0 or time.monotonic() > deadline:
            return pinned
        time.sleep(0.01)


def test_jax_array_of_a_retired_buffer_counts_as_pinned(caplog):
    ws = WorkspaceManager("cpu")
    (view,) = ws.get_simultaneous(((1024,), torch.float32))
    array = interop.to_jax(view.fill_(2.0))
    del view  # only the JAX array still references the buffer
    with caplog.at_level(logging.WARNING, logger="interop"):
        _grow(ws)
    assert ws.stats().pinned_bytes >= 4096
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("(0, 0)" in message for message in warnings), warnings  # names the slot
    assert float(jnp.sum(array)) == 2048.0  # the retired memory is alive and intact
    del array
    assert _pinned_bytes_settle(ws) == 0


def test_released_arrays_and_results_pin_nothing():
    ws = WorkspaceManager("cpu")
    (view,) = ws.get_simultaneous(((1024,), torch.float32))
    array = interop.to_jax(view.fill_(1.0))
    result = jnp.sum(array)  # a computed array owns its memory
    assert float(result) == 1024.0
    del view, array
    _grow(ws)
    assert _pinned_bytes_settle(ws) == 0
    assert float(result) == 1024.0
