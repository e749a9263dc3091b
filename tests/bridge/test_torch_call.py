"""torch_call: torch code inside JAX, eagerly and under jit, zero-copy where jax allows."""

from __future__ import annotations

import _thread
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64
from support.torch_call import F32, path, spec  # noqa: F401  (path: a fixture)

import interop
from interop import _context
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


def _unfinished() -> jax.Array:
    """16 floats still being computed when this returns (JAX dispatches asynchronously: a
    1024-cubed matrix product takes tens of milliseconds here)."""
    a = jnp.full((1024, 1024), 1 / 1024, F32)
    return jnp.tanh(a @ a @ a).sum(0)[:16]


@pytest.mark.usefixtures("path")
def test_an_eager_call_on_an_input_still_computed_runs_fn_here_and_raises_its_error():
    seen = []

    def fn(x):
        seen.append((interop.current_slot(), threading.current_thread()))
        if len(seen) == 2:
            raise ValueError("boom")
        return x * 2

    call = interop.torch_call(fn, spec((16,)))
    _unfinished().block_until_ready()  # compiled: the next one is still running at the call
    with interop.use_workspace_ubatch(1):
        x = _unfinished()
        np.testing.assert_allclose(call(x), 2 * np.asarray(x), rtol=1e-6)
        with pytest.raises(ValueError, match="boom"):  # here, not when the result is read
            call(_unfinished())
    assert seen == [((1, 0), threading.current_thread())] * 2


@pytest.mark.usefixtures("path")
def test_under_jit_fn_run_on_xlas_own_thread_gets_no_scratch_rather_than_a_guessed_slot():
    interop.init_workspace_manager("cpu", num_ubatches=2)
    try:
        threads = []

        def fn(x):
            threads.append(threading.current_thread())
            (scratch,) = interop.current_workspace_manager().get_simultaneous(((16,), x.dtype))
            scratch.copy_(x)
            return scratch * 2

        call = jax.jit(interop.torch_call(fn, spec((16,))))
        call(_unfinished().block_until_ready())  # both compiled: the next call dispatches
        with interop.use_workspace_ubatch(1):
            x = _unfinished()
            try:
                out = np.asarray(call(x))
            except Exception as err:  # XLA ran fn later, on a thread of its own
                assert "SlotUnknownError" in str(err) and "use_workspace_ubatch" in str(err)
                assert threads[-1] is not threading.current_thread()
            else:  # XLA ran fn now, here: in ubatch 1, as asked
                assert threads[-1] is threading.current_thread()
                np.testing.assert_allclose(out, 2 * np.asarray(x), rtol=1e-6)
    finally:
        interop.reset_workspace_manager()


def _on_a_thread_python_did_not_start(body):
    """Run ``body`` on a thread ``_thread`` starts (``threading`` did not: as XLA's)."""
    done, failures = threading.Event(), []

    def run():
        try:
            body()
        except BaseException as err:  # reported to the test, not to the thread
            failures.append(err)
        finally:
            done.set()

    _thread.start_new_thread(run, ())
    assert done.wait(30)
    if failures:
        raise failures[0]


def _signature(shape):
    """What tracing ``fn(x)`` promising one float32 result of ``shape`` fixes."""
    trees = jax.tree_util.tree_structure(((0,), {})), jax.tree_util.tree_structure(0)
    return _torch_callback.Signature(
        "fn", trees[0], ("[0]",), (shape,), trees[1], ("",), (shape,), (torch.float32,)
    )


def _in_callback(fn):
    """``fn(torch.ones(2))`` as a callback's body runs it (in the caller's slot)."""
    sig = _signature((2,))
    return _torch_callback.in_callers_slot(sig, _torch_callback._call_fn, fn, sig, [torch.ones(2)])


def test_on_xlas_thread_a_one_slot_workspace_serves_its_only_slot():
    interop.init_workspace_manager("cpu")
    served = []

    def fn(x):
        served.extend(interop.current_workspace_manager().get_simultaneous(((2,), torch.float32)))
        return x

    try:
        _on_a_thread_python_did_not_start(lambda: _in_callback(fn))
        assert served[0].shape == (2,)
    finally:
        interop.reset_workspace_manager()


