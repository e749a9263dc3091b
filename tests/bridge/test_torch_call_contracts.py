"""torch_call contracts the other torch_call tests left unchecked (found by planting bugs):
the one-result checks, pytree results under vmap, every input's write check, the fallback's
negative-bit results, 64-bit NumPy arguments with x64 on, the bounded failure store."""

from __future__ import annotations

import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64
from support.torch_call import F32, bridge_tensor_locals, path, spec  # noqa: F401  (path: a fixture)

import interop
from interop import errors
from interop._bridge import _torch_callback

# ----- one result: the short check checks what the long one does -----

ONE_RESULT_BROKEN = [
    ("shape-broadcastable", lambda x: x[:1] * 2, errors.ResultShapeError,
     r"shape \(1,\) at result, expected \(4,\)"),
    ("device", lambda x: torch.zeros(4, device="meta"), errors.ResultDeviceError,
     r"on meta at result, expected cpu"),
    ("sparse", lambda x: x.to_sparse(), errors.ResultLayoutError,
     r"layout torch.sparse_coo at result, expected a dense"),
]  # fmt: skip


@pytest.mark.parametrize(
    "fn, error, match", [case[1:] for case in ONE_RESULT_BROKEN],
    ids=[case[0] for case in ONE_RESULT_BROKEN],
)  # fmt: skip
@pytest.mark.usefixtures("path")
def test_a_single_result_breaking_its_promise_is_refused_and_writes_nothing(
    monkeypatch, fn, error, match
):
    """One promised array takes the short check: a result broadcastable to the promised
    shape (which copy_ would spread silently), on another device, or sparse, is refused as a
    pytree result is."""
    writes = []
    monkeypatch.setattr(_torch_callback, "_write", lambda *a: writes.append(a))
    with pytest.raises(error, match=match):
        interop.torch_call(fn, spec((4,)))(jnp.ones(4, F32))
    assert writes == []


# ----- 64-bit NumPy arguments -----


@pytest.mark.usefixtures("path")
def test_numpy_64_bit_arguments_cross_whole_with_x64_on():
    """The refusal of NumPy int64/float64 arguments is for x64 off only."""
    big = 2**40 + 5
    with enable_x64():
        call = interop.torch_call(lambda i: i * 2, spec((2,), jnp.int64))
        out = call(np.array([big, -big], np.int64))
        assert out.dtype == jnp.int64
        assert np.asarray(out).tolist() == [2 * big, -2 * big]
        scaled = interop.torch_call(lambda x, s: x * s, lambda x, s: x)
        got = scaled(jnp.ones(2, jnp.float64), np.float64(1e300))
        assert np.asarray(got).tolist() == [1e300, 1e300]


# ----- vmap: every result of a pytree gets the batch axes -----


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("method", ["expand_dims", "broadcast_all"])
def test_vmap_adds_the_batch_axes_to_every_result_of_a_pytree(method):
    """The long check (several results) expects the leading axes vmap added, as the short
    one does: the other vmap tests have one result only."""
    layer = interop.torch_call(
        lambda x: {"double": x * 2, "total": x.sum(-1)},
        lambda x: {"double": spec(x.shape), "total": spec(x.shape[:-1])},
        vmap_method=method,
    )
    xs = jnp.arange(12, dtype=F32).reshape(3, 4)
    out = jax.vmap(layer)(xs)
    np.testing.assert_allclose(out["double"], np.asarray(xs) * 2)
    np.testing.assert_allclose(out["total"], np.asarray(xs).sum(-1))


# ----- results the fallback must copy out -----


@pytest.mark.usefixtures("path")
def test_a_result_with_the_negative_bit_crosses_with_its_values():
    """``z.conj().imag`` is a lazily negated view (``is_neg()``): the fallback resolves it
    before NumPy (which refuses it), as it resolves a conjugate view."""

    def fn(x):
        result = torch.complex(x, x * 3).conj().imag
        assert result.is_neg()
        return result

    x = jnp.arange(4, dtype=F32)
    call = interop.torch_call(fn, spec((4,)))
    for got in (call(x), jax.jit(call)(x)):
        np.testing.assert_array_equal(np.asarray(got), -3 * np.asarray(x))


