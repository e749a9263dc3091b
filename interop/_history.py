"""A recorded history of a manager's calls, for stepping through a warm-up in a notebook.

A manager that is not recording pays one test of an empty list per public call; while a
recording is on, its public methods route through :meth:`Recorder.call`.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def _describe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value: Any) -> str:
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", "<callable>")
    text = repr(value).replace("torch.", "")
    return text if len(text) <= 60 else text[:57] + "..."


class Recorder:
    """The recordings running on one manager, and the wrapper its public methods call.

    A manager checks :attr:`active` (a list, empty unless something records) at the top
    of each public method; only while it is non-empty do calls go through :meth:`call`.
    Every call from every thread is appended to every active history; calls a public
    method makes to another one (``get_persistent`` calling ``get_persistent_resource``)
    are recorded once, as the outer call (a depth count per thread). Recordings nest: each
    receives everything made inside its block.

    Attributes:
        active: the histories recording now, in the order their blocks began.
    """

    def __init__(self, current_slot: Callable[[], Slot]) -> None:
        self.active: list[History] = []
        self._current_slot = current_slot
        self._lock = threading.Lock()
        self._depth = threading.local()

    def outermost(self) -> bool:
        """Whether the calling thread is outside every recorded call (so a public method
        it enters now is recorded; one entered from inside another is not)."""
        return not getattr(self._depth, "value", 0)

    def call(
        self,
        manager: Any,
        name: str,
        method: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Run ``method(*args, **kwargs)`` and record it (if it is the outermost call)."""
        depth = getattr(self._depth, "value", 0)
        self._depth.value = depth + 1
        error = None
        try:
            return method(*args, **kwargs)
        except Exception as err:
            error = f"{type(err).__name__}: {err}"
            raise
        finally:
            self._depth.value = depth
            if depth == 0:
                record = Record(
                    _describe(name, args, kwargs), self._current_slot(), manager.state, error
                )
                with self._lock:
                    for history in self.active:
                        history.append(record)

    @contextmanager
    def recording(self, manager: Any) -> Iterator[History]:
        """Record ``manager``'s public calls until the block ends.

        Yields:
            The :class:`History`, filled as calls are made; it starts with the current state.
        """
        history = History([Record("start", self._current_slot(), manager.state)])
        with self._lock:
            self.active.append(history)
        try:
            yield history
        finally:
            with self._lock:
                self.active[:] = [h for h in self.active if h is not history]
