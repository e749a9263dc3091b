"""torch_call: torch code inside JAX, eagerly and under jit, zero-copy where jax allows."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64
from support.torch_call import F32, path, spec  # noqa: F401  (path: a fixture)

import interop
from interop._bridge import _torch_callback


@pytest.mark.usefixtures("path")
def test_eager_and_jitted_calls_match_torch():
    def layer(x, w):
        return torch.tanh(x @ w)

    call = interop.torch_call(layer, lambda x, w: spec((x.shape[0], w.shape[1])))
    x = jnp.linspace(-1, 1, 12, dtype=F32).reshape(4, 3)
    w = jnp.arange(6, dtype=F32).reshape(3, 2) / 10
    expected = torch.tanh(torch.tensor(np.asarray(x)) @ torch.tensor(np.asarray(w))).numpy()
    np.testing.assert_allclose(call(x, w), expected, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(call)(x, w), expected, rtol=1e-6)
    inside = jax.jit(lambda x, w: call(x * 2, w) + 1)(x, w)  # part of a bigger computation
    np.testing.assert_allclose(inside, np.asarray(call(x * 2, w)) + 1, rtol=1e-6)


@pytest.mark.usefixtures("path")
def test_pytrees_and_keyword_arguments_cross_as_given():
    seen = {}

    def fn(params, x, *, scale):
        seen["types"] = (type(params["w"]), type(x), type(scale))
        return {"y": params["w"] * x * scale, "n": (x > 0).sum().to(torch.int32)}

    call = interop.torch_call(fn, {"y": spec((3,)), "n": spec((), jnp.int32)})
    out = call({"w": jnp.full(3, 2.0)}, jnp.array([1.0, -1.0, 2.0]), scale=jnp.float32(3))
    assert seen["types"] == (torch.Tensor, torch.Tensor, torch.Tensor)
    np.testing.assert_allclose(out["y"], [6.0, -6.0, 12.0])
    assert out["n"] == 2 and out["n"].dtype == jnp.int32


@pytest.mark.usefixtures("path")
def test_a_callable_promise_sees_the_arguments_shapes_and_runs_once_per_signature():
    traced, ran = [], []

    def promise(x):
        traced.append((x.shape, x.dtype))
        return spec(x.shape, x.dtype)

    def fn(x):
        ran.append(tuple(x.shape))
        return x * 2

    call = interop.torch_call(fn, promise)
    for _ in range(3):
        call(jnp.ones(4, F32))
    call(jnp.ones(5, F32))
    call(jnp.ones(5, F32))
    assert traced == [((4,), np.dtype("float32")), ((5,), np.dtype("float32"))]
    assert ran == [(4,)] * 3 + [(5,)] * 2  # fn runs every call; tracing once per shape


def test_inputs_and_results_alias_xlas_buffers(monkeypatch):
    """buffer_callback: fn reads the input buffer itself, and the result JAX returns is the
    buffer torch wrote (no copy either way)."""
    if not _torch_callback.use_buffers:
        pytest.skip("the pure_callback fallback copies by design")
    pointers = {}

    def fn(x):
        pointers["input"] = x.data_ptr()
        return x + 1

    written = []
    original_write = _torch_callback._write

    def spy(targets, values):
        written.extend(t.data_ptr() for t in targets)
        original_write(targets, values)

    monkeypatch.setattr(_torch_callback, "_write", spy)
    x = jnp.arange(1024, dtype=F32)
    out = interop.torch_call(fn, spec((1024,)))(x)
    assert pointers["input"] == x.unsafe_buffer_pointer()
    assert written == [out.unsafe_buffer_pointer()]
    np.testing.assert_array_equal(out, np.arange(1024) + 1)


def test_the_fallback_hands_fn_host_tensors_and_keeps_every_dtype(monkeypatch):
    monkeypatch.setattr(_torch_callback, "use_buffers", False)
    dtypes = [jnp.bfloat16, jnp.float16, jnp.int8, jnp.uint8, jnp.bool_, jnp.float8_e4m3fn]
    for dtype in dtypes:
        x = jnp.arange(6).astype(dtype)
        out = interop.torch_call(lambda t: t.clone(), spec((6,), dtype))(x)
        assert out.dtype == dtype
        np.testing.assert_array_equal(np.asarray(out), np.asarray(x))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.int8, jnp.bool_, jnp.uint32])
@pytest.mark.usefixtures("path")
def test_dtypes_cross_bit_for_bit(dtype):
    x = (jnp.arange(8) % 3).astype(dtype)
    out = jax.jit(interop.torch_call(lambda t: t.clone(), spec((8,), dtype)))(x[::-1])
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x)[::-1])


@pytest.mark.usefixtures("path")
def test_inputs_are_ready_when_fn_reads_them():
    """CPU ordering: fn runs after the computation producing its input, dispatched
    asynchronously just before (eagerly) or earlier in the same jitted computation."""
    slow = jax.jit(lambda a: jax.lax.fori_loop(0, 30, lambda i, acc: acc @ a / 64, a))
    a = jnp.full((64, 64), 1.0, F32)
    expected = np.asarray(slow(a))[0, :4] * 2
    call = interop.torch_call(lambda x: x[0, :4] * 2, spec((4,)))
    for _ in range(5):
        np.testing.assert_allclose(call(slow(a)), expected, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(lambda a: call(slow(a)))(a), expected, rtol=1e-6)


@pytest.mark.usefixtures("path")
def test_64_bit_values_cross_whole_with_x64_on():
    big, huge = 2**40 + 5, 1e300
    with enable_x64():
        call = interop.torch_call(
            lambda i, f: (i * 2, f / 10), (spec((2,), jnp.int64), spec((2,), jnp.float64))
        )
        i, f = call(jnp.array([big, -big], jnp.int64), jnp.array([huge, -huge], jnp.float64))
        assert i.dtype == jnp.int64 and f.dtype == jnp.float64
        assert np.asarray(i).tolist() == [2 * big, -2 * big]
        assert np.asarray(f).tolist() == [huge / 10, -huge / 10]


@pytest.mark.usefixtures("path")
def test_scratch_from_the_workspace_inside_fn_is_on_the_inputs_device():
    interop.init_workspace_manager("cpu")
    try:
        devices = []

        def fn(x):
            (scratch,) = interop.current_workspace_manager().get_simultaneous(
                (tuple(x.shape), x.dtype)
            )
            devices.append(scratch.device)
            torch.mul(x, 3, out=scratch)
            return scratch + 1

        call = jax.jit(interop.torch_call(fn, spec((16,))))
        out = call(jnp.arange(16, dtype=F32))
        assert devices == [torch.device("cpu")]
        np.testing.assert_array_equal(out, np.arange(16) * 3 + 1)
    finally:
        interop.reset_workspace_manager()


@pytest.mark.usefixtures("path")
def test_fn_sees_the_callers_ubatch_and_lane():
    """On CPU XLA runs the callback on the calling thread, so the caller's slot context
    reaches fn (on a GPU this is checked by benchmarks/gpu_check.py)."""
    slots = []

    def fn(x):
        slots.append(interop.current_slot())
        return x

    call = jax.jit(interop.torch_call(fn, spec((2,))))
    with interop.use_workspace_ubatch(1):
        call(jnp.ones(2, F32))
    call(jnp.zeros(2, F32))
    assert slots == [(1, 0), (0, 0)]
