"""A recording as a memory snapshot in the format torch's memory viewer reads.

``torch.cuda.memory._snapshot()`` returns a dict of ``segments`` (what the allocator holds
at the end, each cut into ``blocks``) and ``device_traces`` (what it did, in order:
``segment_alloc``/``segment_free``, ``alloc``/``free_requested``/``free_completed``,
``oom``). https://pytorch.org/memory_viz draws such a dict, pickled; so do the readers in
``torch.cuda._memory_viz`` (``segsum``, ``trace``, ``segment_plot``, ``trace_plot``).
:func:`memory_snapshot` writes a recording of a workspace that way:

* each buffer a slot held is a segment of its capacity; a growth frees the old segment
  and allocates the new one (in the original's order: the old one goes first);
* the views a call handed out are blocks: an ``alloc`` each, its size the view's bytes
  (the block's size adds the alignment padding, which the viewer draws as rounding);
  a ``get_simultaneous`` call's views live until the next one in their slot, a
  ``get_retained`` span until a later call hands out its bytes, any view until its
  buffer goes;
* a request the workspace refused or failed to serve (locked, above the device's memory,
  an allocation that failed, ``try_get_simultaneous`` returning ``None``) is an ``oom``
  entry, naming the error: ``size`` is the capacity its slot would have grown to,
  ``device_free`` the capacity the slot had (the viewer calls it the memory CUDA had free).

Addresses are made up: each buffer gets a range of its own (2 MiB aligned, in allocation
order) and each view lies at its offset in it, so the pictures are the workspace's, not the
device's. Each call is planned by the core on the state the call before it left (calls
from several threads are drawn in the order they finished). Persistent resources do not
live in the slots' buffers and are not drawn. No torch is needed to build one: it is plain
data (dicts, lists, str, int, bool, tuples), which the viewer's own unpickler reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .._ops import fit, retain
from .._sizing import _planning_copy
from .._spec import ViewSpec, round_up
from .._state import Slot, WorkspaceState
from .._trace_events import TraceEvent
from ._text import format_bytes

#: Where the made-up address space starts (a CUDA-like range, below 2**53 so that the
#: viewer's JavaScript reads every address exactly).
BASE_ADDRESS = 0x7F00_0000_0000
#: Every buffer's range starts on this boundary (the CUDA allocator's large-page size).
SEGMENT_GRANULE = 2 * 1024 * 1024
_UINT8 = np.dtype("uint8")


class Step(Protocol):
    """One recorded call, as :class:`interop.History` holds it (``history[0]`` is the
    start: its state is where the recording began)."""

    @property
    def call(self) -> str: ...
    @property
    def state(self) -> WorkspaceState: ...
    @property
    def error(self) -> str | None: ...
    @property
    def event(self) -> TraceEvent | None: ...


@dataclasses.dataclass
class _Block:
    """A view alive in a buffer: bytes ``[offset, end)`` of its slot, ``nbytes`` asked."""

    offset: int
    end: int
    nbytes: int
    frames: list[dict[str, Any]]
    retained: bool


@dataclasses.dataclass
class _Buffer:
    """A slot's buffer while it lives: where it lies and the views alive in it."""

    address: int
    capacity: int
    frames: list[dict[str, Any]]
    blocks: list[_Block] = dataclasses.field(default_factory=list)


