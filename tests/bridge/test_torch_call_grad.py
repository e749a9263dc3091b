"""torch_call under jax.grad / jax.vjp: torch.autograd.grad gives JAX's gradients."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64
from support.torch_call import F32, path, spec  # noqa: F401  (path: a fixture)

import interop
from interop import errors


def torch_mlp(x, params):
    return torch.tanh(x @ params["w"] + params["b"]) * params["scale"]


def jax_mlp(x, params):
    return jnp.tanh(x @ params["w"] + params["b"]) * params["scale"]


def _params(dtype=F32):
    key = jax.random.PRNGKey(0)
    return {
        "w": jax.random.normal(key, (3, 4), dtype) / 2,
        "b": jnp.linspace(-1, 1, 4, dtype=dtype),
        "scale": jnp.asarray(1.5, dtype),
    }


def _x(dtype=F32):
    return jax.random.normal(jax.random.PRNGKey(1), (5, 3), dtype)


LAYER = interop.torch_call(torch_mlp, lambda x, p: spec((x.shape[0], 4), x.dtype))


def _loss(layer):
    return lambda x, params: jnp.sum(jnp.sin(layer(x, params)) ** 2)


def _close(got, expected, rtol=1e-5, atol=1e-6):
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=rtol, atol=atol)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_gradients_equal_pure_jax(jit):
    layer = interop.torch_call(torch_mlp, lambda x, p: spec((x.shape[0], 4), x.dtype))
    grad = jax.grad(_loss(layer), argnums=(0, 1))
    reference = jax.grad(_loss(jax_mlp), argnums=(0, 1))
    if jit:
        grad = jax.jit(grad)
    _close(grad(_x(), _params()), reference(_x(), _params()))


@pytest.mark.usefixtures("path")
def test_vjp_with_several_results_and_an_unused_one():
    def fn(x):
        return x.sin(), x.cos() * 2, (x > 0).to(torch.int32)

    layer = interop.torch_call(fn, lambda x: (x, x, spec(x.shape, jnp.int32)))
    x = jnp.linspace(-2, 2, 6, dtype=F32)
    _, vjp = jax.vjp(layer, x)
    (got,) = vjp((jnp.ones(6, F32), jnp.full(6, 0.5, F32), np.zeros(6, jax.dtypes.float0)))
    np.testing.assert_allclose(got, jnp.cos(x) - jnp.sin(x), rtol=1e-6)
    only_first = jax.grad(lambda x: layer(x)[0].sum())(x)  # the cos result: a symbolic zero
    np.testing.assert_allclose(only_first, jnp.cos(x), rtol=1e-6)


@pytest.mark.usefixtures("path")
def test_the_backward_asks_torch_for_every_floating_input_and_jax_keeps_its_own():
    """A hook on each input sees which gradients flow; the forward tracks nothing."""
    tracked, flowed = [], []

    def fn(x, w, steps):
        tracked.append((x.requires_grad, w.requires_grad, steps.requires_grad))
        for name, t in (("x", x), ("w", w)):
            if t.requires_grad:
                t.register_hook(lambda grad, name=name: flowed.append(name))
        return x * w * steps

    layer = interop.torch_call(fn, lambda x, w, s: x)
    x, w, steps = jnp.ones(3, F32), jnp.full(3, 2.0, F32), jnp.arange(3, dtype=jnp.int32)
    g = jax.grad(lambda w: layer(x, w, steps).sum())(w)
    np.testing.assert_allclose(g, [0.0, 1.0, 2.0])
    assert tracked[0] == (False, False, False)  # the forward
    # The backward computes every floating input's gradient (JAX's flags of what it
    # differentiates may be another trace's); JAX keeps w's.
    assert sorted(flowed) == ["w", "x"]


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("route", ["cond", "checkpoint", "scan", "vjp", "vmap"])
def test_gradients_stay_right_after_gradients_by_other_inputs(route):
    """jax 0.10 reuses a custom_vjp forward traced for another input's gradient (its flags
    of what is differentiated stale): the gradient came back zero."""
    layer = interop.torch_call(
        lambda x, w: (torch.sin(x) * w).sum(-1),
        lambda x, w: spec(x.shape[:-1], x.dtype),
        vmap_method="sequential",
    )
    pure = lambda x, w: (jnp.sin(x) * w).sum(-1)  # noqa: E731
    x, w = jnp.arange(20.0, dtype=F32).reshape(5, 4) / 7, jnp.linspace(0.5, 1.5, 4, dtype=F32)

    def by_w(f):
        loss = lambda w: f(x, w).sum()  # noqa: E731
        if route == "cond":
            return jax.grad(lambda w: jax.lax.cond(w[0] > 0, loss, lambda w: (w**2).sum(), w))(w)
        if route == "checkpoint":
            return jax.grad(jax.checkpoint(loss))(w)
        if route == "scan":
            return jax.grad(lambda w: jax.lax.scan(lambda c, _: (c + loss(w), None), 0.0,
                                                   None, length=2)[0])(w)  # fmt: skip
        if route == "vjp":
            return jax.vjp(loss, w)[1](jnp.float32(1.0))[0]
        return jax.grad(lambda w: jax.vmap(f, (0, None))(x[:, None], w).sum())(w)

    jax.grad(lambda w: layer(x, w).sum())(w)  # by w, then by x: two traces of the forward
    jax.grad(lambda x: layer(x, w).sum())(x)
    np.testing.assert_allclose(np.asarray(by_w(layer)), np.asarray(by_w(pure)), rtol=1e-5)


def _through(route, loss, argnums):
    """``jax.grad(loss, argnums)`` taken through ``route``."""
    if route == "checkpoint":
        loss = jax.checkpoint(loss)
    elif route == "cond":
        inner = loss
        loss = lambda x, y: jax.lax.cond(True, inner, lambda x, y: 0.0 * x.sum(), x, y)  # noqa: E731
    grad = jax.grad(loss, argnums)
    return jax.jit(grad) if route == "jit" else grad


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("route", ["grad", "jit", "checkpoint", "cond"])
def test_which_inputs_torch_must_reach_is_decided_by_this_gradient(route):
    """JAX hands a backward the residuals' structure of the forward it traced last (jax
    0.10.2, pure JAX too) while it reuses a forward traced earlier: flags of what JAX
    differentiates carried as that structure were another gradient's. After a gradient by
    x and one by y (its result stopped), a gradient by x of a function ignoring y was
    refused (y unreached), and one by y of a function detaching y came back zero."""
    x, y = jnp.arange(1.0, 4.0, dtype=F32), jnp.arange(4.0, 7.0, dtype=F32)
    ignores_y = interop.torch_call(lambda x, y: x * 2, lambda x, y: x)
    detaches_y = interop.torch_call(lambda x, y: x * 2 + y.detach() * 3, lambda x, y: x)
    # Two traces of each forward, the other input's last: by x, then by y for ignores_y;
    # by y, then by x for detaches_y.
    by_y_stopped = lambda f: lambda x, y: jax.lax.stop_gradient(f(x, y)).sum() + y.sum()  # noqa: E731
    jax.grad(lambda x, y: ignores_y(x, y).sum())(x, y)
    jax.grad(by_y_stopped(ignores_y), 1)(x, y)
    jax.grad(by_y_stopped(detaches_y), 1)(x, y)
    jax.grad(lambda x, y: detaches_y(x, y).sum())(x, y)

    by_x = _through(route, lambda x, y: ignores_y(x, y).sum(), 0)
    np.testing.assert_array_equal(np.asarray(by_x(x, y)), [2.0, 2.0, 2.0])
    by_y = _through(route, lambda x, y: detaches_y(x, y).sum(), 1)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"NoGradientError.*input args\[1\]"):
        by_y(x, y)


@pytest.mark.usefixtures("path")
def test_a_result_made_only_of_inputs_jax_does_not_differentiate_adds_nothing():
    """As in JAX: its cotangent reaches no differentiated input. Not a cut graph."""
    pair = interop.torch_call(
        lambda x, c: (x * 2, c * 3), lambda x, c: (spec(x.shape, x.dtype), spec(c.shape, c.dtype))
    )
    x, c = jnp.ones(3, F32), jnp.arange(3.0, dtype=F32)
    got = jax.grad(lambda x: sum(jnp.sum(r) for r in pair(x, c)))(x)
    np.testing.assert_array_equal(np.asarray(got), [2.0, 2.0, 2.0])


def test_gradients_in_float64_are_exact_to_float64():
    with enable_x64():
        layer = interop.torch_call(torch_mlp, lambda x, p: spec((x.shape[0], 4), x.dtype))
        x, params = _x(jnp.float64), _params(jnp.float64)
        got = jax.jit(jax.grad(_loss(layer), argnums=(0, 1)))(x, params)
        expected = jax.grad(_loss(jax_mlp), argnums=(0, 1))(x, params)
        assert got[0].dtype == jnp.float64
        _close(got, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_half_precision_gradients_equal_pure_jax(dtype):
    """bfloat16 is no NumPy floating type (ml_dtypes' kind "V"): its gradients were zero."""

    def loss(layer):
        return lambda x, params: jnp.sum(layer(x, params).astype(jnp.float32) ** 2)

    layer = interop.torch_call(torch_mlp, lambda x, p: spec((x.shape[0], 4), x.dtype))
    x, params = _x(dtype), _params(dtype)
    got = jax.jit(jax.grad(loss(layer), argnums=(0, 1)))(x, params)
    expected = jax.grad(loss(jax_mlp), argnums=(0, 1))(x, params)
    assert got[0].dtype == dtype and bool(jnp.any(got[0] != 0))
    _close(
        jax.tree.map(lambda a: a.astype(jnp.float32), got),
        jax.tree.map(lambda a: a.astype(jnp.float32), expected),
        rtol=0.05,
        atol=0.05,
    )


@pytest.mark.usefixtures("path")
def test_a_half_precision_result_of_a_float32_input_is_differentiated():
    half = interop.torch_call(lambda t: (t * 3).bfloat16(), lambda t: spec(t.shape, jnp.bfloat16))
    x = jnp.linspace(-2.0, 2.0, 4)
    got = jax.grad(lambda v: half(v).astype(jnp.float32).sum())(x)
    np.testing.assert_array_equal(np.asarray(got), np.full(4, 3.0, np.float32))


@pytest.mark.usefixtures("path")
def test_complex_gradients_follow_jaxs_convention():
    def fn(z, w):
        return z * z * w

    layer = interop.torch_call(fn, lambda z, w: z)

    def loss(f):
        return lambda z, w: jnp.sum(jnp.abs(f(z, w)) ** 2 + jnp.real(f(z, w)))

    z = jnp.array([1 + 2j, -0.5 + 0.25j, 3 - 1j], jnp.complex64)
    w = jnp.array([0.5 - 1j, 2 + 0j, -1 + 1j], jnp.complex64)
    got = jax.grad(loss(layer), argnums=(0, 1))(z, w)
    expected = jax.grad(loss(fn), argnums=(0, 1))(z, w)  # the same code in JAX
    _close(got, expected, rtol=1e-5)
    holo = jax.grad(lambda z: layer(z, w).sum(), holomorphic=True)(z)
    _close(holo, 2 * z * w, rtol=1e-5)


# ----- what torch cannot differentiate: an error, never a silent zero -----


@pytest.mark.usefixtures("path")
def test_an_input_torch_does_not_reach_is_an_error_unless_stopped_in_jax():
    def fn(x, unused):
        return x * 2

    layer = interop.torch_call(fn, lambda x, u: x)
    x, u = jnp.ones(3, F32), jnp.ones(3, F32)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"NoGradientError.*input args\[1\]"):
        jax.grad(lambda x, u: layer(x, u).sum(), argnums=(0, 1))(x, u)
    g = jax.grad(lambda x, u: layer(x, jax.lax.stop_gradient(u)).sum(), argnums=(0, 1))(x, u)
    np.testing.assert_array_equal(g[1], np.zeros(3))  # zero on purpose: JAX's own answer
    np.testing.assert_array_equal(jax.grad(lambda x: layer(x, u).sum())(x), np.full(3, 2.0))


