"""The request boundary (``interop/_workspace/_requests.py``): every spelling upstream accepts
is served as its canonical form (and memoised as it), every other one refused before anything
changes.
"""

import numpy as np
import pytest
import torch
from support.seams import memo_of

from interop import InvalidSpecError, WorkspaceManager
from interop._workspace._requests import canonical, canonical_shape, plain_nbytes

F32, U8 = torch.float32, torch.uint8

#: Spellings of the request ``((3, 4), float32)`` (upstream's slice-view-reshape takes each).
SPELLINGS = {
    "tuple": ((3, 4), F32),
    "list-shape": ([3, 4], F32),
    "torch-size": (torch.Size([3, 4]), F32),
    "numpy-ints": ((np.int64(3), np.int32(4)), F32),
    "list-pair": [(3, 4), F32],
    "numpy-0d": ((np.array(3), 4), F32),
}


def _fresh():
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((4096,), U8))
    return ws


def _offset(ws, view):
    return view.data_ptr() - ws._current_workspaces[0].data_ptr()


@pytest.mark.parametrize("name", SPELLINGS)
def test_every_spelling_gets_the_tuples_views(name):
    ws, tuple_ws = _fresh(), _fresh()
    for _ in range(3):  # a miss, the second sight (memoised), a hit
        (view,) = ws.get_simultaneous(SPELLINGS[name], ((2,), U8))[:1]
        (expected,) = tuple_ws.get_simultaneous(SPELLINGS["tuple"], ((2,), U8))[:1]
        assert (view.shape, view.dtype, _offset(ws, view)) == (
            expected.shape,
            expected.dtype,
            _offset(tuple_ws, expected),
        )
    assert ws.state == tuple_ws.state


@pytest.mark.parametrize("name", SPELLINGS)
def test_a_spelling_is_memoised_as_its_canonical_request(name):
    ws = _fresh()
    for _ in range(3):
        ws.get_simultaneous(SPELLINGS[name])
    memo = memo_of(ws)
    assert memo.entries() == 1 and (SPELLINGS["tuple"],) in memo  # one canonical key
    ws.get_simultaneous(SPELLINGS["tuple"])
    assert memo.entries() == 1  # the tuple spelling hits the same entry


@pytest.mark.parametrize("shape", [[3, 4], torch.Size([3, 4]), (np.int64(3), 4)])
def test_retained_persistent_and_reserve_take_the_spellings_too(shape):
    ws = _fresh()
    view, intact = ws.get_retained("kv", shape, F32)
    again, intact = ws.get_retained("kv", (3, 4), F32)
    assert view.shape == (3, 4) and intact and again.data_ptr() == view.data_ptr()
    tensor = ws.get_persistent("p", shape, F32)
    assert tensor.shape == (3, 4) and ws.get_persistent("p", (3, 4), F32) is tensor
    ws.reserve((shape, F32), slots="all")
    ws.reserve_many([[(shape, F32)]])
    ws.lock()
    assert ws.get_simultaneous((shape, F32))[0].shape == (3, 4)


@pytest.mark.parametrize(
    ("dim", "served"),
    [
        (1, True),
        (np.int64(1), True),
        (np.uint8(1), True),
        (True, False),
        (np.bool_(True), False),
        (1.0, False),
        (torch.tensor(1), False),
    ],
    ids=["int", "numpy-int64", "numpy-uint8", "bool", "numpy-bool", "float", "tensor"],
)
def test_a_dim_equal_to_a_memoised_one_is_served_only_if_it_is_an_integer(dim, served):
    """The hot path serves a memoised request to a dim equal to its own only where the slow
    path would accept it: one rule, checked at both."""
    ws = _fresh()
    for _ in range(2):
        ws.get_simultaneous(((1,), F32))  # memoised
        ws.get_retained("kv", (1,), F32)
    before = ws.state
    if served:
        assert ws.get_simultaneous(((dim,), F32))[0].shape == (1,)
        assert ws.get_retained("kv", (dim,), F32)[0].shape == (1,)
        return
    with pytest.raises(InvalidSpecError):
        ws.get_simultaneous(((dim,), F32))
    with pytest.raises(InvalidSpecError):
        ws.get_retained("kv", (dim,), F32)
    assert ws.state is before  # refused: nothing changed


def test_a_tensor_dim_is_refused_naming_the_fix():
    ws = _fresh()
    before = ws.state
    with pytest.raises(
        InvalidSpecError, match=r"shapes_and_dtypes\[1\] shape\[0\] must be an int.*int\(t\)"
    ):
        ws.get_simultaneous(((4,), F32), ((torch.tensor(4), 2), F32))
    with pytest.raises(InvalidSpecError, match=r"shapes_and_dtypes\[0\] shape\[1\]"):
        ws.reserve(((4, torch.tensor(2)), F32))
    assert ws.state is before


def test_canonical_returns_what_needs_no_conversion_unchanged():
    plain = (((2, 3), F32),)
    assert canonical(plain) is plain
    odd = (((True,), F32),)  # left for the core to refuse, not converted
    assert canonical(odd) is odd
    shape = (1.5, 2)
    assert canonical_shape(shape) is shape
    assert canonical(([[2, 3], F32],)) == plain and plain_nbytes(plain) == [24]


@pytest.mark.parametrize("ubatch", [np.int64(1), np.int32(1), np.uint8(1)])
def test_a_reservations_slots_take_numpy_ints_as_use_workspace_ubatch_does(ubatch):
    """A slot index read from a NumPy array: ``reserve(slots=...)`` reserves that slot as
    ``use_workspace_ubatch`` selects it, where it was refused as not an int."""
    ws = WorkspaceManager("cpu", num_ubatches=2)
    ws.reserve(((1000,), U8), slots=[(ubatch, np.int64(0))])
    plain = WorkspaceManager("cpu", num_ubatches=2)
    plain.reserve(((1000,), U8), slots=[(1, 0)])
    assert ws.state == plain.state
    assert all(type(i) is int for s in ws.state.slots for i in (s.capacity,))