def memory_snapshot(steps: Sequence[Step], *, device: int = 0) -> dict[str, Any]:
    """The snapshot dict of a recording: ``segments`` as the buffers are after the last
    call, ``device_traces`` what the calls did (module docstring).

    Args:
        steps: the recorded calls, the start first (an ``interop.History``).
        device: the device index to file it under (the viewer lists devices by index).

    Returns:
        ``{"segments": [...], "device_traces": [[], ..., [...]]}``, with the fields and
        action names of ``torch.cuda.memory._snapshot()``.

    Raises:
        ValueError: ``steps`` is empty, or ``device`` is not an int from 0.

    Example:
        >>> import numpy as np
        >>> from types import SimpleNamespace as Step
        >>> from functional_ws import Trace, acquire, initial_state
        >>> start = initial_state()
        >>> after, _ = acquire(start, (0, 0), ((100,), np.float32), ((3,), np.int8))
        >>> event = Trace().acquire((0, 0), ((100,), np.float32), ((3,), np.int8)).events[0]
        >>> snapshot = memory_snapshot([Step(call="start", state=start, error=None, event=None),
        ...                             Step(call="get_simultaneous(...)", state=after,
        ...                                  error=None, event=event)])
        >>> [(e["action"], e["size"]) for e in snapshot["device_traces"][0]]
        [('segment_alloc', 768), ('alloc', 400), ('alloc', 3)]
        >>> (segment,) = snapshot["segments"]
        >>> [(b["state"], b["size"], b["requested_size"]) for b in segment["blocks"]]
        [('active_allocated', 512, 400), ('active_allocated', 256, 3)]
    """
    if not steps:
        raise ValueError("memory_snapshot needs at least the start of a recording.")
    if type(device) is not int or device < 0:
        raise ValueError(f"device must be an int from 0, got {device!r}.")
    builder = _Builder(steps[0].state)
    for index in range(1, len(steps)):
        builder.step(index, steps[index - 1].state, steps[index])
    traces: list[list[dict[str, Any]]] = [[] for _ in range(device)]
    traces.append(builder.trace)
    segments = [_segment(buffer, device) for buffer in builder.buffers.values() if buffer.capacity]
    return {"segments": segments, "device_traces": traces}


class _Builder:
    """The buffers as they are after each call, and the trace entries so far."""

    def __init__(self, start: WorkspaceState) -> None:
        self.next_address = BASE_ADDRESS
        self.trace: list[dict[str, Any]] = []
        self.buffers: dict[Slot, _Buffer] = {}
        for slot, s in zip(start.all_slots(), start.slots, strict=True):
            if s.capacity:
                self.buffers[slot] = self._new_buffer(s.capacity, [])

    def _new_buffer(self, capacity: int, frames: list[dict[str, Any]]) -> _Buffer:
        buffer = _Buffer(self.next_address, capacity, frames)
        self.next_address += round_up(max(capacity, 1), SEGMENT_GRANULE)
        return buffer

    def step(self, index: int, before: WorkspaceState, step: Step) -> None:
        after, event = step.state, step.event
        replaced = [
            slot
            for slot, old, new in zip(after.all_slots(), before.slots, after.slots, strict=True)
            if (old.growths, old.capacity) != (new.growths, new.capacity)
        ]
        for slot in replaced:  # the original's order: the old buffers go first
            old = self.buffers.pop(slot, None)
            if old is not None:
                for block in list(old.blocks):
                    self._free(old, block)
                self._entry("segment_free", old.address, old.capacity, old.frames)
        plan = None if event is None or event.kind == "claim" else _plan(before, event)
        if plan is not None and event is not None:
            held = after.capacity(event.slot)
            if step.error is not None or plan.needed > held:
                why = f"refused: needs {format_bytes(plan.needed)}, holds {format_bytes(held)}"
                if step.error is not None:
                    why += f" ({step.error})"
                frames = [_frame(index, f"{step.call} in slot {event.slot}: {why}")]
                self.trace.append(
                    {"action": "oom", "device_free": held, "size": plan.needed, "stream": 0,
                     "frames": frames}
                )  # fmt: skip
                plan = None
            elif plan.retained and event.slot not in replaced:
                kept = before.slots[before.index(event.slot)].retained
                plan = dataclasses.replace(plan, intact=kept == (event.key, plan.offsets[0]))
        for slot in replaced:
            capacity = after.capacity(slot)
            if capacity:
                words = f"{step.call}: slot {slot} allocates {format_bytes(capacity)}"
                buffer = self.buffers[slot] = self._new_buffer(capacity, [_frame(index, words)])
                self._entry("segment_alloc", buffer.address, capacity, buffer.frames)
        if plan is not None and event is not None and event.slot in self.buffers:
            self._hand_out(self.buffers[event.slot], index, step.call, event, plan)

    def _hand_out(
        self, buffer: _Buffer, index: int, call: str, event: TraceEvent, plan: _Plan
    ) -> None:
        """Free what the call's views supersede or overlap, then allocate them."""
        new = []
        for i, ((nbytes, dtype), offset) in enumerate(zip(event.views, plan.offsets, strict=True)):
            if not nbytes:  # a zero-sized view takes no memory (torch allocates nothing)
                continue
            end = buffer.capacity if plan.retained else offset + round_up(nbytes, plan.alignment)
            what = f"view {i} ({dtype})" if len(event.views) > 1 else f"a {dtype} view"
            name = f"{call}: {what} in slot {event.slot}"
            new.append(_Block(offset, min(end, buffer.capacity), nbytes, [_frame(index, name)],
                              plan.retained))  # fmt: skip
        if plan.intact and [(b.offset, b.nbytes) for b in buffer.blocks if b.retained] == [
            (b.offset, b.nbytes) for b in new
        ]:
            return  # the span handed out again, its bytes as the last call left them
        for old in list(buffer.blocks):
            superseded = old.retained == plan.retained  # a call's views replace the last's
            if superseded or any(old.offset < b.end and b.offset < old.end for b in new):
                self._free(buffer, old)
        for block in new:
            buffer.blocks.append(block)
            self._entry("alloc", buffer.address + block.offset, block.nbytes, block.frames)

    def _free(self, buffer: _Buffer, block: _Block) -> None:
        buffer.blocks.remove(block)
        for action in ("free_requested", "free_completed"):
            self._entry(action, buffer.address + block.offset, block.nbytes, block.frames)

    def _entry(self, action: str, addr: int, size: int, frames: list[dict[str, Any]]) -> None:
        self.trace.append(
            {"action": action, "addr": addr, "size": size, "stream": 0, "frames": frames}
        )


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Where a request's views lie, and the capacity its slot needs for them."""

    offsets: tuple[int, ...]
    needed: int
    alignment: int
    retained: bool
    intact: bool = False