@pytest.mark.usefixtures("path")
def test_an_input_reached_only_through_a_comparison_names_that_cause():
    layer = interop.torch_call(lambda x: (x > 0.5).float(), lambda x: x)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"NoGradientError.*comparisons"):
        jax.grad(lambda x: layer(x).sum())(jnp.ones(3, F32))


@pytest.mark.usefixtures("path")
def test_a_detached_input_is_an_error():
    layer = interop.torch_call(lambda x, y: x + y.detach(), lambda x, y: x)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"input args\[1\].*stop_gradient"):
        jax.grad(lambda y: layer(jnp.ones(2), y).sum())(jnp.ones(2, F32))


@pytest.mark.usefixtures("path")
def test_a_result_without_history_is_an_error_when_its_cotangent_is_nonzero():
    def fn(x):
        with torch.no_grad():  # a kernel without a backward
            cut = x * 3
        return x * 2, cut

    layer = interop.torch_call(fn, lambda x: (x, x))
    x = jnp.ones(3, F32)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"result\[1\].*no autograd history"):
        jax.grad(lambda x: sum(r.sum() for r in layer(x)))(x)
    g = jax.grad(lambda x: layer(x)[0].sum() + jax.lax.stop_gradient(layer(x)[1]).sum())(x)
    np.testing.assert_array_equal(g, np.full(3, 2.0))
    zero_ct = jax.vjp(layer, x)[1]((jnp.ones(3, F32), jnp.zeros(3, F32)))[0]
    np.testing.assert_array_equal(zero_ct, np.full(3, 2.0))  # a zero cotangent is fine


