"""How a manager presents itself: its one-line repr, its HTML picture and its figure.

Functions of explicit inputs (the state, the last layout and span per slot, the device and
the allocator's name): the manager's ``__repr__``, ``_repr_html_`` and ``plot`` call them
with its own. The pictures are the core's (:mod:`functional_ws.display`), titled as the
manager, with its device and allocator in the header and its lock in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import functional_ws as fws
from functional_ws import Slot, WorkspaceState
from functional_ws.display import counted, format_bytes


def manager_title(device: object) -> str:
    """What a manager's pictures are called: ``WorkspaceManager on cpu``.

    Example:
        >>> manager_title("cuda:0")
        'WorkspaceManager on cuda:0'
    """
    return f"WorkspaceManager on {device}"


def manager_repr(state: WorkspaceState, device: object, allocator: str) -> str:
    """A manager in one line: device, slots, bytes held, lock (and a non-default allocator).

    Example:
        >>> from functional_ws import initial_state
        >>> manager_repr(initial_state(num_ubatches=2), "cpu", "torch")
        'WorkspaceManager(device=cpu, 2 ubatches x 1 lane, 0 B, unlocked)'
    """
    extra = "" if allocator == "torch" else f", allocator {allocator}"
    held = format_bytes(sum(s.capacity for s in state.slots))
    return (
        f"WorkspaceManager(device={device}, {counted(state.num_ubatches, 'ubatch')} x "
        f"{counted(state.num_lanes, 'lane')}, {held}, "
        f"{'locked' if state.locked else 'unlocked'}{extra})"
    )


def manager_html(
    state: WorkspaceState,
    layouts: Mapping[Slot, fws.Layout],
    spans: Mapping[Slot, fws.Span],
    device: object,
    allocator: str,
) -> str:
    """A manager's HTML picture: :func:`functional_ws.render_html` of its state, last
    layouts and spans, titled as the manager on its device.

    Example:
        >>> from functional_ws import initial_state
        >>> html = manager_html(initial_state(), {}, {}, "cpu", "torch")
        >>> "<b>WorkspaceManager on cpu</b>" in html and "allocator torch" in html
        True
    """
    return fws.render_html(
        state, layouts, spans, title=manager_title(device), details=(f"allocator {allocator}",)
    )


def manager_plot(
    state: WorkspaceState,
    layouts: Mapping[Slot, fws.Layout],
    spans: Mapping[Slot, fws.Span],
    device: object,
    allocator: str,
    ax: Any = None,
) -> Any:
    """A manager's figure: :func:`functional_ws.plot`, titled as the manager on its device.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'functional-ws[plot]'``).
    """
    return fws.plot(
        state,
        layouts,
        spans,
        ax=ax,
        title=manager_title(device),
        details=(f"allocator {allocator}",),
    )
