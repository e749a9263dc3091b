"""The pure-core warm-up shown by ``make demo``: plans only, no memory is touched."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import WorkspaceLockedError
from ._ops import acquire, initial_state, lock, reserve, retain
from ._render import format_bytes


def core_demo(print_: object = print) -> None:
    """Print a warm-up through the pure core: acquire, retain, reserve, lock, refused growth."""
    out = print_ if callable(print_) else print
    f16 = np.dtype("float16")
    i32, u8 = np.dtype("int32"), np.dtype("uint8")
    state = initial_state(num_ubatches=2)
    out("== functional_ws: the pure core plans, the shell (interop) executes ==")
    steps: list[tuple[str, tuple[int, int], list[tuple[tuple[int, ...], np.dtype[Any]]]]] = [
        ("moe scratch", (0, 0), [((256, 1024), f16), ((256, 8), i32)]),
        ("attention scratch", (0, 0), [((64, 4096), f16)]),
        ("moe scratch (ubatch 1)", (1, 0), [((256, 1024), f16), ((256, 8), i32)]),
    ]
    for name, slot, specs in steps:
        state, layout = acquire(state, slot, *specs)
        grew = f", grow slot {slot} to {format_bytes(layout.grow_to)}" if layout.grow_to else ""
        out(f"acquire {name:<24} slot {slot}: offsets {layout.offsets}{grew}")
    for attempt in range(2):
        state, span, intact = retain(state, (0, 0), "sampler", ((4096,), u8))
        out(f"retain 'sampler' (try {attempt + 1}): offset {span.offset}, intact={intact}")
    state, _ = acquire(state, (0, 0), ((64, 4096), f16))
    state, span, intact = retain(state, (0, 0), "sampler", ((4096,), u8))
    out(f"after a request that fits below it: intact={intact}")
    state = reserve(state, [[((512, 1024), f16), ((512, 8), i32)]])
    out("reserve the worst case (512 tokens) in every slot, then lock")
    state = lock(state)
    out(str(state))
    try:
        acquire(state, (1, 0), ((1024, 1024), f16))
    except WorkspaceLockedError as err:
        out(f"refused while locked ({type(err).__name__}, an AssertionError):\n  {err}")