@pytest.mark.usefixtures("path")
def test_a_result_made_only_of_integer_inputs_is_refused_as_a_cut_one_is():
    """torch gives ``mask.float()`` no history, as it gives a cut result: the two cannot be
    told apart, so its nonzero cotangent is refused, naming the cause and stop_gradient."""
    layer = interop.torch_call(
        lambda x, n: (x * 2, n.float()), lambda x, n: (x, spec(n.shape, jnp.float32))
    )
    x, n = jnp.ones(3, F32), jnp.arange(3, dtype=jnp.int32)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"result\[1\].*integer or bool inputs"):
        jax.grad(lambda x: sum(r.sum() for r in layer(x, n)))(x)
    stopped = jax.grad(lambda x: layer(x, n)[0].sum() + jax.lax.stop_gradient(layer(x, n)[1]).sum())
    np.testing.assert_array_equal(stopped(x), np.full(3, 2.0))


@pytest.mark.usefixtures("path")
def test_an_error_inside_the_backward_keeps_fns_frames_in_the_message():
    calls = []

    def fn(x):
        calls.append(1)
        if len(calls) > 1:  # the backward runs fn again
            raise ValueError("backward-only failure")
        return x * 2

    layer = interop.torch_call(fn, lambda x: x)
    with pytest.raises(jax.errors.JaxRuntimeError, match="backward-only failure") as caught:
        jax.grad(lambda x: layer(x).sum())(jnp.ones(2, F32))
    assert "in fn" in str(caught.value)


