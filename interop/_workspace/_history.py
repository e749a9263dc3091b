"""A recorded history of a manager's calls, for stepping through a warm-up in a notebook.

What ``WorkspaceManager.recording()`` yields (``_recording.py`` fills it): the calls, the
state after each, and how they display (a table and a capacity-over-time picture).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
from collections.abc import Iterator, Sequence
from html import escape
from typing import Any

from functional_ws import Slot, Trace, TraceEvent, WorkspaceState, diff
from functional_ws._presenters import bounded_text
from functional_ws.display import counted, plot_timeline, timeline_html
from functional_ws.display._snapshot import memory_snapshot
from functional_ws.display._text import first_and_last


@dataclasses.dataclass(frozen=True)
class Record:
    """One call: what was called, in which slot, the state after it, and any error.

    ``slot`` is ``None`` where the slot could not be known (the ubatch provider raised).
    ``declined`` says why a call that raised nothing served nothing: a
    ``try_get_simultaneous`` that returned ``None`` (locked, and the slot too small).
    ``event`` is the request as a trace holds it (:meth:`History.trace`), ``None`` for a call
    that is no request (a lock, a reservation) or was refused for its arguments. Its
    ``repr`` leaves the state, the event and ``declined`` out (``str`` shows ``declined``;
    print ``record.state`` for the state).
    """

    call: str
    slot: Slot | None
    state: WorkspaceState = dataclasses.field(repr=False)
    error: str | None = None
    event: TraceEvent | None = dataclasses.field(default=None, repr=False)
    declined: str | None = dataclasses.field(default=None, repr=False)

    def __str__(self) -> str:
        first = self.error.partition("\n")[0] if self.error else ""  # notes stay in .error
        outcome = f" -> {first or self.declined}" if first or self.declined else ""
        return f"{self.call} in slot {self.slot}{outcome}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(bounded_text(str(self)))


class History(list[Record]):
    """The calls made while recording, in order; ``history[0]`` is the starting state.

    ``print(history)`` lists the calls; a notebook shows the capacity over time and a table
    of the calls, their slots and what each changed; :meth:`plot` draws the picture.
    """

    def changes(self) -> Iterator[tuple[Record, str]]:
        """Each call with what it changed (:func:`functional_ws.diff` of the states)."""
        for before, after in itertools.pairwise(self):
            yield after, str(diff(before.state, after.state))

    def trace(self) -> Trace:
        """The requests recorded, in order, as a :class:`functional_ws.Trace`: each
        ``get_simultaneous``/``try_get_simultaneous``, ``get_retained`` and persistent
        key (``get_persistent`` claims ``(torch.Tensor, key)``), served, refused for want
        of room (locked, above the device's memory) or failed on the way (an allocation
        that failed, whatever it raised). Calls refused for their arguments are left out,
        and so are locks and reservations.

        Size a workspace from it (:func:`functional_ws.worst_case`,
        :meth:`interop.WorkspaceManager.reserve_for`) and check one against it
        (:func:`functional_ws.replay`).

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> with ws.recording() as history:
            ...     _ = ws.get_simultaneous(((100,), torch.float32), ((8,), torch.int32))
            ...     _ = ws.get_retained(("deepseek", 3), (16,), torch.bfloat16)
            >>> print(history.trace())
            Trace(2 events in slot (0, 0): 1 acquire, 1 retain)
                0  get_simultaneous(400 B float32, 32 B int32) in slot (0, 0)
                1  get_retained(('deepseek', 3), 32 B bfloat16) in slot (0, 0)
        """
        return Trace(tuple(r.event for r in self if r.event is not None))

    def capacities(self) -> dict[Slot, list[int]]:
        """Per slot, the capacity after each recorded call (for plotting growth)."""
        if not self:
            return {}
        slots = self[0].state.all_slots()
        return {s: [r.state.capacity(s) for r in self] for s in slots}

    def plot(self) -> Any:
        """A figure of each slot over the recorded calls: capacity, high water and the
        retained span, growths marked (:func:`functional_ws.display.plot_timeline`).

        Returns:
            A matplotlib ``Figure`` that pyplot does not keep: as a notebook cell's last
            line it shows once; in a script, ``history.plot().savefig("history.png")``.

        Raises:
            ImportError: matplotlib is not installed (``pip install 'functional-ws[plot]'``).
            ValueError: the history is empty.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> with ws.recording() as history:
            ...     _ = ws.get_simultaneous(((100,), torch.float32))
            >>> [ax.get_ylabel() for ax in history.plot().axes]
            ['slot (0, 0)']
        """
        return plot_timeline([r.state for r in self], [r.call for r in self])

    def plot_capacity(self) -> Any:
        """The older name of :meth:`plot`."""
        return self.plot()

    def memory_snapshot(self, *, device: int = 0) -> dict[str, Any]:
        """The recording as the dict ``torch.cuda.memory._snapshot()`` returns, which
        torch's memory viewer draws (https://pytorch.org/memory_viz, and the readers in
        ``torch.cuda._memory_viz``).

        Each buffer a slot held is a segment of its capacity (a growth frees the old one
        and allocates the new one); the views of each call are blocks (their alignment
        padding drawn as rounding), alive until a later call in their slot hands out their
        bytes or supersedes them; a request refused or failed (for want of room, an
        allocation that failed) is an ``oom`` entry naming the error.
        Addresses are made up (each buffer a range of its own) and persistent resources,
        which live outside the buffers, are not drawn
        (``functional_ws.display._snapshot`` has the details).

        Args:
            device: the device index to file it under (``1`` for a manager on ``cuda:1``).

        Returns:
            ``{"segments": [...], "device_traces": [...]}``: plain dicts, lists, str and int.

        Raises:
            ValueError: ``device`` is not an int from 0, or the history is empty.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> with ws.recording() as history:
            ...     _ = ws.get_simultaneous(((100,), torch.float32), ((3,), torch.int8))
            ...     ws.lock()
            ...     _ = ws.try_get_simultaneous(((4096,), torch.float32))
            >>> snapshot = history.memory_snapshot()
            >>> [e["action"] for e in snapshot["device_traces"][0]]
            ['segment_alloc', 'alloc', 'alloc', 'oom']
            >>> import torch.cuda._memory_viz as viz
            >>> print(viz.trace(snapshot).splitlines()[-2])
            raise OutOfMemoryError # 16.0KiB requested, 768.0B free in CUDA
        """
        return memory_snapshot(self, device=device)

    def save_memory_snapshot(self, path: str | os.PathLike[str], *, device: int = 0) -> None:
        """Write :meth:`memory_snapshot` to ``path``, pickled as torch's viewer loads it
        (protocol 4; drop the file on https://pytorch.org/memory_viz).

        Args:
            path: the file to write (replaced if it exists).
            device: as for :meth:`memory_snapshot`.

        Raises:
            ValueError: as :meth:`memory_snapshot` (nothing is written).
            OSError: the file could not be written.
        """
        snapshot = memory_snapshot(self, device=device)
        with open(path, "wb") as f:
            pickle.dump(snapshot, f, protocol=4)

    def __str__(self) -> str:
        return "\n".join(f"{i:3d}  {r}" for i, r in enumerate(self))

    def __repr__(self) -> str:
        slots = sorted({r.slot for r in self[1:] if r.slot is not None})
        refused = sum(r.error is not None or r.declined is not None for r in self)
        where = f" in {', '.join(map(str, slots))}" if slots else ""
        return (
            f"History({counted(max(len(self) - 1, 0), 'call')} after the start{where}, "
            f"{refused} refused)"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(bounded_text(str(self)))

    def _repr_html_(self) -> str:
        return history_html(self)


#: The calls the HTML table lists: the first and the last half of this many, and a line
#: saying how many between them are left out (a long recording stays a page, not megabytes).
SHOWN_CALLS = 200


def _outcome_html(history: Sequence[Record], i: int) -> str:
    """What call ``i`` did: the error it raised, and what it changed (a failed growth
    changes the state too)."""
    record = history[i]
    if i == 0:
        return "<i>the starting state</i>"
    changed = diff(history[i - 1].state, record.state)
    parts = []
    if record.error is not None:
        error = escape(bounded_text(record.error)).replace("\n", "<br>")
        parts.append(f'<span style="color:#b00">{error}</span>')
    elif record.declined is not None:
        parts.append(f'<span style="color:#b00">{escape(record.declined)}</span>')
    if changed or (record.error is None and record.declined is None):
        parts.append(escape(bounded_text(str(changed))).replace("\n", "<br>"))
    return "<br>".join(parts)


def history_html(history: Sequence[Record]) -> str:
    """A history as HTML: the capacity over time, then a table of the calls, the slot each
    ran in and what it changed (and the error it raised); at most :data:`SHOWN_CALLS` of
    them, the first and the last."""
    if not history:
        return "<i>an empty history</i>"
    rows = []
    count, half = len(history), SHOWN_CALLS // 2
    for i in first_and_last(count, SHOWN_CALLS):  # a line for the calls between
        if i is None:
            rows.append(
                f'<tr><td></td><td colspan="3"><i>... {counted(count - SHOWN_CALLS, "call")} '
                f"not shown (history[{half}:{count - half}])</i></td></tr>"
            )
            continue
        record = history[i]
        rows.append(
            f'<tr><td style="text-align:right">{i}</td><td><code>{escape(record.call)}</code>'
            f"</td><td>{escape(str(record.slot))}</td><td>{_outcome_html(history, i)}</td></tr>"
        )
    cell = 'style="padding:1px 8px;text-align:left;border-bottom:1px solid #ccc"'
    table = (
        '<div style="max-height:24em;overflow-y:auto"><table style="border-collapse:collapse;'
        f'font:12px sans-serif"><tr><th {cell}>#</th><th {cell}>call</th><th {cell}>slot</th>'
        f"<th {cell}>what changed</th></tr>{''.join(rows)}</table></div>"
    )
    head = f"<div><b>History</b>: {escape(repr(history))}</div>"
    states = [r.state for r in history]
    picture = timeline_html(states, [r.call for r in history])
    return f'<div style="font:12px sans-serif">{head}{picture}{table}</div>'