# ----- every input is checked, not the first only -----


@pytest.mark.usefixtures("path")
def test_writing_into_any_input_is_refused_naming_it():
    def fn(x, extras):
        extras["y"].add_(1)
        return x * 2

    call = interop.torch_call(fn, lambda x, extras: x)
    with pytest.raises(errors.InputWrittenError, match=r"wrote into input args\[1\]\['y'\]"):
        call(jnp.ones(3, F32), {"y": jnp.ones(3, F32)})


@pytest.mark.usefixtures("path")
def test_a_later_result_requiring_grad_through_parameters_warns():
    """The forward warns for whichever result requires grad through closed-over tensors."""
    weight = torch.nn.Parameter(torch.ones(3))
    call = interop.torch_call(lambda x: (x * 2, x * weight), lambda x: (x, x))
    with pytest.warns(errors.DroppedGradientWarning, match=r"result\[1\] of"):
        call(jnp.ones(3, F32))


# ----- the store of failures for the eager wrapper -----


@pytest.mark.usefixtures("path")
def test_an_eager_failure_is_raised_itself_when_the_store_is_full():
    """Failures raised under jit fill the bounded store; the newest (an eager call's, taken
    back at once) survives the bound, the oldest go."""

    def fails(x):
        raise KeyError("no such expert")

    call = interop.torch_call(fails, spec((2,)))
    jitted = jax.jit(call)
    for _ in range(_torch_callback.KEPT_FAILURES + 1):
        with pytest.raises(jax.errors.JaxRuntimeError):
            jitted(jnp.ones(2, F32))
    with pytest.raises(KeyError, match="no such expert"):
        call(jnp.ones(2, F32))


@pytest.mark.usefixtures("path")
def test_an_eager_failure_reaches_no_tensor_over_xlas_buffers_through_the_bridge():
    """The eager wrapper raises fn's own exception: its traceback goes from the caller to
    fn's frames, past none of the callback's (whose tensors alias XLA's buffers, reused once
    the call returns); fn's own frames keep their locals for a debugger."""

    def fn(x):
        doubled = x * 2
        raise ValueError(f"boom {doubled.shape}")

    with pytest.raises(ValueError, match="boom") as caught:
        interop.torch_call(fn, spec((2,)))(jnp.ones(2, F32))
    files = [frame.filename for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert not any(name.endswith("_torch_callback.py") for name in files)
    assert bridge_tensor_locals(caught.value) == []


# ----- the expand_dims note is for a mapped backward only -----


@pytest.mark.usefixtures("path")
def test_a_backward_failure_of_an_unmapped_expand_dims_call_has_no_vmap_note():
    def fn(x):
        if x.requires_grad:  # the backward's run only
            raise ValueError("only in the backward")
        return x * 2

    layer = interop.torch_call(fn, lambda x: x, vmap_method="expand_dims")
    with pytest.raises(jax.errors.JaxRuntimeError, match="only in the backward") as caught:
        jax.block_until_ready(jax.grad(lambda x: layer(x).sum())(jnp.ones(3, F32)))
    assert "vmap_method='expand_dims'" not in str(caught.value)


# ----- the backward records whatever the caller's grad mode -----


@pytest.mark.usefixtures("path")
def test_gradients_under_the_callers_torch_no_grad():
    """The docstring's promise: the backward records even under the caller's
    ``torch.no_grad()`` (tested for ``inference_mode`` only elsewhere)."""
    layer = interop.torch_call(lambda x: torch.sin(x) * 2, lambda x: x)
    x = jnp.linspace(-1, 1, 4, dtype=F32)
    with torch.no_grad():
        grad = jax.grad(lambda x: layer(x).sum())(x)
        jitted = jax.jit(jax.grad(lambda x: layer(x).sum()))(x)
        assert not torch.is_grad_enabled()
    np.testing.assert_allclose(grad, 2 * np.cos(np.asarray(x)), rtol=1e-6)
    np.testing.assert_allclose(jitted, 2 * np.cos(np.asarray(x)), rtol=1e-6)
