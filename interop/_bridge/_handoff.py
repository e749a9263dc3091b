"""Torch <-> JAX handoff of workspace views: zero-copy, loss-free, ordered.

``to_jax`` and ``to_torch`` alias memory both ways through DLPack and refuse, with a precise
error, every case where raw ``from_dlpack`` would copy or narrow silently. ``jax_call``
(``_jax_call.py``) builds on them. The DLPack plumbing and its caches live in ``_dlpack.py``.

Under ``torch.compile`` both run eagerly, at a graph break (a JAX array cannot live in a
torch graph), and JAX's own functions are left to run eagerly too (``_private.py``).
"""

from __future__ import annotations

from typing import Any, cast

import jax
import numpy as np
import torch

from .. import _private
from .._compile import run_eagerly
from .._device import same_device
from .._errors import (
    ConjugateBitError,
    GradientTrackedError,
    NegativeBitError,
    StreamDeviceError,
    StreamTypeError,
    TransformedTensorError,
    UnsupportedDtypeError,
    UnsupportedLayoutError,
    X64DisabledError,
)
from . import _dlpack

_x64_enabled = _private.x64_enabled  # honours `with jax.enable_x64(True):` too


def _torch_dtypes(*names: str) -> frozenset[torch.dtype]:
    return frozenset(getattr(torch, n) for n in names if hasattr(torch, n))


#: Torch dtypes JAX imports bit for bit in any mode (float8 types where torch has them).
SHARED_DTYPES = _torch_dtypes(
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16",
    "float32", "complex64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "float8_e8m0fnu",
)  # fmt: skip
#: Torch dtypes JAX imports only with x64 on (otherwise it would narrow them to 32 bits).
WIDE_DTYPES = _torch_dtypes("int64", "uint64", "float64", "complex128")


def _jax_dtypes(dtypes: frozenset[torch.dtype]) -> frozenset[np.dtype[Any]]:
    names = (str(dtype).removeprefix("torch.") for dtype in dtypes)
    return frozenset(
        np.dtype(getattr(jax.numpy, name)) for name in names if hasattr(jax.numpy, name)
    )


#: JAX dtypes torch can alias through DLPack: the torch dtypes above, seen from JAX. Any
#: other (``int4``, ``uint2``, ``float8_e3m4``, ``float4_e2m1fn``...) has no torch dtype.
EXPORTABLE_DTYPES = _jax_dtypes(SHARED_DTYPES | WIDE_DTYPES)
#: Each torch dtype above as JAX's dtype, and back.
JAX_DTYPES: dict[torch.dtype, np.dtype[Any]] = {
    dtype: np.dtype(getattr(jax.numpy, str(dtype).removeprefix("torch.")))
    for dtype in SHARED_DTYPES | WIDE_DTYPES
    if hasattr(jax.numpy, str(dtype).removeprefix("torch."))
}
TORCH_DTYPES: dict[np.dtype[Any], torch.dtype] = {v: k for k, v in JAX_DTYPES.items()}
_CARRIERS = _dlpack.carriers(EXPORTABLE_DTYPES)
_NOT_EXPORTABLE = object()

_X64_HINT = (
    'Enable JAX\'s 64-bit mode before handing it over: jax.config.update("jax_enable_x64", '
    "True) at start-up, or JAX_ENABLE_X64=1 in the environment (or use a 32-bit dtype)."
)

_STRIDED = torch.strided
#: What ``stream=`` takes: a torch CUDA stream, or a CUDA stream handle.
Stream = torch.cuda.Stream | int


