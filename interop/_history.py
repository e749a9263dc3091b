"""A recorded history of a manager's calls, for stepping through a warm-up in a notebook.

Recording swaps instance attributes in for the public methods while it is on, so a manager
that is not recording pays nothing for the feature on its hot path.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from functional_ws import Slot, WorkspaceState, diff

#: The calls a history records (the nested calls they make are not recorded twice).
RECORDED = (
    "get_simultaneous",
    "try_get_simultaneous",
    "get_retained",
    "get_persistent",
    "get_persistent_resource",
    "reserve",
    "lock",
    "unlock",
    "load_plan",
)


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


def _describe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value: Any) -> str:
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", "<callable>")
    text = repr(value).replace("torch.", "")
    return text if len(text) <= 60 else text[:57] + "..."


@contextmanager
def recording(manager: Any, current_slot: Callable[[], Slot]) -> Iterator[History]:
    """Record ``manager``'s public calls until the block ends.

    Args:
        manager: the manager (anything with ``.state`` and the methods in :data:`RECORDED`).
        current_slot: how to tell the slot a call runs in.

    Yields:
        The :class:`History`, filled as calls are made; it starts with the current state.
    """
    history = History([Record("start", current_slot(), manager.state)])
    depth = [0]

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            error = None
            try:
                return method(*args, **kwargs)
            except Exception as err:
                error = f"{type(err).__name__}: {err}"
                raise
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    call = _describe(name, args, kwargs)
                    history.append(Record(call, current_slot(), manager.state, error))

        recorded.__name__ = name
        return recorded

    for name in RECORDED:
        setattr(manager, name, wrap(name, getattr(manager, name)))
    try:
        yield history
    finally:
        for name in RECORDED:
            delattr(manager, name)
