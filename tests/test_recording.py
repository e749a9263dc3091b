"""Recording (``_recording.py``): wrappers only while a recording is on, and no cycles."""

import gc
import weakref

import torch

from interop import WorkspaceManager


def _freed_on_del(make) -> bool:
    gc.disable()
    try:
        ws = make()
        ref = weakref.ref(ws)
        del ws
        return ref() is None
    finally:
        gc.enable()


def test_a_dropped_manager_is_freed_at_once_before_and_after_a_recording():
    def used():
        ws = WorkspaceManager("cpu")
        for _ in range(2):  # the second sight memoises
            ws.get_simultaneous(((1000,), torch.uint8))
            ws.get_retained("kv", (16,), torch.uint8)
        return ws

    def recorded():
        ws = used()
        with ws.recording():
            ws.get_simultaneous(((10,), torch.uint8))
        return ws

    assert _freed_on_del(used)  # nothing holds the manager but its caller
    assert _freed_on_del(recorded)  # the recording's wrappers are gone with it
