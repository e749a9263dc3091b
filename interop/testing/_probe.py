"""The absolute-alignment probe: many fresh buffers, so that luck cannot pass for a guarantee.

A manager that aligns views only relative to its buffer (the original) hands out 256-aligned
addresses whenever the allocator happens to return a 256-aligned buffer: on torch's CPU
allocator (64-byte alignment) about one buffer in four. One view says little, and a failure
that depends on the heap would not replay while Hypothesis shrinks. So the probe makes
:data:`PROBE_BUFFERS` fresh managers, each grown once by a different request, and keeps them
all alive until it is done, so that no address is reused: a manager that keeps only relative
alignment passes it only if every one of those buffers lands on a multiple of 256.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from ._config import ALIGNMENT, ManagerFactory, Spec, format_spec
from ._memory import nbytes_of

#: Fresh managers (one buffer each) per probe.
PROBE_BUFFERS = 16


def _requests() -> list[tuple[str, tuple[Spec, ...]]]:
    """One request per fresh manager: sizes and view counts vary, every fourth a retained span."""
    out: list[tuple[str, tuple[Spec, ...]]] = []
    for k in range(PROBE_BUFFERS):
        if k % 4 == 3:
            out.append(("get_retained", (((1 + 61 * k,), torch.int8),)))
        elif k % 2:
            out.append(("get_simultaneous", (((1 + 97 * k,), torch.uint8), ((3,), torch.float32))))
        else:
            out.append(("get_simultaneous", (((1 + 97 * k,), torch.float16),)))
    return out


def misaligned_view(
    factory: ManagerFactory,
    num_ubatches: int,
    num_lanes: int,
    select: Callable[[tuple[int, int]], AbstractContextManager[Any]],
    log: Callable[[str], object] | None = None,
    alignment: int = ALIGNMENT,
) -> str | None:
    """Grow fresh managers once each; describe the first view not ``alignment``-aligned, or
    ``None``.

    Args:
        factory: makes a fresh manager from ``(num_ubatches, num_lanes)``.
        num_ubatches: passed to ``factory``.
        num_lanes: passed to ``factory``.
        select: enters a slot; the probe works in slot ``(0, 0)``.
        log: called with one line per call made (the machine passes Hypothesis's ``note``).
        alignment: the byte alignment the manager promises its views.

    Returns:
        ``None`` when every view's ``data_ptr()`` is a multiple of ``alignment``, else a
        sentence naming the call, the view and its address modulo ``alignment``.
    """
    managers = []  # kept alive to the end: no buffer's address can be reused by the next
    for number, (method, specs) in enumerate(_requests()):
        manager = factory(num_ubatches, num_lanes)
        managers.append(manager)
        if manager.is_locked():  # a factory may hand over managers locked: the probe grows
            manager.unlock()
        with select((0, 0)):
            if method == "get_retained":
                ((shape, dtype),) = specs
                views = [manager.get_retained("probe", shape, dtype)[0]]
                call = f"get_retained('probe', {shape!r}, {dtype})"
            else:
                views = manager.get_simultaneous(*specs)
                call = f"get_simultaneous({', '.join(format_spec(s) for s in specs)})"
        residues = [view.data_ptr() % alignment for view in views if nbytes_of(view)]
        if log is not None:
            log(f"  fresh manager {number + 1}: {call} -> data_ptr() % {alignment} == {residues}")
        for i, view in enumerate(views):
            residue = view.data_ptr() % alignment
            if nbytes_of(view) and residue:
                return (
                    f"absolute alignment: {call} on fresh manager {number + 1} of "
                    f"{PROBE_BUFFERS} returned view {i} at data_ptr() % {alignment} == "
                    f"{residue}; every view must start at a multiple of {alignment} in memory, "
                    "not only relative to its buffer"
                )
    return None
