"""Carving (``interop/_workspace/_carving.py``): typed views at byte offsets of a slot's buffer, and
memoised views that behave like the original's freshly built ones, for every use it allows.

The original built each view on every call (slice, ``view(dtype)``, ``reshape``); the façade
carves it once and returns ``carved.view(dtype)`` per call, or, for a request seen for the
first time (two views, or one alone), carves it and returns the same fresh kind of view.
Each use below runs on a fresh setup in both, under every combination of grad mode, no-grad
and inference mode for: the allocation, the carving, the call, and the use. Where the
original's use succeeds, ours must give the same outcome; the differences allowed are
listed, with their reasons, in ``KNOWN_DIFFERENCES``: introspection of autograd's view
bookkeeping, and version counters of a buffer allocated in inference mode. Where the
original refuses a use, ours may refuse it too or allow it.
"""

import contextlib
import itertools

import pytest
import torch
from conftest import TEST_DEVICE as DEVICE
from support.allocators import workspace
from support.helpers import manager
from support.seams import memo_of, slot_buffer

from interop._workspace._carving import Carver, contiguous_strides, fresh, view_maker

F32, BF16, I8, U8 = torch.float32, torch.bfloat16, torch.int8, torch.uint8
SPEC = ((4, 4), torch.float32)
OFFSET = 256  # the view under test is the second one: ((8,), uint8) comes first
MODES = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference": torch.inference_mode,
}
#: use -> the mode combinations (alloc, carve, call, use) where ours may differ, and why.
KNOWN_DIFFERENCES = {
    # Introspection: the original's result is a view of a throwaway 1-D tensor, ours is its
    # own base; so an in-place op under autograd leaves another grad_fn (same gradients).
    "is_view": lambda alloc, carve, call, use: True,
    "grad_fn after copy": lambda alloc, carve, call, use: True,
    # A buffer allocated in inference mode is an inference tensor. The original's views of
    # it made outside inference mode each start a new version counter, so an in-place
    # write through one call's view is invisible to autograd's checks on the next call's
    # view; ours share one counter, as views of any other buffer do (stricter, not looser).
    # A view handed out in inference mode is an inference tensor in both (no counter: see
    # test_a_view_handed_out_in_inference_mode_is_an_inference_tensor_as_the_originals).
    "version": lambda alloc, carve, call, use: alloc == "inference" and call != "inference",
}
#: allocator -> uses where ours may differ in every mode combination, and why.
ALLOCATOR_DIFFERENCES = {
    # A JAX-owned buffer reaches torch through DLPack, whose storage is not resizable: torch
    # refuses resize_ beyond it, where the original reallocated the whole buffer's storage
    # under the manager (a refusal is the safer outcome).
    "jax": {"resize_ larger"},
    # A callable's block is seen through a storage of the manager's own (DLPack, so that a
    # pool's own references never read as views pinning it): not resizable either, where
    # the original would have reallocated the pool's memory under the pool.
    "callable": {"resize_ larger"},
}


class Original:
    """The original's way: a uint8 buffer, and a new slice-view-reshape on every call."""

    def __init__(self, alloc_mode):
        with alloc_mode():
            self.buffer = torch.zeros(1024, dtype=torch.uint8, device=DEVICE)

    def carve(self):
        pass

    def view(self):
        nbytes = 64
        return self.buffer[OFFSET : OFFSET + nbytes].view(SPEC[1]).reshape(SPEC[0])


class Ours:
    """The façade: allocated in one mode, the view carved and memoised in another."""

    def __init__(self, alloc_mode):
        self.ws = workspace(DEVICE)
        with alloc_mode():
            self.ws.reserve(((1024,), torch.uint8))
            slot_buffer(self.ws, (0, 0)).zero_()  # the original's buffer above is zeros too

    def carve(self):
        self.ws.get_simultaneous(((8,), torch.uint8), SPEC)

    def view(self):
        return self.ws.get_simultaneous(((8,), torch.uint8), SPEC)[1]