def to_jax(tensor: torch.Tensor, *, stream: Stream | None = None) -> jax.Array:
    """Hand a torch tensor (e.g. a workspace view) to JAX without copying it.

    The result aliases the tensor's bytes: ``result.unsafe_buffer_pointer() ==
    tensor.data_ptr()``, and torch writes made before a later ``to_jax`` of the same region
    are seen by that later array. Each call builds a fresh array (only device metadata is
    cached), so a handoff is never stale. Where aliasing is impossible the call raises
    rather than copy; 64-bit data is never narrowed. Every refusal is a ``BufferError`` (as
    torch's own ``__dlpack__`` refusals are) as well as the ``ValueError``/``TypeError``
    named below.

    On CUDA the array is ordered after the work queued so far on ``stream`` (default: the
    tensor device's current torch stream) through a stream wait, not a host sync. Work that
    torch queues *after* the handoff is not ordered before JAX's reads: use
    :func:`jax_call` for that.

    Args:
        tensor: a strided torch tensor on CPU or a CUDA device JAX can see. Any layout whose
            strides permute a dense layout works (contiguous, transposed, permuted).
        stream: the torch CUDA stream that produced the data, when it is not the current one
            (a ``torch.cuda.Stream`` of the tensor's device, or its handle as an int).
            ``None`` on CPU, where there are no streams.

    Returns:
        A ``jax.Array`` on the matching JAX device, same shape and dtype, same address.

    Raises:
        TypeError: ``tensor`` is not a ``torch.Tensor``.
        X64DisabledError: (a ``TypeError``) 64-bit dtype while JAX's x64 mode is off.
        UnsupportedDtypeError: (a ``TypeError``) a dtype JAX cannot import.
        UnsupportedLayoutError: (a ``ValueError``) step/column slice, ``expand()``, sparse,
            nested.
        MisalignedViewError: (a ``ValueError``) on CPU, an address not 64-byte aligned.
        DeviceNotVisibleError: (a ``ValueError``) a device this process's JAX cannot see.
        ConjugateBitError: (a ``LazyViewError``, ``ValueError``) torch's conjugate bit is set.
        NegativeBitError: (a ``LazyViewError``, ``ValueError``) torch's negative bit is set.
        GradientTrackedError: (a ``ValueError``) the tensor requires grad, or carries a
            forward-mode tangent (``torch.autograd.forward_ad``, ``torch.func.jvp``).
        TransformedTensorError: (a ``ValueError``) a ``torch.func.vmap`` wrapper.
        StreamTypeError: (a ``TypeError``) ``stream`` is not a stream, a handle or ``None``.
        StreamDeviceError: (a ``ValueError``) a stream for a CPU tensor, or a stream of
            another device.

    Example:
        >>> import torch, interop
        >>> t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        >>> a = interop.to_jax(t)
        >>> a.unsafe_buffer_pointer() == t.data_ptr(), a.sum().item()
        (True, 15.0)
        >>> interop.to_jax(t[:, ::2])
        Traceback (most recent call last):
        ...
        interop.errors.UnsupportedLayoutError: to_jax: cannot alias tensor(...
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"to_jax: expected a torch.Tensor, got {type(tensor).__name__}")
    dtype = tensor.dtype
    if dtype not in SHARED_DTYPES:
        check_wide_dtype(dtype)
    if (
        tensor.requires_grad
        or tensor.is_conj()
        or tensor.is_neg()
        or tensor.layout != _STRIDED
        or tensor.is_nested
    ):
        _refuse_flags(tensor)
    target = _dlpack.target_for(tensor)
    if stream is not None:
        stream = checked_stream(stream, tensor.device, "to_jax", "tensor")
    if (
        not tensor.is_contiguous()
        and _is_permuted_dense(tensor)
        and not _dlpack.permuted_layouts_import_correctly(target)
    ):
        raise UnsupportedLayoutError(
            f"to_jax: this jax ({jax.__version__}) imports permuted layouts (a transpose, a "
            "permute) with wrong values: it reads the bytes as if they were row-major (seen "
            "on jax 0.6.1 to 0.7.x). Refusing rather than hand JAX the wrong numbers. Call "
            ".contiguous() first (a copy), or upgrade jax."
        )
    if _private.forward_tangent(tensor) is not None:  # (outside a dual level: one read)
        raise GradientTrackedError(
            "to_jax: the tensor carries a forward-mode tangent (torch.autograd.forward_ad); "
            "JAX would get its values and the tangent would be lost. Wrap the JAX function "
            "with interop.jax_call(fn), whose jvp rule runs jax.jvp (under torch.func.jvp "
            "too); with torch.autograd.forward_ad, pass fwAD.unpack_dual(tensor).primal "
            "only if no tangent should flow."
        )
    try:
        return _dlpack.import_tensor(tensor, target, stream)
    except RuntimeError:  # "Cannot access data pointer of Tensor that doesn't have storage"
        if _private.is_transform_wrapper(tensor):
            raise TransformedTensorError(
                "to_jax: the tensor is a torch.func transform's (vmap) wrapper, with "
                "no buffer of its own JAX could alias. Wrap the JAX function with "
                "interop.jax_call(fn): its vmap and jvp rules run jax.vmap and jax.jvp."
            ) from None
        raise


def _is_permuted_dense(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s strides permute a dense layout (a transpose, a permute)."""
    strides = tensor.stride()
    order = sorted(range(tensor.dim()), key=lambda d: -strides[d])
    return tensor.permute(order).is_contiguous()


