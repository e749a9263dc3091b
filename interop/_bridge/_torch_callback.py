"""The host side of ``torch_call``: what XLA runs when its computation reaches the call.

Two ways in, one body. Where jax has ``jax.experimental.buffer_callback`` and its buffers
export DLPack (:data:`BUFFERS_AVAILABLE`), XLA hands the callback its input and output
buffers: torch aliases the inputs, runs ``fn``, and writes each result into its output
buffer in place (no copy by JAX either way). Elsewhere ``jax.pure_callback`` hands over host
copies of the inputs and copies the returned arrays back. Either way, the body
(:func:`run_forward`, :func:`run_backward`) calls ``fn``, checks every result against what
was promised before it writes any output, and checks that ``fn`` left its inputs as they
were.

Failures: an exception inside the callback reaches the caller as JAX reports any callback
failure (a ``JaxRuntimeError`` whose message holds the whole traceback, ``fn``'s frames
included). Each failure is also kept here under a number printed in that message, so the
eager wrapper (``_torch_call.py``) can raise the original exception itself
(:func:`original_failure`).

Threads: the callback runs on the thread XLA runs it on: on CPU, the caller's where the
inputs are computed when the computation is called (the eager wrapper waits for them),
else a thread of XLA's own, where the workspace refuses to serve (:func:`_foreign_why`).
While it runs ``fn``, :func:`inside` is true on that thread, and ``jax_call`` and
``torch_call`` functions refuse to start a JAX computation from there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import re
import sys
import threading
import traceback
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from typing import Any, NoReturn, TypeVar

import jax
import numpy as np
import torch

from .. import _private
from .._context import SLOT, holds_only_slot, slot_unknown
from .._errors import (
    DroppedGradientWarning,
    InputResizedError,
    InputWrittenError,
    NestedCallError,
    NoGradientError,
    ResultDeviceError,
    ResultDtypeError,
    ResultLayoutError,
    ResultShapeError,
    ResultStructureError,
)
from .._locks import renew_after_fork
from . import _dlpack
from ._handoff import TORCH_DTYPES

R = TypeVar("R")

try:  # jax >= 0.6.1 (with a jaxlib whose buffers export DLPack)
    from jax.experimental.buffer_callback import Buffer as _Buffer
    from jax.experimental.buffer_callback import buffer_callback as _buffer_callback
except ImportError:  # pragma: no cover - depends on the installed jax
    _Buffer, _buffer_callback = None, None  # type: ignore[assignment]

#: Whether ``torch_call`` runs through ``buffer_callback`` (zero-copy) in this process.
BUFFERS_AVAILABLE = _buffer_callback is not None and hasattr(_Buffer, "__dlpack__")
#: Tests and benchmarks switch this off to run the ``pure_callback`` fallback.
use_buffers = BUFFERS_AVAILABLE

_to_capsule, _from_capsule = _private.torch_capsules()
_version = _private.version_counter
_CARRIERS = _dlpack.carriers(TORCH_DTYPES)
#: Each torch dtype's JAX (NumPy) dtype, for the host path; how ml_dtypes' types cross.
_HOST_DTYPES = {torch_dtype: dtype for dtype, torch_dtype in TORCH_DTYPES.items()}
_UINTS = {1: torch.uint8, 2: torch.uint16}
_STRIDED = torch.strided


@dataclasses.dataclass(frozen=True)
class Signature:
    """What one traced call promises: fixed at trace time, read by every run of it."""

    #: ``fn``'s name, for messages.
    name: str
    #: The structure of ``(args, kwargs)``, and each input leaf's path (``args[0]['w']``).
    in_tree: Any
    in_paths: tuple[str, ...]
    #: Each input's shape as traced (per element: ``jax.vmap`` may add leading axes).
    in_shapes: tuple[tuple[int, ...], ...]
    #: The structure of the results, each result's path, shape and torch dtype.
    out_tree: Any
    out_paths: tuple[str, ...]
    out_shapes: tuple[tuple[int, ...], ...]
    out_dtypes: tuple[torch.dtype, ...]
    #: Whether ``jax.vmap`` may add leading axes (a ``vmap_method`` other than ``None``).
    mapped: bool = False
    #: Whether a mapped backward gives every argument the batch axis where the forward did
    #: not (``vmap_method="expand_dims"``: see ``_torch_call._differentiable``).
    backward_broadcasts: bool = False

    @functools.cached_property
    def positional(self) -> bool:
        """Whether the arguments are plain positional arrays (``fn(*tensors)``)."""
        count = len(self.in_paths)
        return bool(self.in_tree == jax.tree_util.tree_structure(((0,) * count, {})))

    @functools.cached_property
    def single(self) -> bool:
        """Whether the result is one array (not a pytree of them)."""
        return bool(self.out_tree == jax.tree_util.tree_structure(0))


# ----- running fn -----

_local = threading.local()
#: Per thread: ``active`` while a ``torch_call`` function runs on it.
thread_state = _local


def inside() -> bool:
    """Whether this thread is running a ``torch_call`` function now."""
    return getattr(_local, "active", False)


def refuse_nested(where: str) -> None:
    """Raise :class:`NestedCallError` if this thread is inside a ``torch_call`` function."""
    if getattr(_local, "active", False):
        raise NestedCallError(
            f"{where}: called inside a torch_call function. That function runs while XLA "
            "is in the middle of the computation that called it; starting another JAX "
            "computation from there can deadlock (on a GPU the device's executor waits for "
            "the callback). Run the JAX part before or after the torch_call, in the "
            "jitted JAX code around it."
        )


def _outside_inference() -> contextlib.AbstractContextManager[Any]:
    """Out of ``torch.inference_mode()`` where the caller is in it: tensors made there are
    inference tensors, which have no version counter for the input check to read, and which
    autograd refuses to differentiate (JAX asked for gradients: the backward records even
    where the caller turned torch's autograd off)."""
    if torch.is_inference_mode_enabled():
        return torch.inference_mode(False)
    return contextlib.nullcontext()


def _aliases(buffers: Sequence[Any]) -> list[torch.Tensor]:
    """Tensors aliasing XLA's ``buffers``: ordinary tensors (:func:`_outside_inference`)."""
    with _outside_inference():
        return [_from_capsule(b.__dlpack__()) for b in buffers]


def _call_fn(fn: Callable[..., Any], sig: Signature, tensors: list[torch.Tensor]) -> Any:
    _local.active = True
    try:
        return _apply(fn, sig, tensors)
    finally:
        _local.active = False


def _slot_unchosen() -> bool:
    """Whether the callback runs on XLA's own thread where nothing chose a slot (see
    :func:`_foreign_why`); a thread some C code started that chose its slot keeps it."""
    return _private.on_foreign_thread() and SLOT.get() == (None, 0)


def in_callers_slot(sig: Signature, body: Callable[..., R], *args: Any) -> R:
    """``body(*args)``, a callback's whole body, in the caller's slot: on XLA's own thread
    (:func:`_slot_unchosen`) the slot is unknown for all of it, so that the scratch ``fn``
    took from a one-slot workspace stays its own until the body is done with it (a result
    that is that scratch is read by the write into XLA's buffer, a tensor saved for the
    backward by ``torch.autograd.grad``; held for ``fn`` alone, another device's call
    overwrote them meanwhile)."""
    if _slot_unchosen():
        with slot_unknown(_foreign_why(sig)):
            return body(*args)
    return body(*args)


def _apply(fn: Callable[..., Any], sig: Signature, tensors: list[torch.Tensor]) -> Any:
    if sig.positional:
        return fn(*tensors)
    args, kwargs = jax.tree_util.tree_unflatten(sig.in_tree, tensors)
    return fn(*args, **kwargs)


def _foreign_why(sig: Signature) -> str:
    """Why a workspace request in ``fn`` on a thread Python did not start is refused.

    XLA runs a callback on a thread of its own where the computation ran asynchronously
    (under a caller's ``jax.jit``, an input still being computed when it was called), and
    torch's autograd runs a CUDA backward on one. There the caller's slot, and what else
    uses it meanwhile, are unknown (measured: two ubatch threads whose torch_call
    functions ran there shared slot (0, 0) and overwrote each other's scratch)."""
    return (
        f"torch_call: {sig.name} asked a workspace of several slots for scratch while XLA "
        "runs it on a thread of its own (a jitted computation, or a gradient's backward, "
        "started before its inputs were computed, so XLA ran it later, off the caller's "
        "thread; or one call per device of a computation sharded over several devices, "
        "which XLA runs at once on threads of its own): which ubatch and lane the caller "
        "meant is unknown there. Select the slot inside the function (with "
        "interop.use_workspace_ubatch / use_workspace_lane) where nothing else uses it "
        "meanwhile, wait for the inputs before the call (jax.block_until_ready), or "
        "allocate the function's scratch with torch. (A workspace of one slot serves its "
        "only slot there, to one such call at a time.)"
    )


def _batch_shape(sig: Signature, tensors: list[torch.Tensor]) -> tuple[int, ...]:
    """The leading axes ``jax.vmap`` added to this call (``"expand_dims"`` and
    ``"broadcast_all"``), broadcast over the inputs; ``()`` for ``"sequential"``. Asked
    only where ``sig.mapped``."""
    found = [
        tuple(tensor.shape[: tensor.dim() - len(shape)])
        for tensor, shape in zip(tensors, sig.in_shapes, strict=True)
        if tensor.dim() > len(shape)
    ]
    return tuple(torch.broadcast_shapes(*found)) if found else ()  # type: ignore[no-untyped-call]


def _results(
    sig: Signature, returned: Any, batch: tuple[int, ...], device: torch.device
) -> list[torch.Tensor]:
    """``returned`` flattened, after checking it is what ``sig`` promised, with the leading
    axes ``batch``, on ``device`` (no output is written before this)."""
    if sig.single and type(returned) is torch.Tensor:
        if (
            returned.layout is _STRIDED  # first: a nested tensor's shape raises
            and not returned.is_nested
            and returned.dtype is sig.out_dtypes[0]
            and returned.shape == batch + sig.out_shapes[0]
            and returned.device == device
        ):
            return [returned]  # as promised: the common case, checked in one expression
        leaves, tree = [returned], sig.out_tree
    else:
        leaves, tree = jax.tree_util.tree_flatten(returned)
    if tree != sig.out_tree and any(map(_is_return_type, leaves)):
        # torch.return_types (t.max(0), t.sort(), t.topk(k)): named tuples of tensors
        # that JAX takes for one leaf; promised as the tuples they are.
        returned = jax.tree_util.tree_map(
            lambda leaf: tuple(leaf) if _is_return_type(leaf) else leaf, returned
        )
        leaves, tree = jax.tree_util.tree_flatten(returned)
    if tree != sig.out_tree:
        got = type(returned)
        raise ResultStructureError(
            f"torch_call: {sig.name} returned a {got.__module__}.{got.__qualname__} of "
            f"structure {tree}, but result_shape_dtypes promised {sig.out_tree}. No "
            "output was written."
        )
    for path, leaf, unbatched, dtype in zip(
        sig.out_paths, leaves, sig.out_shapes, sig.out_dtypes, strict=True
    ):
        shape = batch + unbatched
        if not isinstance(leaf, torch.Tensor):
            raise ResultStructureError(
                f"torch_call: {sig.name} returned {type(leaf).__name__} at result{path}, "
                f"expected a torch.Tensor of shape {shape} and dtype {dtype}. No output "
                "was written."
            )
        if leaf.layout is not _STRIDED or leaf.is_nested:
            kind = "a nested tensor" if leaf.is_nested else f"layout {leaf.layout}"
            raise ResultLayoutError(
                f"torch_call: {sig.name} returned {kind} at result{path}, expected a dense "
                f"(torch.strided) tensor of shape {shape} and dtype {dtype}: torch writes it "
                "into XLA's dense output buffer. Return .to_dense() (or the nested tensor's "
                "padded form) yourself. No output was written."
            )
        if leaf.dtype != dtype:
            raise ResultDtypeError(
                f"torch_call: {sig.name} returned dtype {leaf.dtype} at result{path}, "
                f"expected {dtype} (shape {shape}). Results are never cast (no narrowing): "
                f"return .to({dtype}) yourself if the conversion is exact. No output was "
                "written."
            )
        if leaf.shape != shape:
            raise ResultShapeError(
                f"torch_call: {sig.name} returned shape {tuple(leaf.shape)} at "
                f"result{path}, expected {shape} ({dtype}). No output was written."
            )
        if leaf.device != device:
            raise ResultDeviceError(
                f"torch_call: {sig.name} returned a tensor on {leaf.device} at "
                f"result{path}, expected {device}, where XLA's output buffer is (the "
                "inputs' device). No output was written."
            )
    return leaves


def _is_return_type(leaf: Any) -> bool:
    """Whether ``leaf`` is one of torch's ``torch.return_types`` (a tuple subclass)."""
    return isinstance(leaf, tuple) and type(leaf).__module__ == "torch.return_types"


def _snapshot(tensors: list[torch.Tensor]) -> list[tuple[Any, ...]]:
    """What ``fn`` must not change about its inputs. Every in-place operation (a write, and
    ``resize_``, ``set_``, ``as_strided_``: measured on torch 2.13) bumps the version."""
    return [(_version(t), t.data_ptr(), t.shape, t.stride()) for t in tensors]


def _refuse_changed(
    sig: Signature, tensors: list[torch.Tensor], before: list[tuple[Any, ...]]
) -> None:
    """Raise for the first input ``fn`` changed (resized, re-pointed, or wrote into)."""
    for path, tensor, (version, pointer, shape, strides) in zip(
        sig.in_paths, tensors, before, strict=True
    ):
        if tensor.data_ptr() != pointer or tensor.shape != shape or not tensor.is_contiguous():
            raise InputResizedError(  # XLA's buffers are dense: the input was contiguous
                f"torch_call: {sig.name} resized input {path} or pointed it at other memory "
                f"(resize_, set_, as_strided_, t_): it was shape {tuple(shape)}, strides "
                f"{strides} at {pointer:#x}, it is now shape {tuple(tensor.shape)}, strides "
                f"{tensor.stride()} at {tensor.data_ptr():#x}. Input tensors alias XLA's "
                "buffers and must keep their shape, layout and memory; work on a copy "
                "(input.clone()) or a new view."
            )
        if _version(tensor) != version:
            raise InputWrittenError(
                f"torch_call: {sig.name} wrote into input {path} in place (or changed it in "
                "place: its version counter moved, as a write or an unsqueeze_ moves it). "
                "Inputs alias XLA's buffers, which JAX takes as immutable: through "
                "buffer_callback the JAX array passed in (and anything sharing its buffer) "
                "may now hold written values. Write into a copy (input.clone()) instead, or "
                "return the new values as a result."
            )


def _call_watching(
    fn: Callable[..., Any], sig: Signature, tensors: list[torch.Tensor], before: list[Any]
) -> Any:
    """``fn`` on ``tensors``; where it raises after changing an input, its error says so in
    a note (the error stays ``fn``'s: the change would be refused had it returned)."""
    try:
        return _call_fn(fn, sig, tensors)
    except Exception as err:
        after = _snapshot(tensors)
        for path, old, new in zip(sig.in_paths, before, after, strict=True):
            if old != new:
                err.add_note(
                    f"torch_call: {sig.name} changed input {path} in place before it raised "
                    "(a write, a resize or a restride): inputs alias XLA's buffers, so the "
                    "JAX array passed in may hold what it wrote."
                )
                break
        raise


def run_forward(
    fn: Callable[..., Any], sig: Signature, tensors: list[torch.Tensor], device: torch.device
) -> list[torch.Tensor]:
    """Call ``fn`` on ``tensors`` (in the thread's grad mode: the inputs do not require
    grad), check its inputs and results; the results."""
    # fn runs as an eager caller's would (in a compiled jax_call's op)
    if _private.below_eager_dispatch():
        with _private.eager_dispatch():
            return run_forward(fn, sig, tensors, device)
    before = _snapshot(tensors)
    returned = _call_watching(fn, sig, tensors, before)
    if _snapshot(tensors) != before:
        _refuse_changed(sig, tensors, before)
    results = _results(sig, returned, _batch_shape(sig, tensors) if sig.mapped else (), device)
    for index, result in enumerate(results):
        if result.requires_grad:  # no input did: fn flagged one, or reached a tensor that does
            flagged = [p for p, t in zip(sig.in_paths, tensors, strict=True) if t.requires_grad]
            if flagged:
                _warn_flagged(sig, flagged[0])
            else:
                _warn_dropped(sig, sig.out_paths[index])
            break
    return results


#: The traced calls (by identity: two of one function compare equal) whose backward graph
#: was searched for leaves other than the inputs.
_looked_for_leaves: dict[int, weakref.ReferenceType[Signature]] = {}


def _first_backward(sig: Signature) -> bool:
    """Whether this is the first backward of the traced call ``sig`` (the graph is walked
    once per traced call)."""
    ref = _looked_for_leaves.get(id(sig))
    if ref is not None and ref() is sig:
        return False
    if len(_looked_for_leaves) > 1024:  # forget the dead
        # (list() copies it in one step: other threads insert meanwhile)
        for key, ref in list(_looked_for_leaves.items()):
            if ref() is None:
                _looked_for_leaves.pop(key, None)
    _looked_for_leaves[id(sig)] = weakref.ref(sig)
    return True


def _reaches_other_leaves(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> bool:
    """Whether torch's graph of ``outputs`` reaches a leaf that requires grad and is none of
    ``inputs`` (a parameter ``fn`` closes over, whose gradient JAX never asks for). The
    forward's check misses it under ``jax.jit(jax.grad(...))``, where XLA drops the forward
    call whose result only the backward needs."""
    own = {id(tensor) for tensor in inputs}
    seen: set[int] = set()
    stack = [output.grad_fn for output in outputs]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        leaf = getattr(node, "variable", None)  # an AccumulateGrad node's tensor
        if leaf is not None and id(leaf) not in own:
            return True
        stack.extend(child for child, _ in node.next_functions)
    return False


def _warn_dropped(sig: Signature, path: str) -> None:
    warnings.warn(
        f"torch_call: result{path} of {sig.name} requires grad through tensors that are not "
        "its inputs (a torch module's parameters, say). JAX differentiates a torch_call only "
        "with respect to its inputs, so those tensors' .grad is never set by jax.grad. To "
        "train them, pass them in as JAX arrays; else call requires_grad_(False) on them or "
        "run fn's body under torch.no_grad() (which also saves building torch's graph).",
        DroppedGradientWarning,
        stacklevel=2,
    )


def _warn_flagged(sig: Signature, path: str) -> None:
    warnings.warn(
        f"torch_call: {sig.name} called requires_grad_() on input {path}, so its results "
        "require grad in torch. JAX ignores that flag: it differentiates a torch_call with "
        "respect to its inputs itself (jax.grad runs fn again under torch.autograd.grad). "
        "Drop the requires_grad_() call.",
        DroppedGradientWarning,
        stacklevel=2,
    )


#: Said of an error ``fn`` raised in the backward of a call mapped with "expand_dims".
_BROADCAST_NOTE = (
    "torch_call: fn raised this in the backward of a call mapped by jax.vmap with "
    "vmap_method='expand_dims', which runs fn with every argument given the batch axis "
    "(as 'broadcast_all' does) so that torch returns a gradient per element: fn must "
    "accept every argument batched there, not only those expand_dims batches."
)


def run_backward(
    fn: Callable[..., Any],
    sig: Signature,
    tensors: list[torch.Tensor],
    wanted: Sequence[int],
    cotangents: dict[int, torch.Tensor],
    device: torch.device,
    required: Collection[int],
) -> list[torch.Tensor]:
    """The gradients of the inputs ``wanted`` (indices), from ``fn`` run again under autograd
    and ``torch.autograd.grad`` with ``cotangents`` (result index -> cotangent, in JAX's
    convention; absent: zero). An input of ``wanted`` torch's autograd does not reach gets
    zeros, unless it is ``required`` (one JAX differentiates): then the call fails.

    JAX's vector-Jacobian product of a complex function is the conjugate of torch's with a
    conjugated cotangent (torch's gradients are conjugate Wirtinger derivatives): both
    conjugations are made here.

    Raises:
        NoGradientError: a required input that torch's autograd does not connect to any
            result, or a result without autograd history that gets a nonzero cotangent.
    """
    if _private.below_eager_dispatch():  # in a compiled jax_call's op: fn's graph recorded
        with _private.eager_dispatch():
            return run_backward(fn, sig, tensors, wanted, cotangents, device, required)
    before = _snapshot(tensors)
    # Every floating input is tracked, whatever ``wanted`` holds: a result made of inputs
    # JAX does not differentiate then has a history (and adds nothing to the gradients,
    # as in JAX), and only a result cut off inside fn has none.
    for tensor in tensors:
        if tensor.is_floating_point() or tensor.is_complex():
            tensor.requires_grad_(True)
    with torch.enable_grad():
        try:
            returned = _call_watching(fn, sig, tensors, before)
        except Exception as err:
            if sig.backward_broadcasts and _batch_shape(sig, tensors):
                err.add_note(_BROADCAST_NOTE)
            raise
    if _snapshot(tensors) != before:
        _refuse_changed(sig, tensors, before)
    results = _results(sig, returned, _batch_shape(sig, tensors) if sig.mapped else (), device)
    outputs, grad_outputs, cut = [], [], []
    for index, result in enumerate(results):
        if not (result.is_floating_point() or result.is_complex()):
            continue
        cotangent = cotangents.get(index)
        if result.grad_fn is None and not result.requires_grad:
            cut.append((index, cotangent))
            continue
        if cotangent is None:
            cotangent = torch.zeros_like(result)
        elif result.is_complex():
            cotangent = cotangent.conj()
        outputs.append(result)
        grad_outputs.append(cotangent)
    inputs = [tensors[index] for index in wanted]
    grads: Sequence[torch.Tensor | None] = [None] * len(inputs)
    if outputs:
        if _first_backward(sig) and _reaches_other_leaves(outputs, tensors):
            _warn_dropped(sig, "")
        grads = torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)
    found = []
    for index, grad in zip(wanted, grads, strict=True):
        if grad is None and index not in required:  # asked for, not differentiated by JAX
            grad = torch.zeros_like(tensors[index])
        if grad is None:
            raise NoGradientError(
                f"torch_call: JAX asks for the gradient of input {sig.in_paths[index]} of "
                f"{sig.name}, but torch's autograd does not connect it to any result (it is "
                "unused, detached, used under torch.no_grad(), or reaches the results only "
                "through operations torch does not differentiate: comparisons, rounding, "
                "integer casts; tensors fn closes over are not inputs). torch.autograd.grad "
                "refuses this by default, and so does torch_call, rather than return zeros "
                "that may hide a cut graph. If its gradient is zero on purpose, pass it "
                "through jax.lax.stop_gradient in JAX."
            )
        found.append(grad.conj() if grad.is_complex() else grad)
    for index, cotangent in cut:  # every input is connected: is a result cut off?
        if cotangent is not None and bool(cotangent.any()):
            raise NoGradientError(
                f"torch_call: result{sig.out_paths[index]} of {sig.name} has no autograd "
                "history (torch.no_grad() or detach() inside the function, a kernel "
                "without a backward, or it is computed only from integer or bool inputs, "
                "which torch cannot tell from a cut graph), but JAX differentiates it "
                "with a nonzero "
                "cotangent: its gradient would be silently dropped. Make it "
                "differentiable in torch, or apply jax.lax.stop_gradient to that result "
                "in JAX if no gradient should flow through it."
            )
    return found


# ----- failures -----

_MARK = "interop.torch_call failure #"
_FAILURE = re.compile(re.escape(_MARK) + r"(\d+)")
_failures: OrderedDict[int, BaseException] = OrderedDict()
_failures_lock = threading.Lock()
renew_after_fork(sys.modules[__name__], "_failures_lock")  # after a fork: free
_numbers = itertools.count(1)
#: Failures kept for the eager wrapper; older ones (raised under jit: JAX reported them
#: already) are dropped first.
KEPT_FAILURES = 64


class CallbackFailure(RuntimeError):
    """What the callback raises to XLA: a number that finds the original exception."""


def _fail(sig: Signature, err: BaseException) -> NoReturn:
    """Keep ``err`` and raise to XLA a failure whose message holds ``err``'s traceback.

    XLA's message shows the stack of the callback, not the exception's own traceback, so
    ``fn``'s frames (where it raised) are written into the message. The frames of this
    module above ``fn`` are dropped from ``err``'s traceback first, their locals cleared
    (tensors over XLA's buffers, which XLA reuses once the callback returns; the callback
    lets go of its own before it calls this).
    """
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        with contextlib.suppress(RuntimeError):  # (the callback's own frame still runs)
            tb.tb_frame.clear()  # tensors over XLA's buffers: no kept failure reaches them
        tb = tb.tb_next
    if tb is not None:
        err = err.with_traceback(tb)
    where = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    if not _eager_call_waits():
        # Under a caller's jit, or in a backward, nobody takes it back: its frames' locals
        # (fn's tensors over XLA's buffers, whatever fn allocated) go now, their lines
        # stay; those of the errors it is chained to (fn's helpers' frames) too.
        for link in _chain(err):
            traceback.clear_frames(link.__traceback__)
    number = next(_numbers)
    with _failures_lock:
        _failures[number] = err
        while len(_failures) > KEPT_FAILURES:
            _failures.popitem(last=False)
    raise CallbackFailure(
        f"{sig.name} (called through interop.torch_call) raised {type(err).__name__}: "
        f"{err} [{_MARK}{number}]\n{where}"
    ) from err


def _chain(err: BaseException) -> list[BaseException]:
    """``err``, the errors it is chained to (``__cause__``, ``__context__``) and those an
    exception group holds, each once (a chain may loop)."""
    seen: dict[int, BaseException] = {}
    pending = [err]
    while pending:
        link = pending.pop()
        if id(link) in seen:
            continue
        seen[id(link)] = link
        pending.extend(e for e in (link.__cause__, link.__context__) if e is not None)
        grouped = getattr(link, "exceptions", None)  # an exception group's (Python 3.11+)
        if isinstance(grouped, tuple):
            pending.extend(e for e in grouped if isinstance(e, BaseException))
    return list(seen.values())


#: The code of the frames that take a failure back (``_torch_call.py`` registers them):
#: one of them on this thread's stack means an eager call waits for the failure.
eager_codes: set[Any] = set()


def _eager_call_waits() -> bool:
    """Whether an eager ``torch_call`` wrapper on this thread's stack will take the failure
    back (on a failure only: the walk costs nothing on the way through)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code in eager_codes:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def original_failure(err: BaseException) -> BaseException | None:
    """The exception a callback raised, for the error XLA reported it with (taken once)."""
    found = _FAILURE.search(str(err))
    if found is None:
        return None
    with _failures_lock:
        return _failures.pop(int(found.group(1)), None)


# ----- the two ways in -----

_streams: dict[tuple[int, int], Any] = {}


def _on_xla_stream(ctx: Any, device: torch.device) -> Any:
    """torch's stream context for XLA's stream ``ctx.stream`` on a CUDA ``device`` (on CPU
    there is none: asking for it raises)."""
    handle = ctx.stream
    key = (int(handle), device.index or 0)
    stream = _streams.get(key)
    if stream is None:
        stream = torch.cuda.ExternalStream(int(handle), device=device)  # type: ignore[no-untyped-call]
        _streams[key] = stream
    return torch.cuda.stream(stream)


def _write(targets: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    """Each value into its output buffer, in place (every value was checked first; a value
    that requires grad, from ``fn``'s own parameters, records a node nobody keeps)."""
    for target, value in zip(targets, values, strict=True):
        target.copy_(value)


def forward_buffers(fn: Callable[..., Any], sig: Signature) -> Callable[..., None]:
    """The ``buffer_callback`` body of a forward call."""

    def body(ctx: Any, outs: Sequence[Any], ins: Sequence[Any]) -> None:
        if torch.is_inference_mode_enabled():
            targets, tensors = _aliases(outs), _aliases(ins)
        else:  # written out (bench_torch_call's "interop.torch_call" row, small: the
            # helper and its null context measured 0.9 µs of 14)
            targets = [_from_capsule(b.__dlpack__()) for b in outs]
            tensors = [_from_capsule(b.__dlpack__()) for b in ins]
        device = (targets or tensors)[0].device if targets or tensors else _CPU
        if device.type != "cuda":
            _write(targets, run_forward(fn, sig, tensors, device))
        else:  # pragma: no cover - CUDA: benchmarks/gpu_check.py
            with _on_xla_stream(ctx, device):
                _write(targets, run_forward(fn, sig, tensors, device))

    def callback(ctx: Any, outs: Sequence[Any], *ins: Any) -> None:
        try:
            in_callers_slot(sig, body, ctx, outs, ins)
        except BaseException as err:  # Ctrl-C and sys.exit too: raised as they are
            outs, ins = (), ()  # XLA's buffers (body's frame is cleared): see _fail
            _fail(sig, err)

    return callback


def _required(marks: torch.Tensor, count: int) -> frozenset[int]:
    """The inputs JAX differentiates, from the forward's flags (``count`` bools; under
    ``vmap_method="broadcast_all"`` with leading batch axes, every row the same, and no
    row at all for a batch of 0)."""
    flags = marks.reshape(-1, count)[0].tolist() if marks.numel() else [False] * count
    return frozenset(i for i, flag in enumerate(flags) if flag)


def backward_buffers(
    fn: Callable[..., Any],
    sig: Signature,
    wanted: Sequence[int],
    cotangent_of: Sequence[int],
) -> Callable[..., None]:
    """The ``buffer_callback`` body of a backward call: inputs are the primal inputs, the
    cotangents of the results ``cotangent_of``, then the forward's flags of the inputs JAX
    differentiates; outputs the gradients of ``wanted``."""
    count = len(sig.in_paths)

    def body(ctx: Any, outs: Sequence[Any], ins: Sequence[Any]) -> None:
        targets, tensors = _aliases(outs), _aliases(ins)
        device = targets[0].device
        marks = tensors.pop()
        primals, cts = tensors[:count], dict(zip(cotangent_of, tensors[count:], strict=True))
        with _outside_inference():
            if device.type != "cuda":
                required = _required(marks, count)
                grads = run_backward(fn, sig, primals, wanted, cts, device, required)
                _write(targets, grads)
            else:  # pragma: no cover - CUDA: benchmarks/gpu_check.py
                with _on_xla_stream(ctx, device):
                    required = _required(marks, count)  # read on XLA's stream: ordered
                    grads = run_backward(fn, sig, primals, wanted, cts, device, required)
                    _write(targets, grads)

    def callback(ctx: Any, outs: Sequence[Any], *ins: Any) -> None:
        try:
            in_callers_slot(sig, body, ctx, outs, ins)
        except BaseException as err:  # Ctrl-C and sys.exit too: raised as they are
            outs, ins = (), ()  # XLA's buffers (body's frame is cleared): see _fail
            _fail(sig, err)

    return callback


_CPU = torch.device("cpu")


def _host_tensor(array: Any) -> torch.Tensor:
    """A tensor over a host array ``pure_callback`` handed over (NumPy or a CPU jax.Array)."""
    host = np.asarray(array)
    carrier = _CARRIERS.get(host.dtype)
    if carrier is not None:  # bfloat16, float8: NumPy's DLPack does not carry them
        host = host.view(carrier.host)
    if not host.flags.writeable:  # a read-only view of JAX's buffer: work on a copy
        host = host.copy()
    with _outside_inference():  # an ordinary tensor, as _aliases makes
        tensor = torch.from_numpy(host)
    return tensor.view(carrier.torch) if carrier is not None else tensor


def _host_array(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """``tensor``'s values as NumPy, for ``pure_callback`` to copy (zero-copy where it can)."""
    tensor = tensor.detach().resolve_conj().resolve_neg()
    dtype = _HOST_DTYPES[tensor.dtype]
    carrier = _CARRIERS[dtype]
    if carrier is None:
        return tensor.numpy()
    return tensor.view(_UINTS[tensor.element_size()]).numpy().view(dtype)


def forward_host(fn: Callable[..., Any], sig: Signature) -> Callable[..., Any]:
    """The ``pure_callback`` body of a forward call (the fallback: copies both ways)."""

    def body(arrays: Sequence[Any]) -> tuple[np.ndarray[Any, Any], ...]:
        tensors = [_host_tensor(a) for a in arrays]
        return tuple(map(_host_array, run_forward(fn, sig, tensors, _CPU)))

    def callback(*arrays: Any) -> tuple[np.ndarray[Any, Any], ...]:
        try:
            return _host_run(sig, body, arrays)
        except BaseException as err:  # Ctrl-C and sys.exit too: raised as they are
            arrays = ()  # XLA's buffers: see _fail
            _fail(sig, err)

    return callback


def backward_host(
    fn: Callable[..., Any],
    sig: Signature,
    wanted: Sequence[int],
    cotangent_of: Sequence[int],
) -> Callable[..., Any]:
    """The ``pure_callback`` body of a backward call (the fallback)."""
    count = len(sig.in_paths)

    def body(arrays: Sequence[Any]) -> tuple[np.ndarray[Any, Any], ...]:
        tensors = [_host_tensor(a) for a in arrays]
        required = _required(tensors.pop(), count)
        primals, cts = tensors[:count], dict(zip(cotangent_of, tensors[count:], strict=True))
        with _outside_inference():
            grads = run_backward(fn, sig, primals, wanted, cts, _CPU, required)
        return tuple(map(_host_array, grads))

    def callback(*arrays: Any) -> tuple[np.ndarray[Any, Any], ...]:
        try:
            return _host_run(sig, body, arrays)
        except BaseException as err:  # Ctrl-C and sys.exit too: raised as they are
            arrays = ()  # XLA's buffers: see _fail
            _fail(sig, err)

    return callback


def _host_run(
    sig: Signature,
    body: Callable[[Sequence[Any]], tuple[np.ndarray[Any, Any], ...]],
    arrays: Sequence[Any],
) -> tuple[np.ndarray[Any, Any], ...]:
    """``body(arrays)``, the slot unknown for all of it where it runs on XLA's own thread.
    There ``pure_callback`` copies the returned arrays only after the callback returns, once
    the only slot is let go: arrays over the scratch ``fn`` took from it (a result that
    is its scratch) are copied before (another device's call may write it meanwhile)."""

    def copied(arrays: Sequence[Any]) -> tuple[np.ndarray[Any, Any], ...]:
        results = body(arrays)
        if holds_only_slot():
            return tuple(result.copy() for result in results)
        return results

    return in_callers_slot(sig, copied, arrays)


def call_buffers(
    callback: Callable[..., None], specs: Sequence[jax.ShapeDtypeStruct], vmap_method: str | None
) -> Callable[..., Any]:
    """``buffer_callback`` of ``callback`` returning the flat results ``specs``."""
    assert _buffer_callback is not None
    return _buffer_callback(callback, tuple(specs), vmap_method=vmap_method)  # type: ignore[no-any-return]


def call_host(
    callback: Callable[..., Any], specs: Sequence[jax.ShapeDtypeStruct], vmap_method: str | None
) -> Callable[..., Any]:
    """``pure_callback`` of ``callback`` returning the flat results ``specs``."""

    def call(*leaves: Any) -> Any:
        return jax.pure_callback(callback, tuple(specs), *leaves, vmap_method=vmap_method)

    return call
