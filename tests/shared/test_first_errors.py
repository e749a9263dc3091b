"""The first errors a user meets: the traceback starts with the mistake, the message says
what to do, and the class prints with its public path (issue: installs, runs and reads like a
finished library, "The first errors a user meets")."""

import importlib

import numpy as np
import pytest
import torch
from support.helpers import memoised_manager

import functional_ws as fws
import interop
from interop import use_workspace_lane, use_workspace_ubatch

U8, F32 = torch.uint8, torch.float32


def _in_lane(lane, call):
    def run(ws):
        with use_workspace_lane(lane):
            return call(ws)

    return run


def _in_ubatch(ubatch, call):
    def run(ws):
        with use_workspace_ubatch(ubatch):
            return call(ws)

    return run


CALLS = [
    ("dtype-string", lambda ws: ws.get_simultaneous(((4,), "float32")), ["torch.float32"]),
    ("dtype-numpy", lambda ws: ws.get_simultaneous(((4,), np.float32)), ["torch.float32"]),
    ("bool-dim", lambda ws: ws.get_simultaneous(((True,), F32)), ["True"]),
    ("float-dim", lambda ws: ws.get_simultaneous(((4.0,), F32)), ["4.0"]),
    ("tensor-dim", lambda ws: ws.get_simultaneous(((torch.tensor(4),), F32)), ["int(t)"]),
    ("not-a-pair", lambda ws: ws.get_simultaneous((4, F32, 1)), ["shapes_and_dtypes[0]"]),
    ("lane", _in_lane(3, lambda ws: ws.get_simultaneous(((4,), F32))), ["num_lanes=4"]),
    ("ubatch", _in_ubatch(2, lambda ws: ws.get_simultaneous(((4,), F32))), ["num_ubatches=3"]),
    ("retained-dtype", lambda ws: ws.get_retained("kv", (4,), "float32"), ["torch.float32"]),
    ("retained-bool-dim", lambda ws: ws.get_retained("kv", (True,), F32), ["True"]),
    ("retained-lane", _in_lane(2, lambda ws: ws.get_retained("kv", (4,), F32)), ["num_lanes="]),
    ("persistent-dtype", lambda ws: ws.get_persistent("w", (4,), "float32"), ["torch.float32"]),
    ("reserve-bare-shape", lambda ws: ws.reserve((4, 4), U8), ["Pass pairs"]),
    ("locked", lambda ws: (ws.lock(), ws.get_simultaneous(((10**6,), U8))), ["reserve("]),
]


@pytest.mark.parametrize("call, fragments", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_the_traceback_starts_with_the_mistake(call, fragments):
    ws = memoised_manager()
    with pytest.raises(fws.WorkspaceError) as info:
        call(ws)
    err = info.value
    # Nothing of ours printed before it: no "During handling of the above exception".
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__, repr(err.__context__)
    assert all(f in str(err) for f in fragments), str(err)
    assert type(err).__module__ in ("functional_ws", "interop"), type(err).__module__


def test_errors_print_with_their_public_path():
    for package in (fws, interop):
        for name in package.__all__:
            value = getattr(package, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert value.__module__ in ("functional_ws", "interop", "interop.errors"), name
                home = importlib.import_module(value.__module__)
                assert getattr(home, value.__name__) is value, name