def test_a_thread_python_did_not_start_keeps_the_slot_it_chose_and_refusals_are_recorded():
    interop.init_workspace_manager("cpu", num_ubatches=2)
    ws, slots = interop.current_workspace_manager(), []

    def fn(x):
        slots.append(interop.current_slot())
        ws.get_simultaneous(((2,), torch.float32))
        return x

    def chosen():
        with interop.use_workspace_ubatch(1):
            _in_callback(fn)

    try:
        _on_a_thread_python_did_not_start(chosen)
        assert slots == [(1, 0)]

        def scratch_only(x):
            ws.get_simultaneous(((2,), torch.float32))
            return x

        with ws.recording() as history, pytest.raises(interop.errors.SlotUnknownError):
            _on_a_thread_python_did_not_start(lambda: _in_callback(scratch_only))
        assert [r.error.split(":")[0] for r in history[1:]] == ["SlotUnknownError"]
    finally:
        interop.reset_workspace_manager()


@pytest.mark.usefixtures("path")
def test_an_eager_vmap_on_an_input_still_computed_runs_fn_here():
    interop.init_workspace_manager("cpu", num_ubatches=2)
    threads = []

    def fn(x):
        threads.append(threading.current_thread())
        (scratch,) = interop.current_workspace_manager().get_simultaneous(((16,), x.dtype))
        return scratch.copy_(x) * 2

    call = interop.torch_call(fn, spec((16,)), vmap_method="sequential")
    try:
        with interop.use_workspace_ubatch(1):
            ready = jnp.stack([_unfinished(), _unfinished()]).block_until_ready()
            jax.vmap(call)(ready)  # compiled: the next call dispatches at once
            x = jnp.stack([_unfinished(), _unfinished()])
            np.testing.assert_allclose(jax.vmap(call)(x), 2 * np.asarray(x), rtol=1e-6)
        assert threads == [threading.current_thread()] * 4
    finally:
        interop.reset_workspace_manager()


def test_on_xlas_thread_a_workspace_of_several_slots_refuses_until_fn_selects_one():
    interop.init_workspace_manager("cpu", num_ubatches=2)
    found = []

    def fn(x):
        try:
            interop.current_workspace_manager().get_simultaneous(((2,), torch.float32))
        except interop.errors.SlotUnknownError as err:
            found.append(str(err))
        with interop.use_workspace_ubatch(1):  # chosen by the function: served
            found.extend(
                interop.current_workspace_manager().get_simultaneous(((2,), torch.float32))
            )
        return x

    try:
        _on_a_thread_python_did_not_start(lambda: _in_callback(fn))
        assert "which ubatch and lane the caller meant is unknown" in found[0]
        assert found[1].shape == (2,)
    finally:
        interop.reset_workspace_manager()


def _scratch_doubled(x):
    """``2 * x`` computed into the workspace's scratch, which is the result."""
    (scratch,) = interop.current_workspace_manager().get_simultaneous(((2,), torch.float32))
    return torch.mul(x, 2, out=scratch)


def _scratch_squared(x):
    """``x * x`` through a copy of ``x`` in the workspace's scratch, which autograd saves."""
    (scratch,) = interop.current_workspace_manager().get_simultaneous(((2,), torch.float32))
    return scratch.copy_(x) * x


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_on_xlas_thread_the_only_slot_stays_held_until_the_callback_is_done(monkeypatch, direction):
    """A result that is fn's scratch is read by the write into XLA's buffer, a tensor saved
    for the backward by torch.autograd.grad: both after fn returned. The only slot was let
    go when fn returned, and another device's call overwrote them meanwhile (pmap over two
    devices: 7 wrong results in 20)."""
    interop.init_workspace_manager("cpu")
    held = []
    write = _torch_callback._write

    def recording_write(targets, values):
        held.append(_context._ONLY_SLOT.locked())  # nobody else's block runs in this test
        write(targets, values)

    monkeypatch.setattr(_torch_callback, "_write", recording_write)
    sig, out, x = _signature((2,)), torch.zeros(2), torch.ones(2)
    if direction == "forward":
        callback = _torch_callback.forward_buffers(_scratch_doubled, sig)
        ins = (x,)
    else:  # inputs: the primal, the result's cotangent, the forward's flags
        callback = _torch_callback.backward_buffers(_scratch_squared, sig, (0,), (0,))
        ins = (x, torch.ones(2), torch.ones(1, dtype=torch.bool))  # d(x * x) = 2x
    try:
        _on_a_thread_python_did_not_start(lambda: callback(None, [out], *ins))
        assert held == [True]
        assert out.tolist() == [2.0, 2.0]
        assert not _context._ONLY_SLOT.locked()  # let go at the end
    finally:
        interop.reset_workspace_manager()


