"""Contracts of ``jax_call`` that a planted-bug round found unchecked: a result that is
its input shares the input's version counter, forward-mode tangents of an input that does
not require grad beside one that does, plans and caches keyed by all they depend on."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64
from torch.autograd import forward_ad

import interop


def test_a_differentiated_input_returned_as_is_shares_its_version_counter():
    """The result over the input's bytes is the input again (a view of it): a write to it
    is a write to the input, which a backward that saved the input must refuse."""
    v = torch.tensor([0.5, 1.0], requires_grad=True)
    same, sine = interop.jax_call(lambda v: (v, jnp.sin(v)))(v)
    assert same.data_ptr() == v.data_ptr()
    with torch.no_grad():
        same.mul_(2.0)  # rewrites v's bytes
    assert same._version == v._version
    with pytest.raises(RuntimeError, match="inplace operation"):
        sine.sum().backward()


@pytest.mark.parametrize("jitted", [True, False], ids=["jitted", "eager"])
def test_a_tangent_beside_an_input_that_requires_grad(jitted):
    """Forward mode and reverse mode in one call: the input that only carries a tangent is
    differentiated too (its tangent reaches the result), and the one that requires grad
    still gets its gradient."""
    mul = interop.jax_call(jax.jit(lambda a, b: a * b) if jitted else (lambda a, b: a * b))
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b, tb = torch.tensor([3.0, 4.0]), torch.tensor([1.0, 10.0])
    with forward_ad.dual_level():
        out = mul(a, forward_ad.make_dual(b, tb))
        tangent = forward_ad.unpack_dual(out).tangent
    assert tangent is not None and tangent.tolist() == [1.0, 20.0]
    out.sum().backward()
    assert a.grad.tolist() == [3.0, 4.0]


def test_which_results_have_a_cotangent_is_read_per_backward():
    """One jitted function, the same shapes: a backward through both results gives w its
    gradient, one through the first only gives w torch's None, in either order (what
    reaches an input depends on which results torch gave a cotangent for)."""
    f = interop.jax_call(jax.jit(lambda x, w: (jnp.sin(x), w * 2)))

    def grads(both):
        x, w = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
        a, b = f(x, w)
        (a.sum() + b.sum() if both else a.sum()).backward()
        return w.grad

    assert grads(both=False) is None
    assert grads(both=True).tolist() == [2.0] * 3
    assert grads(both=False) is None


def test_a_constant_the_backward_also_reads_is_copied():
    """An unjitted function returning a constant it closes over that its backward reads
    too (a residual of ``x * table``, found among the results): the result gets a buffer
    of its own, so an in-place op on it cannot rewrite the constant (and the backward,
    which reads that result, refuses as for any overwritten output)."""
    table = jnp.arange(3.0)
    scaled = interop.jax_call(lambda x: (x * table, table))
    x = torch.ones(3, requires_grad=True)
    product, kept = scaled(x)
    with torch.no_grad():
        kept.add_(100.0)
    assert table.tolist() == [0.0, 1.0, 2.0]
    assert scaled(x)[1].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(RuntimeError, match="inplace operation"):
        product.sum().backward()


def test_a_differentiable_backward_gives_none_where_only_an_ignored_result_reaches():
    """create_graph=True: w reaches only the result the loss ignores, so torch's None, as
    the first-order backward gives (not JAX's zeros, which a second-order gradient would
    then tie to w)."""
    f = interop.jax_call(jax.jit(lambda x, w: (jnp.sin(x), w * 2)))
    x, w = torch.zeros(3, requires_grad=True), torch.ones(3, requires_grad=True)
    first, _ = f(x, w)
    gx, gw = torch.autograd.grad(first.sum(), [x, w], create_graph=True, allow_unused=True)
    assert gw is None
    assert gx.tolist() == [1.0] * 3 and gx.requires_grad


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
def test_x64_on_accepts_a_64_bit_numpy_argument(grad):
    """Only x64 off makes JAX narrow a 64-bit NumPy value: with it on, it is passed."""
    call = interop.jax_call(jax.jit(lambda x, n: x * n))
    with enable_x64():
        x = torch.ones(1, dtype=torch.float64, requires_grad=grad)
        out = call(x, np.array([2**40 + 5], np.int64))
        assert out.dtype == torch.float64 and out.item() == 2.0**40 + 5


@pytest.mark.parametrize("requires_grad", [True, False], ids=["grad", "no-grad"])
def test_a_jax_array_argument_returned_as_is_comes_back_as_a_copy(requires_grad):
    """An eager function returning a JAX array it was passed (not a tensor): the result is
    a tensor of its own, with grad on as off, so an in-place op on it leaves the JAX array
    (which JAX takes as immutable) as it was."""
    passthrough = interop.jax_call(lambda x, c: (x * 1, c))
    c = jnp.arange(4.0)
    _, got = passthrough(torch.ones(4, requires_grad=requires_grad), c)
    with torch.no_grad():
        got.add_(100.0)
    assert c.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert got.tolist() == [100.0, 101.0, 102.0, 103.0]
