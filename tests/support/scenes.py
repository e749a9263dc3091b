"""States and managers to draw, shared by the display tests (the browser's among them).

Built for the displays' hard cases, not for the demo: many slots, tiny views beside huge
ones, zero-sized views, slots that never grew, a locked manager, retained spans intact and
clobbered, persistent keys, long keys, and dtypes with and without colours of their own.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

import functional_ws as fws
from interop import WorkspaceManager, use_workspace_lane, use_workspace_ubatch

F16, I32, U8 = np.dtype("float16"), np.dtype("int32"), np.dtype("uint8")
LONG_KEY = "a-persistent-resource-key-that-is-much-longer-than-any-bar-label-" * 3


def core_scene() -> tuple[fws.WorkspaceState, fws.Layout, fws.Span]:
    """Two ubatch slots: in slot (0, 0) two views with padding, free space and an intact
    tail of 300 bytes; slot (1, 0) never grew."""
    s = fws.initial_state(num_ubatches=2)
    s, layout = fws.acquire(s, (0, 0), ((100,), F16), ((3,), I32))  # 200 B + pad, 12 B + pad
    s, _ = fws.reserve(s, [((2048,), U8)], slots=[(0, 0)])
    s, span, _ = fws.retain(s, (0, 0), "kv", ((300,), U8))
    return s, layout, span


def manager_scene() -> WorkspaceManager:
    """:func:`core_scene` made by a CPU manager's calls: two ubatch slots, in slot (0, 0)
    a ``float16[100]`` and an ``int32[3]`` view, 2 KiB reserved and an intact 300-byte
    ``"kv"`` tail; slot (1, 0) never grew."""
    ws = WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((100,), torch.float16), ((3,), torch.int32))
    ws.reserve(((2048,), torch.uint8))
    ws.get_retained("kv", (300,), torch.uint8)
    return ws


def tiny_beside_huge() -> WorkspaceManager:
    """One 2 MiB view and five small ones in one slot: five of six were invisible once."""
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(
        ((2**19,), torch.float32), *[((k,), torch.int32) for k in (1, 7, 16, 3, 64)]
    )
    return ws


DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int8, torch.uint8,
          torch.int64, torch.float64, torch.bool, torch.complex64, torch.float8_e4m3fn,
          torch.int16]  # fmt: skip


def every_dtype() -> WorkspaceManager:
    """One slot: a view of every common dtype (and some without colours of their own) and
    a zero-sized one, in a bar long enough to show each (in :func:`many_slots` the same
    views share a bar under a pixel long, to scale beside a 2 MiB slot)."""
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(*[((3, 5), d) for d in DTYPES], ((0,), torch.float32))
    return ws


def many_slots() -> WorkspaceManager:
    """4 ubatches x 3 lanes, locked: views of every common dtype (and some without colours of
    their own), zero-sized views, forty tiny views beside a huge one, slots that never grew,
    retained spans intact and clobbered, persistent keys, long keys."""
    ws = WorkspaceManager("cpu", num_ubatches=4, num_lanes=3)
    with use_workspace_ubatch(0):
        ws.get_simultaneous(*[((3, 5), d) for d in DTYPES], ((0,), torch.float32))
        ws.get_retained("sampler", (64,), torch.float32)
    with use_workspace_ubatch(1):
        ws.get_simultaneous(((1 << 21,), torch.uint8), ((4096,), torch.bfloat16))
        ws.get_retained(LONG_KEY, (4096,), torch.uint8)
        ws.get_simultaneous(((1 << 21,), torch.uint8), *[((1,), torch.int8)] * 40)  # clobbers
    with use_workspace_ubatch(2), use_workspace_lane(1):
        ws.get_persistent(LONG_KEY, (8,), torch.float32)
        ws.get_persistent(("weights", 3), (2,), torch.int64)
        ws.get_retained(("kv", 0), (10,), torch.float16)
    with use_workspace_ubatch(3), use_workspace_lane(2):
        ws.get_simultaneous(((0,), torch.uint8), ((0, 4), torch.int32))
    ws.lock()
    return ws


def managers() -> dict[str, WorkspaceManager]:
    """Every manager above, by name, and one that never served a request."""
    return {
        "tiny beside huge": tiny_beside_huge(),
        "every dtype": every_dtype(),
        "many slots, locked": many_slots(),
        "never used": WorkspaceManager("cpu", num_ubatches=2),
    }


def recorded_history() -> tuple[WorkspaceManager, object]:
    """A manager and the :class:`interop.History` of a warm-up with growth in two slots,
    a retained span, a reservation, a lock and one refusal."""
    ws = WorkspaceManager("cpu", num_ubatches=2)
    with ws.recording() as history:
        for tokens in (16, 64, 32):
            for ubatch in (0, 1):
                with use_workspace_ubatch(ubatch):
                    ws.get_simultaneous(((tokens, 128), torch.bfloat16), ((tokens, 8), torch.int32))
                    ws.get_retained("sampler", (1000,), torch.float32)
        ws.reserve(((128, 128), torch.bfloat16), ((1000,), torch.float32))
        ws.lock()
        with contextlib.suppress(AssertionError):  # refused: it is locked
            ws.get_simultaneous(((1 << 20,), torch.uint8))
    return ws, history