def test_on_xlas_thread_the_fallback_hands_back_copies_of_the_only_slots_scratch():
    """pure_callback copies what the callback returns only after it returned, the only slot
    let go: a result that is fn's scratch is copied before. (Another block writes the
    scratch once the callback is over: the first block's result keeps its values.)"""
    interop.init_workspace_manager("cpu")
    callback = _torch_callback.forward_host(_scratch_doubled, _signature((2,)))
    results = []
    try:
        _on_a_thread_python_did_not_start(lambda: results.extend(callback(np.ones(2, np.float32))))
        _on_a_thread_python_did_not_start(lambda: callback(np.full(2, 500, np.float32)))
        assert results[0].tolist() == [2.0, 2.0]
    finally:
        interop.reset_workspace_manager()


def test_on_xlas_thread_the_fallbacks_backward_holds_the_only_slot_until_it_is_done(monkeypatch):
    """The fallback's backward runs fn and torch.autograd.grad, which reads the scratch fn
    saved, in the only slot held (else another device's call overwrote it meanwhile)."""
    interop.init_workspace_manager("cpu")
    held = []
    grad = torch.autograd.grad

    def recording_grad(*args, **kwargs):
        held.append(_context._ONLY_SLOT.locked())  # nobody else's block runs in this test
        return grad(*args, **kwargs)

    sig = _signature((2,))
    callback = _torch_callback.backward_host(_scratch_squared, sig, (0,), (0,))
    x, ct, marks = np.ones(2, np.float32), np.ones(2, np.float32), np.ones(1, bool)
    monkeypatch.setattr(torch.autograd, "grad", recording_grad)
    results = []
    try:
        _on_a_thread_python_did_not_start(lambda: results.extend(callback(x, ct, marks)))
        assert held == [True]
        assert results[0].tolist() == [2.0, 2.0]  # d(x * x) = 2x
        assert not _context._ONLY_SLOT.locked()  # let go at the end
    finally:
        interop.reset_workspace_manager()


@pytest.mark.usefixtures("path")
def test_fn_sees_the_callers_ubatch_and_lane():
    """Inputs computed, XLA runs the callback on the calling thread (on CPU), so the
    caller's slot context reaches fn (on a GPU this is checked by
    benchmarks/gpu_check.py); otherwise see the test above."""
    slots = []

    def fn(x):
        slots.append(interop.current_slot())
        return x

    call = jax.jit(interop.torch_call(fn, spec((2,))))
    with interop.use_workspace_ubatch(1):
        call(jnp.ones(2, F32))
    call(jnp.zeros(2, F32))
    assert slots == [(1, 0), (0, 0)]


def test_the_fallback_returns_a_conjugate_view_result():
    """pure_callback: a result with torch's conjugate bit set crosses as its values."""
    mp = pytest.MonkeyPatch()
    mp.setattr(_torch_callback, "use_buffers", False)
    try:
        z = jnp.array([1 + 2j, -3 - 0.5j], jnp.complex64)
        got = interop.torch_call(lambda z: z.conj(), lambda z: z)(z)
        np.testing.assert_array_equal(got, np.conj(np.asarray(z)))
    finally:
        mp.undo()


def test_the_fallback_hands_fn_tensors_over_writable_host_memory(monkeypatch):
    """pure_callback: a read-only host input is copied before torch wraps it (torch warns,
    once a process, that writing through such a tensor is undefined)."""
    monkeypatch.setattr(_torch_callback, "use_buffers", False)
    wrapped = []
    from_numpy = torch.from_numpy

    def recording(array):
        wrapped.append(array.flags.writeable)
        return from_numpy(array)

    monkeypatch.setattr(torch, "from_numpy", recording)
    x = jnp.arange(4, dtype=F32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns (once a process) over a read-only array
        got = interop.torch_call(torch.sin, lambda x: x)(x)
    np.testing.assert_allclose(got, np.sin(np.arange(4)), rtol=1e-6)
    assert wrapped and all(wrapped)
