"""torch.func and forward-mode AD through ``jax_call``, each checked against the same model
written in pure torch: grad, vjp, jacrev, jacfwd, hessian, functional_call, vmap (one JAX
call for the whole batch), per-sample gradients, jvp and dual tensors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64
from torch.autograd import forward_ad
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

import interop

CALLS: list[tuple[int, ...]] = []


def _jax_layer(w, x, scale):
    CALLS.append(x.shape)  # once per trace (jitted) or per call (eager)
    return jnp.tanh(x @ w) * scale


def _torch_layer(w, x, scale):
    return torch.tanh(x @ w) * scale


LAYERS = {"jitted": interop.jax_call(jax.jit(_jax_layer)), "eager": interop.jax_call(_jax_layer)}


@pytest.fixture(params=list(LAYERS))
def layer(request):
    return LAYERS[request.param]


def _data(batch: int = 5):
    generator = torch.Generator().manual_seed(batch)
    w = torch.randn(4, 3, generator=generator, dtype=torch.float32)
    x = torch.randn(batch, 4, generator=generator)
    y = torch.randn(batch, 3, generator=generator)
    return w, x, y


def _loss(layer_fn):
    def loss(w, x, y):
        return ((layer_fn(w, x, 2.0) - y) ** 2).mean()

    return loss


def _close(got, want):
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert isinstance(g, torch.Tensor) and g.shape == w.shape
        assert torch.allclose(g, w, atol=1e-5, rtol=1e-4), (g, w)


# ----- forward mode -----


def test_a_dual_tensor_keeps_its_tangent(layer):
    w, x, _ = _data()
    tangent = torch.randn_like(x)
    with forward_ad.dual_level():
        out = layer(w, forward_ad.make_dual(x, tangent), 2.0)
        got = forward_ad.unpack_dual(out).tangent
        want = forward_ad.unpack_dual(_torch_layer(w, forward_ad.make_dual(x, tangent), 2.0))
    assert got is not None
    _close(got, want.tangent)


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jitted"])
def test_a_dual_tensor_through_a_function_returning_its_input(jitted):
    """An eager function returning its argument as is gives back a view of the input, and
    torch then wants a view as its tangent (it raised "the jvp is not returning a view")."""
    fn = lambda a: (a, jnp.sin(a))  # noqa: E731
    layer = interop.jax_call(jax.jit(fn) if jitted else fn)
    x, tangent = torch.linspace(-1, 1, 3), torch.full((3,), 2.0)
    with forward_ad.dual_level():
        same, sine = layer(forward_ad.make_dual(x, tangent))
        got = [forward_ad.unpack_dual(t).tangent for t in (same, sine)]
    torch.testing.assert_close(got[0], tangent)
    torch.testing.assert_close(got[1], torch.cos(x) * tangent)
    torch.testing.assert_close(jvp(lambda a: layer(a)[0], (x,), (tangent,))[1], tangent)


def test_inputs_sharing_bytes_keep_their_own_tangents():
    """Two duals of one tensor share its bytes: the result that is the second must carry the
    second's tangent (matched by the array JAX hands back, not by address), and a result
    beside a plain input returned as is keeps its tangent."""
    x, t1, t2 = torch.ones(2), torch.full((2,), 1.0), torch.full((2,), 5.0)
    second = interop.jax_call(lambda a, b: b)
    beside = interop.jax_call(lambda plain, y: (plain, y * 1))
    with forward_ad.dual_level():
        got = forward_ad.unpack_dual(
            second(forward_ad.make_dual(x, t1), forward_ad.make_dual(x, t2))
        ).tangent
        plain, scaled = beside(x.clone(), forward_ad.make_dual(x, t1))
        tangents = [forward_ad.unpack_dual(t).tangent for t in (plain, scaled)]
    torch.testing.assert_close(got, t2)
    assert tangents[0] is None or not tangents[0].any()  # zero: nothing flows there
    torch.testing.assert_close(tangents[1], t1)


def test_a_dual_tensor_that_requires_grad(layer):
    w, x, _ = _data()
    w.requires_grad_()
    tangent = torch.randn_like(w)
    with forward_ad.dual_level():
        out = layer(forward_ad.make_dual(w, tangent), x, 2.0)
        got = forward_ad.unpack_dual(out).tangent
    _, want = jvp(lambda w: _torch_layer(w, x, 2.0), (w.detach(),), (tangent,))
    _close(got, want)


def test_torch_func_jvp(layer):
    w, x, _ = _data()
    tangents = (torch.randn_like(w), torch.randn_like(x))
    got = jvp(lambda w, x: layer(w, x, 2.0), (w, x), tangents)
    want = jvp(lambda w, x: _torch_layer(w, x, 2.0), (w, x), tangents)
    _close(got, want)


# ----- reverse mode through torch.func -----


def test_grad_and_vjp(layer):
    w, x, y = _data()
    _close(grad(_loss(layer), argnums=(0, 1))(w, x, y),
           grad(_loss(_torch_layer), argnums=(0, 1))(w, x, y))  # fmt: skip
    cotangent = torch.randn(5, 3)
    out, pullback = vjp(lambda w: layer(w, x, 2.0), w)
    want_out, want_pullback = vjp(lambda w: _torch_layer(w, x, 2.0), w)
    _close((out, pullback(cotangent)), (want_out, want_pullback(cotangent)))


@pytest.mark.parametrize("transform", [jacrev, jacfwd], ids=["jacrev", "jacfwd"])
def test_jacobians(layer, transform):
    w, x, _ = _data(2)
    got = transform(lambda w, x: layer(w, x, 2.0), argnums=(0, 1))(w, x)
    _close(got, transform(lambda w, x: _torch_layer(w, x, 2.0), argnums=(0, 1))(w, x))


def test_hessian(layer):
    w, x, y = _data(2)
    _close(hessian(_loss(layer))(w, x, y), hessian(_loss(_torch_layer))(w, x, y))


def test_functional_call_of_a_module_with_a_jax_layer(layer):
    class Model(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 3))
            self.fn = fn

        def forward(self, x):
            return self.fn(self.w, x, 2.0).sum()

    ours, ref = Model(layer), Model(_torch_layer)
    w, x, _ = _data()
    params = {"w": w}
    _close(grad(lambda p: functional_call(ours, p, (x,)))(params),
           grad(lambda p: functional_call(ref, p, (x,)))(params))  # fmt: skip


# ----- vmap: one JAX call for the whole batch -----


def test_vmap_calls_jax_once_for_the_batch(layer):
    w, x, _ = _data(8)
    CALLS.clear()
    got = vmap(lambda x: layer(w, x, 2.0))(x.reshape(8, 1, 4))
    _close(got, _torch_layer(w, x, 2.0).reshape(8, 1, 3))
    assert len(CALLS) <= 1  # the eager function once (batched), the jitted one traced once


def test_vmap_over_a_weight_dimension_that_is_not_first(layer):
    w, x, _ = _data()
    ws = torch.stack([w, w * 2, -w], dim=2)  # batch on the last dimension
    got = vmap(lambda w: layer(w, x, 2.0), in_dims=2, out_dims=1)(ws)
    want = vmap(lambda w: _torch_layer(w, x, 2.0), in_dims=2, out_dims=1)(ws)
    _close(got, want)


def test_per_sample_gradients(layer):
    w, x, y = _data(16)
    per_sample = vmap(grad(_loss(layer)), in_dims=(None, 0, 0))
    want = vmap(grad(_loss(_torch_layer)), in_dims=(None, 0, 0))(w, x, y)
    _close(per_sample(w, x, y), want)


def test_nested_vmap(layer):
    w, x, _ = _data(6)
    xs = x.reshape(2, 3, 1, 4)
    got = vmap(vmap(lambda x: layer(w, x, 2.0)))(xs)
    _close(got, _torch_layer(w, xs, 2.0))


def test_vectorized_jacobian_and_batched_grads(layer):
    w, x, _ = _data(2)
    f = lambda w: layer(w, x, 2.0)  # noqa: E731
    got = torch.autograd.functional.jacobian(f, w, vectorize=True)
    want = torch.autograd.functional.jacobian(lambda w: _torch_layer(w, x, 2.0), w)
    _close(got, want)
    w = w.clone().requires_grad_()
    out = f(w)
    cotangents = torch.randn(4, *out.shape)
    (batched,) = torch.autograd.grad(out, w, cotangents, is_grads_batched=True)
    ref = w.detach().clone().requires_grad_()
    (want_batched,) = torch.autograd.grad(
        _torch_layer(ref, x, 2.0), ref, cotangents, is_grads_batched=True
    )
    _close(batched, want_batched)


def test_integer_results_under_transforms():
    split = interop.jax_call(jax.jit(lambda x: (jnp.sin(x), jnp.argmax(x, axis=-1))))
    x = torch.randn(3, 4)
    values, index = vmap(split)(x)
    _close(values, torch.sin(x))
    assert index.dtype == torch.int32 and index.tolist() == x.argmax(-1).tolist()
    _close(grad(lambda x: split(x)[0].sum())(x), torch.cos(x))
    _, tangent = jvp(lambda x: split(x)[0], (x,), (torch.ones_like(x),))
    _close(tangent, torch.cos(x))


def test_batched_gradients_of_gradients_are_refused_clearly():
    w, x, _ = _data(2)
    w = w.requires_grad_()
    out = LAYERS["jitted"](w, x, 2.0)
    with pytest.raises(NotImplementedError, match="Use torch\\.func"):
        torch.autograd.grad(out, w, torch.randn(3, *out.shape), is_grads_batched=True,
                            create_graph=True)  # fmt: skip


@pytest.mark.parametrize(
    "fn",
    [lambda w, x: jnp.sin(x @ w) * 2, lambda w, x: jnp.exp(x @ w) * jnp.conj(x @ w)],
    ids=["real", "complex"],
)
def test_gradcheck_forward_mode_and_batched_gradients_in_float64(fn):
    dtype = torch.complex128 if "conj" in repr(fn.__code__.co_names) else torch.float64
    generator = torch.Generator().manual_seed(3)
    w = torch.randn(3, 2, dtype=dtype, generator=generator, requires_grad=True)
    x = torch.randn(2, 3, dtype=dtype, generator=generator, requires_grad=True)
    call = interop.jax_call(jax.jit(fn))
    with enable_x64():
        assert torch.autograd.gradcheck(
            call, (w, x), check_forward_ad=True, check_batched_grad=True,
            check_batched_forward_grad=False, check_backward_ad=True,
        )  # fmt: skip
        assert torch.autograd.gradgradcheck(call, (w, x), check_fwd_over_rev=True,
                                            check_rev_over_rev=True)  # fmt: skip


def test_the_legacy_vmap_in_forward_mode_is_refused_naming_torch_func(layer):
    w, x, _ = _data(2)
    with pytest.raises(NotImplementedError, match=r"Use torch\.func"):
        torch.autograd.functional.jacobian(
            lambda w: layer(w, x, 2.0), w, vectorize=True, strategy="forward-mode"
        )


def test_linearize_is_refused_naming_jvp_and_jacfwd(layer):
    # make_fx, which linearize traces its jvp_fn with, kept the JAX call as a constant:
    # the jvp_fn ignored its tangent. torch.func.jvp gives what pure torch's linearize does.
    w, x, _ = _data(3)
    _, torch_jvp_fn = torch.func.linearize(lambda w: _torch_layer(w, x, 2.0), w)
    with pytest.raises(interop.errors.FxTraceError, match=r"make_fx.*torch\.func\.jvp.*jacfwd"):
        torch.func.linearize(lambda w: layer(w, x, 2.0), w)
    for tangent in (torch.ones_like(w), torch.arange(12.0).reshape(4, 3)):
        _, got = jvp(lambda w: layer(w, x, 2.0), (w,), (tangent,))
        _close(got, torch_jvp_fn(tangent))


@jax.custom_vjp
def _sin_with_host_derivative(x):
    return jnp.sin(x)


def _host_derivative_fwd(x):
    return jnp.sin(x), x


def _host_derivative_bwd(x, ct):  # the derivative computed on the host: JAX cannot linearize it
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return (jax.pure_callback(lambda v: np.cos(v).astype(v.dtype), spec, x) * ct,)


_sin_with_host_derivative.defvjp(_host_derivative_fwd, _host_derivative_bwd)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jitted"])
def test_first_order_transforms_of_a_function_whose_backward_jax_cannot_differentiate(jit):
    """torch.func makes the backward a node of its own; JAX cannot linearize it, which a
    first-order gradient does not need. A second order raises JAX's own error."""

    def loss(x):
        return jnp.sum(_sin_with_host_derivative(x))

    call = interop.jax_call(jax.jit(loss) if jit else loss)
    x = torch.linspace(-1.0, 1.0, 4)
    expected = torch.cos(x)
    torch.testing.assert_close(grad(call)(x), expected)
    torch.testing.assert_close(vjp(call, x)[1](torch.tensor(1.0))[0], expected)
    leaf = x.clone().requires_grad_()
    (first,) = torch.autograd.grad(call(leaf), [leaf], create_graph=True)
    torch.testing.assert_close(first.detach(), expected)
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
        grad(lambda v: grad(call)(v).sum())(x)
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
        first.sum().backward()