class OursFirstSight(Ours):
    """The façade's miss path: every call is a request never seen before (nothing memoised),
    its view of ``SPEC`` still at ``OFFSET``."""

    def __init__(self, alloc_mode):
        super().__init__(alloc_mode)
        self.calls = 0

    def view(self):
        self.calls += 1  # ((9,), uint8), ((10,), uint8), ...: each first view ends below 256
        return self.ws.get_simultaneous(((8 + self.calls,), torch.uint8), SPEC)[1]


class OursShortWay(Ours):
    """The façade's miss path for a single view: the slot forgets what it saw before each
    call, so the request is never memoised (its view lies at the buffer's start)."""

    def view(self):
        memo_of(self.ws).seen.clear()
        return self.ws.get_simultaneous(SPEC)[0]


def _attempt(fn):
    try:
        result = fn()
    except RuntimeError as err:
        return f"refused: {str(err)[:48]}"
    return "ok" if result is None or isinstance(result, torch.Tensor) else result


def _copy_with_grad(v):
    x = torch.ones(4, 4, device=DEVICE, requires_grad=True)
    v.copy_(x * 2)
    (v * 3).sum().backward()
    return x.grad.sum().item()


USES = {
    "flags": lambda s, v: (v.is_leaf, v.requires_grad, v.is_inference(), v.is_contiguous()),
    "is_view": lambda s, v: v._is_view(),
    "add_": lambda s, v: (v.add_(1), s.view().sum().item())[1],
    "version": lambda s, v: -v._version + (v.add_(1), s.view()._version)[1],
    "copy with grad": lambda s, v: _copy_with_grad(v),
    "grad_fn after copy": lambda s, v: (
        v.copy_(torch.ones(4, 4, device=DEVICE, requires_grad=True)),
        type(v.grad_fn).__name__,
    )[1],
    "next call after copy": lambda s, v: (
        v.copy_(torch.ones(4, 4, device=DEVICE, requires_grad=True)),
        s.view().requires_grad,
    )[1],
    "requires_grad_": lambda s, v: (v.requires_grad_(), s.view().requires_grad, v.is_leaf)[1:],
    "resize_ smaller": lambda s, v: (v.resize_(2), tuple(v.shape), tuple(s.view().shape))[1:],
    "resize_ larger": lambda s, v: (
        v.resize_(100000),
        v.untyped_storage().data_ptr() == s.view().untyped_storage().data_ptr(),
    )[1],
    "set_": lambda s, v: (
        v.set_(torch.zeros(3, device=DEVICE)),
        tuple(v.shape),
        tuple(s.view().shape),
    )[1:],
    "detach write": lambda s, v: (v.detach().fill_(5), s.view()[0, 0].item())[1],
}


def _outcome(kind, alloc, carve, call, use, name):
    system = kind(MODES[alloc])
    with MODES[carve]():
        system.carve()
    with MODES[call]():
        view = system.view()
    with MODES[use]():
        return _attempt(lambda: USES[name](system, view))


COMBINATIONS = list(itertools.product(MODES, repeat=4))


@pytest.mark.parametrize(
    "kind", [Ours, OursFirstSight, OursShortWay], ids=["memoised", "first sight", "one view"]
)
@pytest.mark.parametrize("name", sorted(USES))
def test_every_use_the_original_allows_behaves_the_same(name, kind, allocator):
    differences = []
    for alloc, carve, call, use in COMBINATIONS:
        original = _outcome(Original, alloc, carve, call, use, name)
        ours = _outcome(kind, alloc, carve, call, use, name)
        if str(original).startswith("refused") or original == ours:
            continue
        differences.append(((alloc, carve, call, use), original, ours))
    allowed = KNOWN_DIFFERENCES.get(name, lambda *modes: False)
    if name in ALLOCATOR_DIFFERENCES.get(allocator, ()):
        allowed = lambda *modes: True  # noqa: E731
    assert not [d for d in differences if not allowed(*d[0])], differences[:3]
    if name in KNOWN_DIFFERENCES or name in ALLOCATOR_DIFFERENCES.get(allocator, ()):
        assert differences, f"{name} no longer differs: drop it from KNOWN_DIFFERENCES"