def check_wide_dtype(dtype: torch.dtype) -> None:
    """Refuse a torch dtype JAX cannot hold exactly now (see :func:`to_jax`'s errors)."""
    if dtype not in WIDE_DTYPES:
        raise UnsupportedDtypeError(
            f"to_jax: dtype {dtype} has no JAX equivalent that DLPack can alias. "
            f"Supported: {', '.join(sorted(str(d) for d in SHARED_DTYPES | WIDE_DTYPES))}."
        )
    if not _x64_enabled():
        raise X64DisabledError(
            f"to_jax: refusing a {dtype} tensor while JAX's x64 mode is off: JAX would "
            f"copy it and narrow it to 32 bits (2**40 + 5 becomes 5, 1e300 becomes inf). "
            + _X64_HINT
        )


def _refuse_flags(tensor: torch.Tensor) -> None:
    if tensor.is_nested:
        raise UnsupportedLayoutError(
            "to_jax: a nested tensor has no single dense buffer JAX could alias; DLPack "
            "carries strided tensors only. Call .to_padded_tensor(0) first (a copy)."
        )
    if tensor.layout != _STRIDED:
        raise UnsupportedLayoutError(
            f"to_jax: a {tensor.layout} tensor has no dense buffer JAX could alias; "
            "DLPack carries strided tensors only. Call .to_dense() first (a copy)."
        )
    if tensor.requires_grad:
        raise GradientTrackedError(
            "to_jax: the tensor requires grad; JAX would share its data but autograd would "
            "not see what JAX does with it. To differentiate through JAX, wrap the JAX "
            "function with interop.jax_call(fn) and call it on the tensor; pass "
            "tensor.detach() (no copy) only if no gradient should flow back."
        )
    if tensor.is_conj():
        raise ConjugateBitError(
            f"to_jax: the {tensor.dtype} tensor has torch's conjugate bit set (a lazy "
            "conj()): its bytes hold the unconjugated values, so aliasing would hand JAX "
            "the wrong numbers. Call .resolve_conj() first (a copy)."
        )
    raise NegativeBitError(
        f"to_jax: the {tensor.dtype} tensor has torch's negative bit set (a lazy "
        "negation, e.g. of a conjugated imaginary part): its bytes hold the values with "
        "the wrong sign, so aliasing would hand JAX the wrong numbers. Call .resolve_neg() "
        "first (a copy)."
    )


def checked_stream(
    stream: object, device: torch.device, where: str, what: str
) -> torch.cuda.Stream:
    """``stream`` as the torch CUDA stream to order a handoff on; refused as torch's
    ``__dlpack__`` refuses it.

    Args:
        stream: not ``None``: a ``torch.cuda.Stream`` or a CUDA stream handle (an int).
        device: the device of the data handed over.
        where: the public function, for the message (``"to_jax"``).
        what: what is handed over, for the message (``"tensor"``).

    Returns:
        The stream (an int handle wrapped as ``torch.cuda.ExternalStream``).

    Raises:
        StreamTypeError: (``TypeError``) neither a stream nor a non-negative int.
        StreamDeviceError: (``ValueError``) any stream for CPU data ("stream should be None
            on cpu", as torch says), or a stream of another device than the data's.

    Example:
        >>> import torch
        >>> checked_stream(0, torch.device("cpu"), "to_jax", "tensor")
        Traceback (most recent call last):
        ...
        interop.errors.StreamDeviceError: to_jax: stream=0 was given for a tensor on cpu, ...
    """
    is_handle = type(stream) is int and stream >= 0
    if not (is_handle or isinstance(stream, torch.cuda.Stream)):
        raise StreamTypeError(
            f"{where}: stream must be None, a torch.cuda.Stream or a CUDA stream handle (a "
            f"non-negative int), got {stream!r} ({type(stream).__name__})."
        )
    if device.type != "cuda":
        raise StreamDeviceError(
            f"{where}: stream={stream!r} was given for a {what} on {device}, but {device} "
            f"work is not ordered by streams: stream should be None on {device.type}."
        )
    if is_handle:
        return torch.cuda.ExternalStream(stream, device=device)  # type: ignore[no-untyped-call]
    stream_device = cast(torch.cuda.Stream, stream).device
    if same_device(stream_device, device):
        return cast(torch.cuda.Stream, stream)
    raise StreamDeviceError(
        f"{where}: stream={stream!r} belongs to {stream_device}, but the {what} is on "
        f"{device}; pass a stream of {device} (or None for its current stream)."
    )


