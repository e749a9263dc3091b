"""Plain-text rendering: sizes in binary units, counted nouns, a few lines per slot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from .._presenters import key_text
from .._state import WorkspaceState


def format_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1 (exact bytes below 1 KiB).

    Example:
        >>> from functional_ws.display import format_bytes
        >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**30)
        ('512 B', '1.50 KiB', '3.00 GiB')
        >>> format_bytes(2**20 - 1), format_bytes(2**62)  # rounded up into the next unit
        ('1.00 MiB', '4.00 EiB')
    """
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in _UNITS:
        if round(value, 2) < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    return f"{value:.2f} {unit}"


#: Binary units up to the largest a workspace can hold (below 2**63 bytes).
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
#: The most slots a picture draws (those that held bytes first, kept in slot order).
MAX_DRAWN = 16
_T = TypeVar("_T")


def first_and_last(count: int, limit: int) -> list[int | None]:
    """The indices a table of ``count`` rows shows when it shows at most ``limit``: all of
    them, or the first and last ``limit // 2`` with ``None`` where the rest are left out.

    Example:
        >>> first_and_last(3, 4), first_and_last(7, 4)
        ([0, 1, 2], [0, 1, None, 5, 6])
    """
    if count <= limit:
        return list(range(count))
    half = limit // 2
    return [*range(half), None, *range(count - half, count)]


def drawn_slots(items: Sequence[_T], used: Callable[[_T], bool]) -> tuple[list[_T], str]:
    """At most :data:`MAX_DRAWN` of ``items`` (one per slot, in slot order): those ``used``
    says held bytes first, then the others, drawn in slot order; and a note on what is left
    out (``""`` when nothing is).

    Example:
        >>> drawn, note = drawn_slots(list(range(40)), lambda i: i % 10 == 0)
        >>> drawn[:5], len(drawn), note
        ([0, 1, 2, 3, 4], 16, '24 more slots not drawn (all of them never held bytes)')
    """
    if len(items) <= MAX_DRAWN:
        return list(items), ""
    flags = [bool(used(item)) for item in items]
    order = [i for i, f in enumerate(flags) if f] + [i for i, f in enumerate(flags) if not f]
    chosen = set(order[:MAX_DRAWN])
    left = [i for i in range(len(items)) if i not in chosen]
    idle = sum(1 for i in left if not flags[i])
    never = "all of them" if idle == len(left) else f"{idle} of them"
    note = f"{counted(len(left), 'more slot')} not drawn ({never} never held bytes)"
    return [items[i] for i in sorted(chosen)], note


def exact_bytes(n: int) -> str:
    """``n`` in binary units with the exact count beside it when the unit rounds it.

    Example:
        >>> exact_bytes(512), exact_bytes(2048), exact_bytes(659712)
        ('512 B', '2.00 KiB (2,048 B)', '644.25 KiB (659,712 B)')
    """
    short = format_bytes(n)
    return short if n < 1024 else f"{short} ({n:,} B)"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for one: ``1 ubatch``, ``2 ubatches``, ``0 lanes``.

    Example:
        >>> counted(1, "ubatch"), counted(2, "ubatch"), counted(3, "lane")
        ('1 ubatch', '2 ubatches', '3 lanes')
    """
    if n == 1:
        return f"1 {noun}"
    if plural is None:
        plural = noun + ("es" if noun.endswith(("ch", "sh", "s", "x")) else "s")
    return f"{n} {plural}"


def describe_state(state: WorkspaceState) -> str:
    """The header's words for a state: slots, alignment, growth policy and the lock.

    Example:
        >>> from functional_ws import initial_state
        >>> describe_state(initial_state(num_ubatches=2))
        "2 ubatches x 1 lane, alignment 256, growth 'slot', unlocked"
    """
    return (
        f"{counted(state.num_ubatches, 'ubatch')} x {counted(state.num_lanes, 'lane')}, "
        f"alignment {state.alignment}, growth {state.growth!r}, "
        f"{'LOCKED' if state.locked else 'unlocked'}"
    )


def render(state: WorkspaceState, *, title: str = "WorkspaceState") -> str:
    """A few lines per slot: capacity, high-water mark, growths, retained span, keys.

    Args:
        state: the state to describe.
        title: the first word of the header (a manager passes its own name and device).

    Returns:
        Text, one header line and three lines per slot.

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
    check_state(state, "render")
    lines = [f"{title}: {describe_state(state)}"]
    for slot, s in zip(state.all_slots(), state.slots, strict=True):
        lines.append(
            f"  slot {slot}: capacity {format_bytes(s.capacity)}, high water "
            f"{format_bytes(s.high_water)}, {counted(s.growths, 'growth')}"
        )
        if s.retained is None:
            lines.append("    retained: none")
        else:
            key, start = s.retained
            lines.append(f"    retained: {key_text(key)} at offset {exact_bytes(start)}")
        keys = ", ".join(sorted(map(key_text, s.persistent_keys))) or "none"
        lines.append(f"    persistent keys: {keys}")
    return "\n".join(lines)


def check_state(state: object, who: str) -> None:
    """Refuse what is not a :class:`~functional_ws.WorkspaceState`, naming what to pass."""
    if not isinstance(state, WorkspaceState):
        raise TypeError(
            f"{who} draws a WorkspaceState, got {type(state).__name__}. For a manager, call "
            f"ws.plot() (or display the manager itself), or pass ws.state, ws.last_layouts, "
            f"ws.last_spans."
        )
