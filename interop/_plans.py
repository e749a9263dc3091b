"""Plans on disk: a warm-up's sizes as JSON, reserved again at the next start."""

from __future__ import annotations

import json
import os

import torch

import functional_ws as fws
from functional_ws import InvalidSpecError, WorkspaceState


def save_plan(state: WorkspaceState, path: str | os.PathLike[str]) -> None:
    """Write ``state``'s plan (:func:`functional_ws.to_dict`) to ``path`` as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fws.to_dict(state), f, indent=1)


def reserve_plan(
    state: WorkspaceState, path: str | os.PathLike[str]
) -> tuple[WorkspaceState, bool]:
    """``state`` with every slot reserved to the capacity the plan at ``path`` lists.

    Returns:
        ``(new_state, locked)``: ``locked`` says whether the plan was saved locked.

    Raises:
        InvalidSpecError: (``ValueError``) a malformed plan, or one made for another number
            of ubatches or lanes, or another alignment.
        WorkspaceLockedError: ``state`` is locked and a slot would have to grow.
    """
    with open(path, encoding="utf-8") as f:
        plan = fws.from_dict(json.load(f))
    for name in ("num_ubatches", "num_lanes", "alignment"):
        if getattr(plan, name) != getattr(state, name):
            raise InvalidSpecError(
                f"plan {os.fspath(path)!r} has {name}={getattr(plan, name)}, but this "
                f"manager has {name}={getattr(state, name)}."
            )
    for slot, planned in zip(plan.all_slots(), plan.slots, strict=True):
        state = fws.reserve(state, [((planned.capacity,), torch.uint8)], [slot])
    return state, plan.locked