def _plan(before: WorkspaceState, event: TraceEvent) -> _Plan:
    """The core's plan of ``event`` on ``before``, as an unlocked workspace without a
    capacity limit makes it (so a refused request says what it needed)."""
    state = _planning_copy(before)
    index = state.index(event.slot)
    if event.kind == "acquire":
        planned, offsets, _, _ = fit(state, index, event.nbytes, argname="event")
        retained = False
    else:
        (nbytes,) = event.nbytes
        spec = ViewSpec((nbytes,), _UINT8, 1, nbytes)
        planned, span, _ = retain(state, event.slot, event.key, spec)
        offsets, retained = (span.offset,), True
    return _Plan(offsets, planned.capacity(event.slot), state.alignment, retained)


def _frame(index: int, name: str) -> dict[str, Any]:
    """A one-frame stack naming the recorded call: the viewer prints ``history:3:name``."""
    return {"filename": "history", "line": index, "name": name}


def _segment(buffer: _Buffer, device: int) -> dict[str, Any]:
    """A buffer as ``_snapshot()`` writes a segment: blocks tiling it from its address,
    the live views ``active_allocated``, the gaps ``inactive``."""
    blocks: list[dict[str, Any]] = []
    at = 0
    for view in sorted(buffer.blocks, key=lambda b: b.offset):
        if view.offset > at:
            blocks.append(_block(buffer.address + at, view.offset - at, 0, "inactive", []))
        blocks.append(_block(buffer.address + view.offset, view.end - view.offset, view.nbytes,
                             "active_allocated", view.frames))  # fmt: skip
        at = view.end
    if at < buffer.capacity:
        blocks.append(_block(buffer.address + at, buffer.capacity - at, 0, "inactive", []))
    active = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": device,
        "address": buffer.address,
        "total_size": buffer.capacity,
        "allocated_size": active,
        "active_size": active,
        "requested_size": sum(b["requested_size"] for b in blocks),
        "stream": 0,
        "segment_type": "large" if buffer.capacity > 1024 * 1024 else "small",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": buffer.frames,
        "blocks": blocks,
    }


def _block(
    address: int, size: int, requested: int, state: str, frames: list[Any]
) -> dict[str, Any]:
    return {"address": address, "size": size, "requested_size": requested, "state": state,
            "frames": frames}  # fmt: skip
