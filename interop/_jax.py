"""Torch <-> JAX handoff of workspace views: zero-copy, loss-free, ordered.

``to_jax`` and ``to_torch`` alias memory both ways through DLPack and refuse, with a precise
error, every case where raw ``from_dlpack`` would copy or narrow silently. ``jax_call`` wraps
a JAX function for torch callers and orders its results so that torch may reuse the input
regions as soon as it returns. The DLPack plumbing and its caches live in ``_dlpack.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import torch

from . import _dlpack
from ._jax_errors import (
    GradientTrackedError,
    LazyViewError,
    UnsupportedDtypeError,
    UnsupportedLayoutError,
    X64DisabledError,
)

try:
    from jax._src.config import enable_x64 as _x64_state

    def _x64_enabled() -> bool:
        return bool(_x64_state.value)  # honours `with jax.enable_x64(True):` too
except ImportError:  # pragma: no cover - depends on the installed jax

    def _x64_enabled() -> bool:
        return bool(jax.config.read("jax_enable_x64"))  # type: ignore[no-untyped-call]


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

_X64_HINT = (
    'Enable JAX\'s 64-bit mode before handing it over: jax.config.update("jax_enable_x64", '
    "True) at start-up, or JAX_ENABLE_X64=1 in the environment (or use a 32-bit dtype)."
)

_STRIDED = torch.strided
Fn = TypeVar("Fn", bound=Callable[..., Any])


def to_jax(tensor: torch.Tensor, *, stream: torch.cuda.Stream | None = None) -> jax.Array:
    """Hand a torch tensor (e.g. a workspace view) to JAX without copying it.

    The result aliases the tensor's bytes: ``result.unsafe_buffer_pointer() ==
    tensor.data_ptr()``, and torch writes made before a later ``to_jax`` of the same region
    are seen by that later array. Each call builds a fresh array (only device metadata is
    cached), so a handoff is never stale. Where aliasing is impossible the call raises
    rather than copy; 64-bit data is never narrowed.

    On CUDA the array is ordered after the work queued so far on ``stream`` (default: the
    tensor device's current torch stream) through a stream wait, not a host sync. Work that
    torch queues *after* the handoff is not ordered before JAX's reads: use
    :func:`jax_call` for that.

    Args:
        tensor: a strided torch tensor on CPU or a CUDA device JAX can see. Any layout whose
            strides permute a dense layout works (contiguous, transposed, permuted).
        stream: the torch CUDA stream that produced the data, when it is not the current one.

    Returns:
        A ``jax.Array`` on the matching JAX device, same shape and dtype, same address.

    Raises:
        TypeError: ``tensor`` is not a ``torch.Tensor``.
        X64DisabledError: (a ``TypeError``) 64-bit dtype while JAX's x64 mode is off.
        UnsupportedDtypeError: (a ``TypeError``) a dtype JAX cannot import.
        UnsupportedLayoutError: (a ``ValueError``) step/column slice, ``expand()``, sparse.
        MisalignedViewError: (a ``ValueError``) on CPU, an address not 64-byte aligned.
        DeviceNotVisibleError: (a ``ValueError``) a device this process's JAX cannot see.
        LazyViewError: (a ``ValueError``) torch's conjugate or negative bit is set.
        GradientTrackedError: (a ``ValueError``) the tensor requires grad.

    Example:
        >>> import torch, interop
        >>> t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        >>> a = interop.to_jax(t)
        >>> a.unsafe_buffer_pointer() == t.data_ptr(), a.sum().item()
        (True, 15.0)
        >>> interop.to_jax(t[:, ::2])
        Traceback (most recent call last):
        ...
        interop._jax_errors.UnsupportedLayoutError: to_jax: cannot alias tensor(...
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"to_jax: expected a torch.Tensor, got {type(tensor).__name__}")
    dtype = tensor.dtype
    if dtype not in SHARED_DTYPES:
        _check_wide_dtype(dtype)
    target = _dlpack.target_for(tensor)
    if tensor.requires_grad or tensor.is_conj() or tensor.is_neg() or tensor.layout != _STRIDED:
        _refuse_flags(tensor)
    return _dlpack.import_tensor(tensor, target, stream)


def _check_wide_dtype(dtype: torch.dtype) -> None:
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
    if tensor.layout != _STRIDED:
        raise UnsupportedLayoutError(
            f"to_jax: a {tensor.layout} tensor has no dense buffer JAX could alias; "
            "DLPack carries strided tensors only. Call .to_dense() first (a copy)."
        )
    if tensor.requires_grad:
        raise GradientTrackedError(
            "to_jax: the tensor requires grad; JAX would share its data but autograd would "
            "not see what JAX does with it. Pass tensor.detach() (no copy) if you mean it."
        )
    raise LazyViewError(
        "to_jax: the tensor has torch's conjugate or negative bit set, so its bytes are not "
        "its values; aliasing would hand JAX the wrong numbers. Call .resolve_conj() / "
        ".resolve_neg() first (a copy)."
    )


def to_torch(array: jax.Array, *, stream: torch.cuda.Stream | None = None) -> torch.Tensor:
    """Hand a JAX array to torch without copying it, after the computation that produced it.

    On CPU this waits until ``array`` is ready; on CUDA the consuming torch ``stream``
    (default: the current one) waits for it on the device, without a host sync. Writes
    through the returned tensor change the bytes the ("immutable") JAX array reads.

    Args:
        array: a concrete, single-device ``jax.Array`` (not a tracer).
        stream: the torch CUDA stream that will use the tensor, when not the current one.

    Returns:
        A torch tensor aliasing the array's buffer (same address, shape and dtype).

    Raises:
        TypeError: ``array`` is not a concrete ``jax.Array`` (e.g. a tracer inside ``jit``).
        ShardedArrayError: (a ``ValueError``) the array spans several devices.

    Example:
        >>> import jax.numpy as jnp, interop
        >>> a = jnp.arange(4, dtype=jnp.int32) * 2
        >>> t = interop.to_torch(a)
        >>> t.tolist(), t.data_ptr() == a.unsafe_buffer_pointer()
        ([0, 2, 4, 6], True)
    """
    if not _dlpack.is_array_impl(array):
        raise TypeError(
            f"to_torch: expected a concrete jax.Array, got {type(array).__name__}"
            + (" (a tracer: call to_torch outside jit)" if isinstance(array, jax.Array) else "")
        )
    return _dlpack.export_array(array, stream)


def _to_jax_leaf(leaf: Any) -> Any:
    return to_jax(leaf) if isinstance(leaf, torch.Tensor) else leaf


def _to_torch_leaf(leaf: Any) -> Any:
    return to_torch(leaf) if _dlpack.is_array_impl(leaf) else leaf


def jax_call(fn: Fn) -> Callable[..., Any]:
    """Wrap a JAX function so it takes and returns torch tensors, zero-copy both ways.

    Torch tensors anywhere in the arguments (pytrees: tuples, lists, dicts) go through
    :func:`to_jax`; JAX arrays anywhere in the result come back through :func:`to_torch`.

    Ordering: once the wrapped call returns, torch may overwrite the input regions (the next
    ``get_simultaneous`` hands them out again) without changing the result. The mechanism is
    the cheapest one that holds: every returned array is handed over by :func:`to_torch`,
    which on CPU waits until the array is ready (the computation that read the inputs has
    finished) and on CUDA makes the current torch stream wait for it on the device, so
    torch's later writes queue behind JAX's reads without a host sync. Inputs are ordered
    after the work queued on the current torch stream. Limits: results your function
    returns that alias an input (returning an argument as is) change with it, as in torch;
    and work whose result is dropped is not waited for (it cannot change the result).

    Args:
        fn: a function of JAX arrays (jitted or not) returning a pytree of arrays.

    Returns:
        A function taking torch tensors (and any other leaves, passed through) and returning
        the same pytree structure with torch tensors in place of arrays.

    Raises:
        HandoffError: from :func:`to_jax` / :func:`to_torch` for an input or output that
            cannot be aliased (see those functions).

    Example:
        >>> import torch, jax, interop
        >>> double = interop.jax_call(jax.jit(lambda x: x * 2))
        >>> x = torch.ones(3)
        >>> y = double(x)
        >>> x.fill_(5.0)  # reuse the input region at once: the result does not change
        tensor([5., 5., 5.])
        >>> y
        tensor([2., 2., 2.])
    """

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        jax_args, jax_kwargs = jax.tree_util.tree_map(_to_jax_leaf, (args, kwargs))
        return jax.tree_util.tree_map(_to_torch_leaf, fn(*jax_args, **jax_kwargs))

    return call