def to_torch(array: jax.Array, *, stream: Stream | None = None) -> torch.Tensor:
    """Hand a JAX array to torch without copying it, after the computation that produced it.

    On CPU this waits until ``array`` is ready; on CUDA the consuming torch ``stream``
    (default: the current one) waits for it on the device, without a host sync.

    The tensor is writable, and writes through it change the bytes the ("immutable") JAX
    array reads. jax 0.12 marks its DLPack exports read-only (a DLPack 1.x flag), but torch
    has no read-only tensors and ignores the flag (torch 2.13): refusing writes is not
    possible, and a copy would break the zero-copy promise, so the tensor stays writable
    on every jax release alike. Do not write into it while JAX still uses the array (or
    drop the array: the tensor keeps the bytes alive).

    The tensor keeps the bytes alive as ``torch.from_dlpack`` does: deleting, donating or
    garbage-collecting ``array`` afterwards leaves the tensor intact (a donated array is then
    copied by JAX, since torch still uses its buffer). On CPU that holds even when every
    array in ``jax.live_arrays()`` is deleted.

    Args:
        array: a concrete, single-device ``jax.Array`` (not a tracer) whose dtype torch has.
        stream: the torch CUDA stream that will use the tensor, when not the current one
            (a ``torch.cuda.Stream`` of the array's device, or its handle as an int).
            ``None`` on CPU, where there are no streams.

    Returns:
        A torch tensor aliasing the array's buffer (same address, shape and dtype).

    Raises:
        TypeError: ``array`` is not a concrete ``jax.Array`` (e.g. a tracer inside ``jit``).
        UnsupportedDtypeError: (a ``TypeError``) a dtype torch has no equivalent of
            (``int4``, ``uint2``, ``float8_e3m4``...).
        ShardedArrayError: (a ``ValueError``) the array spans several devices.
        DeletedArrayError: (a ``RuntimeError``) the array was deleted or donated.
        StreamTypeError: (a ``TypeError``) ``stream`` is not a stream, a handle or ``None``.
        StreamDeviceError: (a ``ValueError``) a stream for a CPU array, or a stream of
            another device.

    Example:
        >>> import jax.numpy as jnp, interop
        >>> a = jnp.arange(4, dtype=jnp.int32) * 2
        >>> t = interop.to_torch(a)
        >>> t.tolist(), t.data_ptr() == a.unsafe_buffer_pointer()
        ([0, 2, 4, 6], True)
        >>> interop.to_torch(jnp.zeros(4, jnp.int4))
        Traceback (most recent call last):
        ...
        interop.errors.UnsupportedDtypeError: to_torch: JAX dtype int4 has no torch equivalent ...
    """
    if not _dlpack.is_array_impl(array):
        raise TypeError(
            f"to_torch: expected a concrete jax.Array, got {type(array).__name__}"
            + (" (a tracer: call to_torch outside jit)" if isinstance(array, jax.Array) else "")
        )
    carrier = _CARRIERS.get(array.dtype, _NOT_EXPORTABLE)
    if carrier is _NOT_EXPORTABLE:
        raise UnsupportedDtypeError(
            f"to_torch: JAX dtype {array.dtype} has no torch equivalent that DLPack can "
            f"carry. Supported: {', '.join(sorted(map(str, EXPORTABLE_DTYPES)))}. Convert "
            "it first (array.astype(jnp.int8), a copy)."
        )
    if stream is not None:
        stream = checked_stream(stream, _torch_device(array), "to_torch", "JAX array")
    return _dlpack.export_array(array, stream, cast(_dlpack.Carrier | None, carrier))


def _torch_device(array: jax.Array) -> torch.device:
    """The torch device of a single-device array's memory (for the stream check)."""
    if array.platform() == "cpu":
        return torch.device("cpu")
    device = next(iter(array.devices()))  # a sharded array is refused after this check
    return torch.device("cuda", device.local_hardware_id)


#: Why the handoff runs outside torch.compile graphs, and what to do instead.
HANDOFF_ADVICE = (
    "functional-ws: interop.to_jax and interop.to_torch run eagerly, outside torch.compile "
    "graphs (the graph breaks at the call): a JAX array cannot live in a torch graph. With "
    "fullgraph=True, put the JAX code in a function wrapped with interop.jax_call(fn), "
    "which compiles as one custom op (functional_ws::jax_call)."
)
run_eagerly(to_jax, HANDOFF_ADVICE)  # type: ignore[arg-type]
run_eagerly(to_torch, HANDOFF_ADVICE)  # type: ignore[arg-type]
_private.dynamo_skips_jax()  # JAX's functions called in a compiled function run eagerly too
