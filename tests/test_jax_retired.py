"""A JAX array imported from a workspace view pins the view's buffer after a growth.

The DLPack capsule keeps torch's storage alive while the array lives, so the manager's
retired-buffer report (weak references to storages) counts it, and stops once it is gone.
"""

from __future__ import annotations

import gc
import logging

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


def test_jax_array_of_a_retired_buffer_counts_as_pinned(caplog):
    ws = WorkspaceManager("cpu")
    (view,) = ws.get_simultaneous(((1024,), torch.float32))
    array = interop.to_jax(view)
    del view  # only the JAX array still references the buffer
    with caplog.at_level(logging.WARNING, logger="interop"):
        _grow(ws)
    assert ws.stats().pinned_bytes >= 4096
    assert "still pinned" in caplog.text
    assert float(jnp.sum(array)) == float(jnp.sum(array))  # still readable, memory alive
    del array
    gc.collect()
    assert ws.stats().pinned_bytes == 0


def test_released_arrays_and_results_pin_nothing(caplog):
    ws = WorkspaceManager("cpu")
    (view,) = ws.get_simultaneous(((1024,), torch.float32))
    result = jnp.sum(interop.to_jax(view.fill_(1.0)))  # a computed array owns its memory
    del view
    with caplog.at_level(logging.WARNING, logger="interop"):
        _grow(ws)
    assert float(result) == 1024.0
    assert ws.stats().pinned_bytes == 0
    assert "still pinned" not in caplog.text
