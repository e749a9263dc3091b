"""The handoff follows its peers' DLPack conventions: ``stream=`` validated as torch's
``__dlpack__`` validates it, dtypes DLPack cannot carry refused up front in both directions,
and every refusal's traceback starts with the user's mistake (issues 10, 12 and 13)."""

from __future__ import annotations

import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from test_jax_views import carve, handoff_path

import interop
from interop._bridge import _dlpack
from interop._bridge._handoff import EXPORTABLE_DTYPES

PATHS = pytest.mark.parametrize("private", [True, False], ids=["private", "public"])
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _view() -> torch.Tensor:
    return carve([((64,), torch.float32)])[0].zero_()


def _array() -> jax.Array:
    return jnp.arange(8, dtype=jnp.float32) + 1


# ----- stream= -----

# id, stream, error, builtin, fragment of the message
BAD_STREAMS = [
    ("object", object(), interop.errors.StreamTypeError, TypeError, "got <object object"),
    ("string", "0", interop.errors.StreamTypeError, TypeError, "got '0' (str)"),
    ("float", 1.5, interop.errors.StreamTypeError, TypeError, "got 1.5 (float)"),
    ("bool", True, interop.errors.StreamTypeError, TypeError, "got True (bool)"),
    ("negative-int", -1, interop.errors.StreamTypeError, TypeError, "non-negative int"),
    ("zero-on-cpu", 0, interop.errors.StreamDeviceError, ValueError,
     "stream should be None on cpu"),
    ("handle-on-cpu", 7, interop.errors.StreamDeviceError, ValueError, "stream=7"),
]  # fmt: skip
DIRECTIONS = {
    "to_jax": lambda stream: interop.to_jax(_view(), stream=stream),
    "to_torch": lambda stream: interop.to_torch(_array(), stream=stream),
}


@PATHS
@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize(
    ("stream", "error", "builtin", "fragment"),
    [case[1:] for case in BAD_STREAMS],
    ids=[case[0] for case in BAD_STREAMS],
)
def test_bad_streams_are_refused_as_torch_refuses_them(
    private, direction, stream, error, builtin, fragment
):
    with handoff_path(private), pytest.raises(error) as info:
        DIRECTIONS[direction](stream)
    assert isinstance(info.value, builtin) and isinstance(info.value, BufferError)
    message = str(info.value)
    assert message.startswith(f"{direction}: stream") and fragment in message, message


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_no_stream_is_fine_on_cpu(direction):
    result = DIRECTIONS[direction](None)
    assert result is not None


@needs_cuda
def test_streams_on_cuda_are_checked_too():
    view = torch.zeros(64, device="cuda")
    array = jnp.ones(8, device=jax.devices("gpu")[0])
    with pytest.raises(interop.errors.StreamTypeError):
        interop.to_jax(view, stream=object())
    with pytest.raises(interop.errors.StreamTypeError):
        interop.to_torch(array, stream="0")
    side = torch.cuda.Stream()
    assert interop.to_jax(view, stream=side).unsafe_buffer_pointer() == view.data_ptr()
    handle = torch.cuda.current_stream().cuda_stream
    assert interop.to_torch(array, stream=handle).data_ptr() == array.unsafe_buffer_pointer()


# ----- dtypes DLPack cannot carry, JAX -> torch -----

#: JAX dtypes without a torch equivalent (those this JAX has).
NOT_IN_TORCH = [
    name
    for name in (
        "int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float8_e3m4", "float8_e4m3",
        "float8_e4m3b11fnuz",
    )
    if hasattr(jnp, name)
]  # fmt: skip


@PATHS
@pytest.mark.parametrize("name", NOT_IN_TORCH)
def test_to_torch_refuses_dtypes_torch_lacks_up_front(private, name, monkeypatch):
    array = jnp.zeros((4,), getattr(jnp, name))
    monkeypatch.setattr(_dlpack, "export_array", _never_called)  # refused before export
    with handoff_path(private), pytest.raises(interop.errors.UnsupportedDtypeError) as info:
        interop.to_torch(array)
    assert isinstance(info.value, TypeError) and isinstance(info.value, BufferError)
    assert f"dtype {name} " in str(info.value) and "to_torch" in str(info.value)
    _assert_clean(info.value)


def _never_called(*args: object) -> None:
    raise AssertionError("export_array was called for a dtype torch cannot hold")


