"""Upstream's next name for the ubatch selection, ``use_workspace_ubatch_id`` (vLLM PR #58161,
open; not in any release), its test cases in our own words, on ``interop``.

The PR adds a context manager that selects the ubatch for the code inside it, overriding
vLLM's dual-batch-overlap thread map (``dbo_current_ubatch_id``); its test checks that the
manager's slot index follows the override for every (ubatch, lane) pair (the private
``_get_workspace_id`` and ``_resolve_workspace_id``: ``ubatch * num_lanes + lane``), and
that persistent resources do too, before and after ``lock()``. ``interop``'s
``use_workspace_ubatch`` is the same context manager under our name.
"""

from unittest.mock import Mock

import pytest
import torch

import interop

PAIRS = [(ubatch, lane) for ubatch in range(2) for lane in range(2)]


@pytest.mark.parametrize(("ubatch", "lane"), PAIRS)
def test_the_slot_index_follows_the_ubatch_override(ubatch, lane):
    manager = interop.WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    with interop.use_workspace_ubatch_id(ubatch), interop.use_workspace_lane(lane):
        assert manager._get_workspace_id() == manager._resolve_workspace_id() == ubatch * 2 + lane


def test_persistent_resources_follow_the_ubatch_override():
    manager = interop.WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    factory = Mock(side_effect=lambda: torch.zeros(4))
    with interop.use_workspace_ubatch_id(1):
        created = manager.get_persistent_resource("scratch", factory)
    manager.lock()
    with interop.use_workspace_ubatch_id(1):
        assert manager.get_persistent_resource("scratch", factory) is created
    assert factory.call_count == 1  # found again, not rebuilt
    with (
        interop.use_workspace_ubatch_id(0),
        pytest.raises(AssertionError, match="was not allocated during warmup"),
    ):
        manager.get_persistent_resource("scratch", factory)
    assert factory.call_count == 1


def test_the_override_wins_over_a_patched_thread_map(monkeypatch):
    """What the override is for: inside it, ``dbo_current_ubatch_id`` is not consulted."""
    monkeypatch.setattr(interop, "dbo_current_ubatch_id", lambda: 0)
    manager = interop.WorkspaceManager("cpu", num_ubatches=2)
    assert manager._get_workspace_id() == 0
    with interop.use_workspace_ubatch_id(1):
        assert manager._get_workspace_id() == 1
        (view,) = manager.get_simultaneous(((64,), torch.uint8))
    assert manager._current_workspaces[0] is None
    assert manager._current_workspaces[1].data_ptr() == view.data_ptr()


def test_use_workspace_ubatch_id_is_use_workspace_ubatch():
    with interop.use_workspace_ubatch_id(1):
        assert interop.current_slot() == (1, 0)
    with pytest.raises(ValueError, match="non-negative"):
        interop.use_workspace_ubatch_id(-1)
    assert "use_workspace_ubatch_id" in interop.__all__