@pytest.mark.usefixtures("path")
def test_fn_may_close_over_torch_parameters_which_jax_does_not_differentiate():
    weight = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))

    def fn(x):
        return x * weight  # requires grad through weight

    layer = interop.torch_call(fn, lambda x: x)
    x = jnp.array([1.0, 1.0, 2.0], F32)
    with pytest.warns(errors.DroppedGradientWarning):  # said, not silent
        np.testing.assert_array_equal(jax.jit(layer)(x), [1.0, 2.0, 6.0])
        np.testing.assert_array_equal(jax.grad(lambda x: layer(x).sum())(x), [1.0, 2.0, 3.0])
    assert weight.grad is None  # torch.autograd.grad fills only what JAX asked for


@pytest.mark.usefixtures("path")
def test_fn_may_compute_torch_gradients_inside_in_the_forward():
    def inner_gradient(x):  # d/dx sum(x**3), by torch's autograd inside fn
        leaf = x.detach().requires_grad_()
        (grad,) = torch.autograd.grad((leaf**3).sum(), leaf)
        return grad

    layer = jax.jit(interop.torch_call(inner_gradient, lambda x: x))
    np.testing.assert_allclose(layer(jnp.array([1.0, 2.0], F32)), [3.0, 12.0])


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize(
    "second",
    [
        lambda f: jax.hessian(f),
        lambda f: jax.hessian(jax.jit(f)),
        lambda f: jax.jit(jax.hessian(f)),
        lambda f: jax.grad(lambda x: jax.grad(f)(x).sum()),
        lambda f: jax.grad(lambda x: jax.grad(jax.jit(f))(x).sum()),
    ],
    ids=["hessian", "hessian-of-jit", "jit-of-hessian", "grad-of-grad", "grad-of-grad-of-jit"],
)
def test_a_second_derivative_is_refused_naming_torch_call_and_the_way_out(second):
    call = interop.torch_call(torch.sin, spec((3,)))

    def f(x):
        return call(x).sum()

    np.testing.assert_allclose(jax.grad(f)(jnp.ones(3, F32)), np.cos(np.ones(3)), rtol=1e-6)
    with pytest.raises(
        errors.HigherOrderError, match=r"torch_call\(.*sin\) is differentiable once"
    ):
        second(f)(jnp.ones(3, F32))