@pytest.mark.usefixtures("allocator")  # every allocator's buffers, the same uses
def test_known_differences_are_introspection_only():
    # The original's result is a view of a throwaway 1-D tensor; ours is its own base. Both
    # hold no reference to any other call's tensors, and gradients flow the same way.
    alloc = carve = call = use = "grad"
    assert _outcome(Original, alloc, carve, call, use, "is_view") is True
    assert _outcome(Ours, alloc, carve, call, use, "is_view") is False
    assert _outcome(Original, alloc, carve, call, use, "grad_fn after copy") == (
        "AsStridedBackward0"
    )
    assert _outcome(Ours, alloc, carve, call, use, "grad_fn after copy") == "CopyBackwards"
    assert _outcome(Ours, alloc, carve, call, use, "copy with grad") == 96.0


# ----- through the façade (every allocator) -----


@pytest.mark.usefixtures("allocator")
@pytest.mark.parametrize(
    "dtype", [torch.bool, U8, I8, torch.float16, BF16, torch.int32, F32, torch.int64,
              torch.float64, torch.complex128],
    ids=str,
)  # fmt: skip
def test_every_dtype_gets_an_aligned_view_of_the_right_bytes(dtype):
    ws = manager()
    first, view = ws.get_simultaneous(((3,), U8), ((7, 3), dtype))
    assert view.data_ptr() % 256 == 0 and view.data_ptr() - first.data_ptr() == 256
    assert view.is_contiguous() and view.shape == (7, 3) and view.dtype == dtype


@pytest.mark.usefixtures("allocator")
def test_zero_size_and_zero_dim_views():
    ws = manager()
    assert ws.get_simultaneous() == []
    (empty,) = ws.get_simultaneous(((0,), F32))  # no buffer yet: the original crashed here
    assert empty.numel() == 0 and empty.device.type == DEVICE.type
    scalar, nothing, matrix = ws.get_simultaneous(((), F32), ((4, 0), I8), ((2, 2), F32))
    assert scalar.shape == () and nothing.shape == (4, 0) and matrix.shape == (2, 2)
    scalar.fill_(3.5)
    assert ws.get_simultaneous(((), F32))[0].item() == 3.5
    assert scalar.data_ptr() % 256 == 0 and matrix.data_ptr() - scalar.data_ptr() == 256


# ----- a Carver and its helpers -----

CPU = torch.device("cpu")


def test_views_of_one_dtype_are_strided_over_one_alias_of_the_buffer():
    buffer = torch.arange(1024, dtype=torch.int32).view(torch.uint8)[:1024]
    carver = Carver(buffer, CPU)
    a, b, c = carver.carve((0, 256, 512), (((4,), F32), ((2, 3), F32), ((8,), U8)))
    assert a._base is b._base and a._base.dtype == F32  # one alias per dtype
    assert [v.data_ptr() - buffer.data_ptr() for v in (a, b, c)] == [0, 256, 512]
    assert (b.shape, b.stride(), c.dtype) == ((2, 3), (3, 1), U8)
    assert torch.equal(b.view(torch.int32).flatten(), torch.arange(64, 70, dtype=torch.int32))
    (again,) = carver.carve((256,), (((2, 3), F32),))  # the single-view path
    assert again._base is a._base and again.data_ptr() == b.data_ptr()


def test_a_buffer_no_alias_fits_is_sliced_as_the_original_does():
    block = torch.zeros(1030, dtype=U8)
    buffer = block[2:1026]  # a block two bytes into its storage: no float32 alias
    buffer[2:6] = torch.tensor([0, 0, 128, 63], dtype=U8)  # 1.0 as float32, little-endian
    carver = Carver(buffer, CPU)
    (view,) = carver.carve((2,), (((1,), F32),))
    assert view.data_ptr() == buffer.data_ptr() + 2 and view.tolist() == [1.0]
    (byte,) = carver.carve((5,), (((1,), U8),))  # uint8 still aliases
    assert byte.tolist() == [63] and carver._aliases[U8][0] is buffer
    assert carver._aliases[F32] is None  # asked once, remembered


