"""torch_call under jax.vmap: vmap_method as in jax.pure_callback; None refuses vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from support.torch_call import F32, path, spec  # noqa: F401  (path: a fixture)

import interop
from interop import errors

METHODS = ["sequential", "expand_dims", "broadcast_all"]
XS = jnp.linspace(-1, 1, 12, dtype=F32).reshape(3, 4)  # a batch of 3
W = jnp.linspace(0.5, 2, 4, dtype=F32)


def _layer(method, seen):
    def fn(x, w):
        seen.append((tuple(x.shape), tuple(w.shape)))
        return torch.tanh(x * w)

    # the promise is per element; vmap adds the batch axis
    return interop.torch_call(fn, lambda x, w: spec(x.shape), vmap_method=method)


@pytest.mark.usefixtures("path")
def test_jacrev_works_with_the_default_the_pullback_runs_once_per_row():
    """``jax.jacrev`` maps the pullback alone (one cotangent per row), which needs no
    promise about fn's batch axes; mapping fn itself is still refused."""
    calls = []

    def fn(x):
        calls.append(tuple(x.shape))
        return torch.sin(x)

    layer = interop.torch_call(fn, lambda x: x)
    x = jnp.linspace(-1, 1, 3, dtype=F32)
    expected = np.diag(np.cos(np.asarray(x)))
    np.testing.assert_allclose(jax.jacrev(layer)(x), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jax.jit(jax.jacrev(layer))(x), expected, rtol=1e-6, atol=1e-7)
    assert set(calls) == {(3,)}  # every run of fn saw one unbatched element
    with pytest.raises(errors.VmapNotAllowedError):
        jax.vmap(jax.grad(lambda x: layer(x).sum()))(XS[:, :3])


def test_vmap_is_refused_by_default_naming_the_argument():
    layer = interop.torch_call(lambda x: x * 2, lambda x: x)
    with pytest.raises(errors.VmapNotAllowedError, match=r"vmap_method=None.*'sequential'"):
        jax.vmap(layer)(XS)
    with pytest.raises(NotImplementedError):  # the class JAX's own callbacks raise
        jax.jit(jax.vmap(layer))(XS)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("method", METHODS)
def test_each_method_maps_as_pure_callback_does(method):
    seen = []
    out = jax.vmap(_layer(method, seen), in_axes=(0, None))(XS, W)
    np.testing.assert_allclose(out, jnp.tanh(XS * W), rtol=1e-6)
    expected = {
        "sequential": [((4,), (4,))] * 3,  # once per element
        "expand_dims": [((3, 4), (1, 4))],  # unbatched w gets an axis of 1
        "broadcast_all": [((3, 4), (3, 4))],  # every argument gets the batch axis
    }[method]
    assert seen == expected


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("method", METHODS)
def test_per_example_gradients_under_vmap_equal_pure_jax(method):
    def loss(layer):
        return lambda x, w: jnp.sum(layer(x, w) ** 2)

    layer = _layer(method, [])
    got = jax.vmap(jax.grad(loss(layer), argnums=(0, 1)), in_axes=(0, None))(XS, W)
    expected = jax.vmap(jax.grad(loss(lambda x, w: jnp.tanh(x * w)), argnums=(0, 1)),
                        in_axes=(0, None))(XS, W)  # fmt: skip
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("method", METHODS)
def test_gradient_of_a_vmapped_call_sums_over_the_batch(method):
    layer = _layer(method, [])
    got = jax.jit(jax.grad(lambda w: jnp.sum(jax.vmap(layer, in_axes=(0, None))(XS, w) ** 2)))(W)
    expected = jax.grad(lambda w: jnp.sum(jnp.tanh(XS * w) ** 2))(W)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("method", ["expand_dims", "broadcast_all"])
def test_nested_vmaps_add_every_leading_axis_to_the_expected_result_shape(method):
    """Two nested jax.vmap give fn two leading axes, and the result check expects both."""
    seen = []

    def fn(x):
        seen.append(tuple(x.shape))
        return x * 2

    layer = interop.torch_call(fn, lambda x: x, vmap_method=method)
    xs = jnp.arange(24, dtype=F32).reshape(2, 3, 4)
    np.testing.assert_allclose(jax.vmap(jax.vmap(layer))(xs), np.asarray(xs) * 2)
    assert seen == [(2, 3, 4)]


@pytest.mark.usefixtures("path")
def test_expand_dims_batch_is_broadcast_over_the_inputs_not_taken_from_the_first():
    """With "expand_dims" and an unbatched first argument (axis of 1), the batch is the others'."""
    layer = interop.torch_call(
        lambda w, x: torch.tanh(x * w), lambda w, x: spec(x.shape), vmap_method="expand_dims"
    )
    out = jax.vmap(layer, in_axes=(None, 0))(W, XS)
    np.testing.assert_allclose(out, jnp.tanh(XS * W), rtol=1e-6)


@pytest.mark.usefixtures("path")
def test_fns_failure_in_an_expand_dims_backward_says_the_backward_broadcasts():
    """A function that runs with expand_dims' size-1 axes (a 0-d scale becomes (1,)) but not
    with every argument batched fails in the backward, which broadcasts them all: the
    error says so (it was torch's bare broadcasting message)."""
    layer = interop.torch_call(lambda a, s: a * 2 + s, lambda a, s: a, vmap_method="expand_dims")
    scale = jnp.float32(1.5)
    assert jax.vmap(layer, (0, None))(XS, scale).shape == XS.shape  # the forward runs
    loss = lambda xs, s: jax.vmap(layer, (0, None))(xs, s).sum()  # noqa: E731
    with pytest.raises(
        jax.errors.JaxRuntimeError, match=r"(?s)must match.*vmap_method='expand_dims'"
    ):
        jax.grad(loss, (0, 1))(XS, scale)