@pytest.mark.usefixtures("path")
def test_a_hessian_through_a_stopped_result_names_stop_gradient_and_where_it_goes():
    """JAX differentiates the gradient's rules before it sees the stop_gradient: refused,
    with the message saying so; stop_gradient on the input gives pure JAX's hessian."""
    call = interop.torch_call(torch.sin, spec((3,)))
    b = jnp.arange(1.0, 4.0, dtype=F32)
    with pytest.raises(errors.HigherOrderError, match="stop_gradient on the call's inputs"):
        jax.hessian(lambda b: (jax.lax.stop_gradient(call(b)) * b**2).sum())(b)
    mine = jax.hessian(lambda b: (call(jax.lax.stop_gradient(b)) * b**2).sum())(b)
    pure = jax.hessian(lambda b: (jax.lax.stop_gradient(jnp.sin(b)) * b**2).sum())(b)
    np.testing.assert_allclose(mine, pure, rtol=1e-6)


def test_the_sweep_of_traced_calls_tolerates_inserts_from_other_threads(monkeypatch):
    # Past 1024 entries, the sweep of dead ones iterated the live table while other
    # threads' backwards inserted into it: "dictionary changed size during iteration".
    import weakref

    from interop._bridge import _torch_callback

    table: dict = {}

    class InsertsMeanwhile:  # a dead entry whose check lets another thread insert
        def __call__(self):
            table[object()] = lambda: None
            return None

    table.update({i: InsertsMeanwhile() for i in range(1100)})
    monkeypatch.setattr(_torch_callback, "_looked_for_leaves", table)

    class Sig:
        pass

    sig = Sig()
    assert _torch_callback._first_backward(sig) is True
    assert table[id(sig)]() is sig and not any(
        isinstance(v, InsertsMeanwhile) for v in table.values()
    )
    assert _torch_callback._first_backward(sig) is False
    assert isinstance(table[id(sig)], weakref.ReferenceType)


