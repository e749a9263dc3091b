"""The original's module-level singleton functions, and the pinned public names of the façade."""

import inspect
import logging
import types

import pytest
import torch
from conftest import TEST_DEVICE as DEVICE

import functional_ws as fws
import interop
from interop import (
    current_workspace_manager,
    init_workspace_manager,
    is_workspace_manager_initialized,
    lock_workspace,
    reset_workspace_manager,
    unlock_workspace,
)
from interop.errors import NotInitializedError, ReadOnlyAttributeError

FACADE_NAMES = {
    "GrowthDuringCaptureError", "InvalidSlotError", "InvalidSpecError",
    "LaneNotConfiguredError", "NotInitializedError", "PersistentKeyLockedError",
    "PersistentMismatchError", "SlotStats", "UbatchNotConfiguredError", "WorkspaceError",
    "WorkspaceLockedError", "WorkspaceManager", "WorkspaceStats", "current_slot",
    "current_workspace_manager", "init_workspace_manager", "is_workspace_manager_initialized",
    "lock_workspace", "reset_workspace_manager", "set_ubatch_provider", "unlock_workspace",
    "use_workspace_lane", "use_workspace_ubatch",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _no_manager():
    reset_workspace_manager()
    yield
    reset_workspace_manager()


def test_public_names_of_the_facade_are_pinned():
    assert set(interop.__all__) | set(interop.errors.__all__) >= FACADE_NAMES
    for name in interop.__all__:
        assert hasattr(interop, name), name


def test_use_before_init_raises_not_initialized():
    assert not is_workspace_manager_initialized()
    for call in (current_workspace_manager, lock_workspace, unlock_workspace):
        with pytest.raises(AssertionError, match="not initialized"):
            call()
    with pytest.raises(NotInitializedError):
        current_workspace_manager()


def test_init_lock_unlock_and_reset():
    init_workspace_manager(DEVICE, num_ubatches=2, num_lanes=3)
    assert is_workspace_manager_initialized()
    ws = current_workspace_manager()
    assert ws.state.num_ubatches == 2 and ws.state.num_lanes == 3 and ws.device == DEVICE
    ws.get_simultaneous(((64,), torch.uint8))
    lock_workspace()
    assert ws.is_locked()
    with pytest.raises(AssertionError, match="Workspace is locked"):
        ws.get_simultaneous(((4096,), torch.uint8))
    unlock_workspace()
    assert not ws.is_locked()
    reset_workspace_manager()
    assert not is_workspace_manager_initialized()


def test_init_again_warns_and_replaces(caplog):
    init_workspace_manager(DEVICE)
    first = current_workspace_manager()
    with caplog.at_level(logging.WARNING, logger="interop"):
        init_workspace_manager(DEVICE, growth="ubatches")
    assert "already initialized" in caplog.text and "reinitializing" in caplog.text
    assert current_workspace_manager() is not first
    assert current_workspace_manager().state.growth == "ubatches"


@pytest.mark.parametrize(
    "stand_in",
    [types.SimpleNamespace(_device=torch.device("cpu")), types.SimpleNamespace()],
    ids=["upstreams-attribute", "bare"],
)
def test_init_over_a_stand_in_a_test_patched_in_replaces_it(stand_in, monkeypatch, caplog):
    """vLLM's tests patch ``_manager``; upstream reads ``_manager._device`` (not ``device``)
    to warn, then installs the new manager."""
    monkeypatch.setattr(interop, "_manager", stand_in)
    with caplog.at_level(logging.WARNING, logger="interop"):
        init_workspace_manager(DEVICE)
    assert "reinitializing" in caplog.text
    assert isinstance(current_workspace_manager(), interop.WorkspaceManager)


def test_init_passes_alloc_context_through():
    entered = []

    class Pool:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return None

    init_workspace_manager(DEVICE, alloc_context=Pool)
    current_workspace_manager().get_simultaneous(((8,), torch.uint8))
    assert entered == [True]


# ----- upstream's module constant (vLLM 0.34.0's _VIEW_ALIGNMENT) -----


def test_view_alignment_is_upstreams_constant_and_every_defaults_alignment():
    assert interop._VIEW_ALIGNMENT == 256
    default = inspect.signature(interop.WorkspaceManager).parameters["alignment"].default
    assert default == fws.initial_state().alignment == interop._VIEW_ALIGNMENT
    ws = interop.WorkspaceManager(DEVICE)
    first, second = ws.get_simultaneous(((1,), torch.uint8), ((1,), torch.uint8))
    assert second.data_ptr() - first.data_ptr() == interop._VIEW_ALIGNMENT
    assert ws.state.alignment == interop._VIEW_ALIGNMENT


REBINDINGS = {
    "set": (lambda: setattr(interop, "_VIEW_ALIGNMENT", 512), "setting it to 512"),
    "set-same": (lambda: setattr(interop, "_VIEW_ALIGNMENT", 256), "setting it to 256"),
    "delete": (lambda: delattr(interop, "_VIEW_ALIGNMENT"), "deleting it"),
}


@pytest.mark.parametrize(("rebind", "change"), REBINDINGS.values(), ids=REBINDINGS)
def test_view_alignment_cannot_be_rebound_since_it_would_change_nothing(rebind, change):
    """Upstream reads it at each request; a manager here keeps the alignment it was made
    with, so a rebinding that changed nothing would be a silent wrong answer: refused."""
    with pytest.raises(ReadOnlyAttributeError, match=change) as info:
        rebind()
    assert isinstance(info.value, AttributeError)
    assert "interop._VIEW_ALIGNMENT is read-only (256)" in str(info.value)
    assert "alignment=n" in str(info.value)
    assert interop._VIEW_ALIGNMENT == 256 and interop.__dict__["_VIEW_ALIGNMENT"] == 256


def test_view_alignment_refuses_monkeypatch_and_other_attributes_still_set(monkeypatch):
    with pytest.raises(AttributeError, match="read-only"):
        monkeypatch.setattr(interop, "_VIEW_ALIGNMENT", 512)
    monkeypatch.setattr(interop, "_manager", None)  # vLLM's tests patch this one: allowed
    assert interop._manager is None