def test_a_slot_without_a_buffer_serves_empty_views_on_its_device():
    views = Carver(None, CPU).carve((0, 0), (((0,), F32), ((3, 0), torch.int64)))
    assert [(v.shape, v.dtype, v.device) for v in views] == [
        ((0,), F32, CPU),
        ((3, 0), torch.int64, CPU),
    ]


def test_a_sliced_view_counts_from_the_buffers_start_in_its_block():
    """Where no typed alias can be made (the block starts at an odd byte of its storage),
    a view is sliced from the block: at its offset from the buffer's start, not the
    block's."""
    block = torch.zeros(1100, dtype=U8)[2:]
    (view,) = Carver(block, CPU, start=254).carve((4,), (((1,), F32),))
    assert view.data_ptr() == block.data_ptr() + 254 + 4 and view.dtype == F32


def test_views_carved_in_inference_mode_are_not_inference_tensors():
    carver = Carver(torch.zeros(512, dtype=U8), CPU)
    with torch.inference_mode():
        a, b = carver.carve((0, 256), (((4,), F32), ((4,), F32)))
        (c,) = carver.carve((0,), (((4,), F32),))
    assert not (a.is_inference() or b.is_inference() or c.is_inference())


@pytest.mark.parametrize(
    "shape", [(), (5,), (0,), (2, 3), (3, 0), (0, 4), (2, 3, 4), (5, 0, 2), (1, 1, 1, 7)], ids=str
)
def test_contiguous_strides_are_torchs(shape):
    assert contiguous_strides(shape) == torch.empty(shape).stride()
    # and a single view's, which Carver.carve works out inline for one and two dims
    (view,) = Carver(torch.zeros(512, dtype=U8), CPU).carve((0,), ((shape, F32),))
    assert view.stride() == torch.empty(shape).stride() and view.shape == shape


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_fresh_views_are_new_leaves_over_the_same_bytes(count):
    base = torch.zeros(64, dtype=U8)
    carved = [base[16 * i : 16 * i + 16].view(F32) for i in range(count)]
    views = fresh(carved, [((4,), F32)] * count)
    assert [(v.data_ptr(), v.shape, v.dtype) for v in views] == [
        (c.data_ptr(), c.shape, c.dtype) for c in carved
    ]
    assert all(v is not c and v._base is None for v, c in zip(views, carved, strict=True))
    views[-1].resize_(1)  # its own tensor: nothing reaches the carved view
    views[0].requires_grad_()  # a leaf of its own
    assert not carved[0].requires_grad and carved[-1].shape == (4,)


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_a_view_maker_makes_fresh_views_each_call(count):
    base = torch.zeros(64, dtype=U8)
    dtypes = [F32, torch.int16, U8, torch.int32][:count]
    carved = [base[16 * i : 16 * i + 16].view(d) for i, d in enumerate(dtypes)]
    make = view_maker(carved, [((16 // d.itemsize,), d) for d in dtypes])
    first, second = make(), make()
    assert [v.dtype for v in first] == dtypes and len(second) == count
    assert [v.data_ptr() for v in first] == [c.data_ptr() for c in carved]
    assert all(a is not b for a, b in zip(first, second, strict=True))


def test_a_view_handed_out_in_inference_mode_is_an_inference_tensor_as_the_originals():
    """The views the manager keeps are carved outside inference mode, but the one a call
    hands out is made in the caller's mode: an inference tensor there, as the original's
    (README: a write through it is unseen by autograd's version check)."""
    from interop.testing import ReferenceWorkspaceManager

    ours, theirs = manager(), ReferenceWorkspaceManager(DEVICE)
    for ws in (ours, theirs):
        ws.get_simultaneous(((64,), torch.float32))
    with torch.inference_mode():
        for _ in range(2):  # a first sighting, then memoised
            (mine,) = ours.get_simultaneous(((16,), torch.float32))
            (original,) = theirs.get_simultaneous(((16,), torch.float32))
            assert mine.is_inference() and original.is_inference()
    (outside,) = ours.get_simultaneous(((16,), torch.float32))
    assert not outside.is_inference()