@pytest.mark.usefixtures("path")
def test_a_result_without_history_is_an_error_when_any_cotangent_element_is_nonzero():
    """One nonzero element of a cut-off result's cotangent is enough for NoGradientError."""

    def fn(x):
        with torch.no_grad():
            cut = x * 3
        return x * 2, cut

    layer = interop.torch_call(fn, lambda x: (x, x))
    _, vjp = jax.vjp(layer, jnp.ones(3, F32))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"result\[1\].*no autograd history"):
        jax.block_until_ready(vjp((jnp.ones(3, F32), jnp.array([0.0, 1.0, 0.0], F32))))


@pytest.mark.usefixtures("path")
def test_an_input_reached_only_by_a_result_without_cotangent_gets_a_zero_gradient():
    """x reaches only result[0], whose cotangent is a symbolic zero: its gradient is zero,
    not a NoGradientError."""
    layer = interop.torch_call(lambda x, y: (x * 2, y * 3), lambda x, y: (x, y))
    x, y = jnp.ones(3, F32), jnp.ones(3, F32)
    gx, gy = jax.grad(lambda x, y: layer(x, y)[1].sum(), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, np.zeros(3))
    np.testing.assert_array_equal(gy, np.full(3, 3.0))


@pytest.mark.usefixtures("path")
def test_no_backward_runs_fn_when_no_floating_result_gets_a_cotangent():
    """vjp of the integer result alone (float0 cotangent): a zero gradient, and fn runs
    once (no backward)."""
    calls = []

    def fn(x):
        calls.append(x.requires_grad)
        return x * 2, (x > 0).to(torch.int32)

    layer = interop.torch_call(fn, lambda x: (x, spec(x.shape, jnp.int32)))
    x = jnp.linspace(-1, 1, 4, dtype=F32)
    _, vjp = jax.vjp(lambda x: layer(x)[1], x)
    (g,) = vjp(np.zeros(4, jax.dtypes.float0))
    np.testing.assert_array_equal(g, np.zeros(4))
    assert calls == [False]  # the forward only


@pytest.mark.usefixtures("path")
def test_an_input_returned_as_it_is_passes_its_cotangent_through():
    """fn returning its input itself (a leaf that requires grad, no grad_fn) is differentiated."""
    layer = interop.torch_call(lambda x, y: (x, x * y), lambda x, y: (x, x))
    x, y = jnp.full(3, 2.0, F32), jnp.full(3, 3.0, F32)
    gx = jax.grad(lambda x: layer(x, y)[0].sum() + layer(x, y)[1].sum())(x)
    np.testing.assert_allclose(gx, np.full(3, 4.0))


def _dropped(record):
    return [w for w in record if issubclass(w.category, errors.DroppedGradientWarning)]


@pytest.mark.usefixtures("path")
def test_a_call_whose_results_all_require_grad_through_parameters_warns_once():
    """Several results requiring grad through a closed-over parameter: one warning per call."""
    linear = torch.nn.Linear(3, 3)
    layer = interop.torch_call(lambda x: (linear(x), linear(x) * 2), lambda x: (x, x))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        layer(jnp.ones((2, 3), F32))
    assert len(_dropped(record)) == 1


@pytest.mark.usefixtures("path")
def test_the_backward_looks_for_parameters_once_per_traced_call():
    """Under jit(grad) only the backward runs fn; it warns at its first run, not at every run."""
    linear = torch.nn.Linear(3, 3)
    layer = interop.torch_call(lambda x: linear(x) * 2, lambda x: x)
    grad = jax.jit(jax.grad(lambda x: layer(x).sum()))
    x = jnp.ones((2, 3), F32)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            jax.block_until_ready(grad(x))
    assert len(_dropped(record)) == 1
