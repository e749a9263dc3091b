"""How vLLM's other tests reach the workspace: by patching the module's ``_manager``.

vLLM's ``tests/model_executor/model_loader/test_reload.py`` (Marlin's locks) and
``tests/kernels/moe/test_moe_permute_unpermute.py`` (MoE permute scratch), in 0.33.0 as in
0.34.0, build a manager and ``monkeypatch.setattr(workspace, "_manager", manager)``, or
patch it to ``None`` to test the path without one; the MoE test also patches
``dbo_current_ubatch_id``. The code under test then calls the module-level functions, which
must read ``_manager`` when called. The call sites below are written the way those kernels
use the workspace, in our own words: one imports the functions when it runs, the other at
module level.
"""

import logging

import pytest
import torch

import interop
from interop import current_workspace_manager, is_workspace_manager_initialized

LOCKS = 8  # the kernels size theirs by the device's SM count


def locks_for(stream: str, device: str = "cpu") -> torch.Tensor:
    """Zeroed locks per stream from the process-wide manager; fresh ones without one (a
    Marlin-style call site: it imports the module's functions when it runs)."""
    from interop import current_workspace_manager, is_workspace_manager_initialized

    if not is_workspace_manager_initialized():
        return torch.zeros(LOCKS, dtype=torch.int32, device=device)
    return current_workspace_manager().get_persistent(
        ("locks", stream), (LOCKS,), torch.int32, zero_init=True
    )


def permute_scratch(experts: int) -> dict[str, torch.Tensor]:
    """Scratch shared by sequential layers of one slot; fresh without a manager (an MoE-style
    call site: the functions were imported with the module)."""

    def create() -> dict[str, torch.Tensor]:
        return {"offsets": torch.empty(experts + 1, dtype=torch.int64)}

    if not is_workspace_manager_initialized():
        return create()
    return current_workspace_manager().get_persistent_resource(("permute", experts), create)


@pytest.fixture(autouse=True)
def no_manager():
    interop.reset_workspace_manager()
    yield
    interop.reset_workspace_manager()


def test_a_patched_manager_is_the_one_every_module_function_reaches(monkeypatch):
    manager = interop.WorkspaceManager("cpu", num_ubatches=2)
    monkeypatch.setattr(interop, "_manager", manager)
    assert is_workspace_manager_initialized()
    assert current_workspace_manager() is manager
    interop.reserve_workspace(((1000,), torch.uint8))
    assert [s.capacity for s in manager.stats().slots] == [1024, 1024]
    interop.lock_workspace()
    assert manager.is_locked()
    interop.unlock_workspace()
    assert not manager.is_locked()
    monkeypatch.undo()
    assert not is_workspace_manager_initialized()


def test_marlin_style_locks_persist_per_stream_through_a_patched_manager(monkeypatch):
    manager = interop.WorkspaceManager("cpu")
    monkeypatch.setattr(interop, "_manager", manager)
    main = locks_for("main")
    assert main.shape == (LOCKS,) and main.dtype == torch.int32
    assert torch.count_nonzero(main) == 0
    main.fill_(1)
    assert locks_for("main") is main and torch.all(main == 1)  # zeroed on creation only
    aux = locks_for("aux")
    assert aux.data_ptr() != main.data_ptr() and torch.count_nonzero(aux) == 0
    manager.lock()
    assert locks_for("aux") is aux
    with pytest.raises(AssertionError, match="was not allocated during warmup"):
        locks_for("third")


def test_a_manager_patched_to_none_means_no_manager(monkeypatch):
    interop.init_workspace_manager("cpu")
    monkeypatch.setattr(interop, "_manager", None)
    assert not is_workspace_manager_initialized()
    first, second = locks_for("main"), locks_for("main")
    assert first.data_ptr() != second.data_ptr()  # fresh each call, as without a manager
    assert permute_scratch(4) is not permute_scratch(4)
    with pytest.raises(AssertionError, match="WorkspaceManager not initialized"):
        current_workspace_manager()
    monkeypatch.undo()
    assert is_workspace_manager_initialized()  # the manager init_workspace_manager made


def test_moe_style_scratch_is_one_per_slot_with_patched_manager_and_ubatch(monkeypatch):
    manager = interop.WorkspaceManager("cpu", num_ubatches=2, num_lanes=2)
    monkeypatch.setattr(interop, "_manager", manager)
    ubatch = 0
    monkeypatch.setattr(interop, "dbo_current_ubatch_id", lambda: ubatch)
    created = {}
    for ubatch in range(2):  # the patched dbo_current_ubatch_id reads it
        for lane in range(2):
            with interop.use_workspace_lane(lane):
                created[ubatch, lane] = permute_scratch(16)
                assert permute_scratch(16) is created[ubatch, lane]
    assert len({id(s) for s in created.values()}) == 4
    manager.lock()
    for (ubatch, lane), scratch in created.items():  # noqa: B007
        with interop.use_workspace_lane(lane):
            assert permute_scratch(16) is scratch
            with pytest.raises(AssertionError, match="was not allocated during warmup"):
                permute_scratch(32)


def test_init_after_a_patched_manager_warns_and_replaces_it(monkeypatch, caplog):
    patched = interop.WorkspaceManager("cpu")
    monkeypatch.setattr(interop, "_manager", patched)
    with caplog.at_level(logging.WARNING, logger="interop"):
        interop.init_workspace_manager("cpu", num_lanes=2)
    assert "WorkspaceManager already initialized on device cpu" in caplog.text
    assert current_workspace_manager() is not patched
    assert current_workspace_manager().state.num_lanes == 2
