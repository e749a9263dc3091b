"""Plain-text rendering of a state: a few lines per slot, for terminals and the demo."""

from __future__ import annotations

from .._state import WorkspaceState


def format_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1 (exact bytes below 1 KiB).

    Example:
        >>> from functional_ws.display import format_bytes
        >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**30)
        ('512 B', '1.50 KiB', '3.00 GiB')
    """
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{value:.2f} {unit}"


def render(state: WorkspaceState) -> str:
    """A few lines per slot: capacity, high-water mark, growths, retained span, keys.

    Example:
        >>> import numpy as np
        >>> from functional_ws import initial_state, acquire, lock, render
        >>> s, _ = acquire(initial_state(), (0, 0), ((100,), np.dtype("float32")))
        >>> print(render(lock(s)))
        WorkspaceState: 1 ubatch x 1 lane, alignment 256, growth 'slot', LOCKED
          slot (0, 0): capacity 512 B, high water 512 B, 1 growth
            retained: none
            persistent keys: none
    """
    ubatches = f"{state.num_ubatches} ubatch{'es' if state.num_ubatches != 1 else ''}"
    lanes = f"{state.num_lanes} lane{'s' if state.num_lanes != 1 else ''}"
    lines = [
        f"WorkspaceState: {ubatches} x {lanes}, alignment {state.alignment}, "
        f"growth {state.growth!r}, {'LOCKED' if state.locked else 'unlocked'}"
    ]
    for slot, s in zip(state.all_slots(), state.slots, strict=True):
        lines.append(
            f"  slot {slot}: capacity {format_bytes(s.capacity)}, high water "
            f"{format_bytes(s.high_water)}, {s.growths} growth{'s' if s.growths != 1 else ''}"
        )
        if s.retained is None:
            lines.append("    retained: none")
        else:
            key, start = s.retained
            lines.append(f"    retained: {key!r} at offset {start}")
        keys = ", ".join(sorted(repr(k) for k in s.persistent_keys)) or "none"
        lines.append(f"    persistent keys: {keys}")
    return "\n".join(lines)
