"""A recorded history of a manager's calls, for stepping through a warm-up in a notebook.

What ``WorkspaceManager.recording()`` yields; ``_recording.py`` fills it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

from functional_ws import Slot, WorkspaceState, diff


@dataclasses.dataclass(frozen=True)
class Record:
    """One call: what was called, in which slot, the state after it, and any error."""

    call: str
    slot: Slot
    state: WorkspaceState
    error: str | None = None

    def __str__(self) -> str:
        outcome = f" -> {self.error}" if self.error else ""
        return f"{self.call} in slot {self.slot}{outcome}"


class History(list[Record]):
    """The calls made while recording, in order; ``history[0]`` is the starting state."""

    def changes(self) -> Iterator[tuple[Record, str]]:
        """Each call with what it changed (:func:`functional_ws.diff` of the states)."""
        for before, after in itertools.pairwise(self):
            yield after, str(diff(before.state, after.state))

    def capacities(self) -> dict[Slot, list[int]]:
        """Per slot, the capacity after each recorded call (for plotting growth)."""
        if not self:
            return {}
        slots = self[0].state.all_slots()
        return {s: [r.state.capacity(s) for r in self] for s in slots}

    def plot_capacity(self, ax: Any = None) -> Any:
        """A matplotlib figure of each slot's capacity over the recorded calls."""
        import matplotlib.pyplot as plt

        if ax is None:
            fig, ax = plt.subplots(figsize=(8, 3))
        else:
            fig = ax.figure
        for slot, values in self.capacities().items():
            ax.step(range(len(values)), values, where="post", label=f"slot {slot}")
        ax.set_xlabel("call")
        ax.set_ylabel("capacity (bytes)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def __str__(self) -> str:
        return "\n".join(f"{i:3d}  {r}" for i, r in enumerate(self))