def _jax_dtypes() -> list[np.dtype]:
    """Every scalar dtype this JAX offers (the names ml_dtypes and NumPy give it)."""
    found = set()
    for name in dir(jnp):
        value = getattr(jnp, name)
        dtype = getattr(value, "dtype", None)
        if isinstance(value, type) and isinstance(dtype, np.dtype):
            found.add(dtype)
    return sorted(found, key=str)


@pytest.mark.parametrize("dtype", _jax_dtypes(), ids=str)
def test_every_jax_dtype_is_handed_over_or_refused_by_name(dtype):
    wide = dtype.name in ("int64", "uint64", "float64", "complex128")
    if wide and not jax.config.read("jax_enable_x64"):
        pytest.skip("64-bit arrays need x64 (test_64_bit_dtypes_are_exact_with_x64_on)")
    try:
        array = jnp.zeros((3,), dtype)
    except (TypeError, ValueError, RuntimeError):  # JaxRuntimeError: no XLA type on CPU
        pytest.skip(f"this JAX cannot build {dtype} arrays here")
    if array.dtype in EXPORTABLE_DTYPES:
        tensor = interop.to_torch(array)
        assert tensor.data_ptr() == array.unsafe_buffer_pointer()
        assert str(tensor.dtype) == f"torch.{array.dtype.name}"
    else:
        with pytest.raises(interop.errors.UnsupportedDtypeError) as info:
            interop.to_torch(array)
        assert f"dtype {array.dtype.name} " in str(info.value), str(info.value)


# ----- the first line of a traceback is the user's mistake -----


def _assert_clean(err: BaseException) -> None:
    """Nothing chained is shown: no cause, and any context is suppressed."""
    assert err.__cause__ is None, repr(err.__cause__)
    assert err.__context__ is None or err.__suppress_context__, repr(err.__context__)
    shown = "".join(traceback.format_exception(err))
    assert "During handling" not in shown and "direct cause" not in shown, shown
    assert shown.count("Traceback (most recent call last)") == 1, shown


# id, the failing call, error, a fragment the message must keep (JAX's words where they
# are information)
ERRORS = [
    ("layout", lambda: interop.to_jax(_view()[::2]), interop.errors.UnsupportedLayoutError,
     "JAX said:"),
    ("misaligned", lambda: interop.to_jax(_view()[1:]), interop.errors.MisalignedViewError,
     "JAX said:"),
    ("device", lambda: interop.to_jax(torch.empty(4, device="meta")),
     interop.errors.DeviceNotVisibleError, "meta"),
    ("x64", lambda: interop.to_jax(torch.arange(4)), interop.errors.X64DisabledError, "int64"),
    ("dtype-to-jax", lambda: interop.to_jax(torch.ones(4, dtype=torch.complex32)),
     interop.errors.UnsupportedDtypeError, "complex32"),
    ("dtype-to-torch", lambda: interop.to_torch(jnp.zeros(4, jnp.int4)),
     interop.errors.UnsupportedDtypeError, "int4"),
    ("stream-type", lambda: interop.to_jax(_view(), stream=object()),
     interop.errors.StreamTypeError, "stream"),
    ("stream-on-cpu", lambda: interop.to_torch(_array(), stream=0),
     interop.errors.StreamDeviceError, "stream should be None on cpu"),
    ("conjugate", lambda: interop.to_jax(torch.ones(2, dtype=torch.complex64).conj()),
     interop.errors.ConjugateBitError, "conjugate bit"),
    ("negative", lambda: interop.to_jax(torch.ones(2)._neg_view()), interop.errors.NegativeBitError,
     "negative bit"),
    ("grad", lambda: interop.to_jax(torch.ones(2, requires_grad=True)),
     interop.errors.GradientTrackedError, "requires grad"),
    ("tracer", lambda: jax.jit(interop.to_torch)(jnp.ones(3)), TypeError, "tracer"),
    ("jax-call-input", lambda: interop.jax_call(lambda x: x)(_view()[::2]),
     interop.errors.UnsupportedLayoutError, "JAX said:"),
]  # fmt: skip


@PATHS
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize(
    ("call", "error", "fragment"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_the_traceback_starts_with_our_error(private, call, error, fragment):
    with handoff_path(private), pytest.raises(error) as info:
        call()
    assert fragment in str(info.value), str(info.value)
    _assert_clean(info.value)
    if error is not TypeError:
        last = traceback.format_exception(info.value)[-1]
        assert last.startswith(f"interop.errors.{error.__name__}: "), last


def test_a_deleted_array_is_refused_cleanly():
    array = _array()
    array.delete()
    with pytest.raises(interop.errors.DeletedArrayError) as info:
        interop.to_torch(array)
    _assert_clean(info.value)
