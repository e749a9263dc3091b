"""The JAX side of the differentiable call: where residuals come from, the cotangents'
conventions, the backward's cache."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from interop._bridge import _vjp


def _plan(fn, n_diff=1, *, jitted=True):
    _, treedef = jax.tree_util.tree_flatten((tuple(range(n_diff)), {}))
    return _vjp.Plan(fn, _vjp.Signature(treedef, (_vjp.DIFF,) * n_diff, ()), jitted=jitted)


@pytest.mark.parametrize("jitted", [True, False], ids=["jitted", "eager"])
@pytest.mark.parametrize(
    ("fn", "n_diff", "sources"),
    [
        (lambda a, b: a * b, 2, {(_vjp.INPUT, 0), (_vjp.INPUT, 1)}),
        (jnp.exp, 1, {(_vjp.OUTPUT, 0)}),
        (jnp.sin, 1, {(_vjp.KEPT, 0)}),
    ],
    ids=["inputs", "output", "kept"],
)
def test_residuals_are_sorted_by_source(fn, n_diff, sources, jitted):
    plan = _plan(fn, n_diff, jitted=jitted)
    _, residuals = plan.forward([jnp.full(3, 0.5 + i) for i in range(n_diff)], [])
    assert set(residuals.info.where) == sources
    assert len(residuals.kept) == sum(kind == _vjp.KEPT for kind, _ in sources)


def test_the_jitted_backward_is_made_once_per_residual_structure():
    plan = _plan(jnp.sin)
    infos = {id(plan.forward([jnp.ones(3)], [])[1].info) for _ in range(3)}
    assert len(infos) == 1  # jit hands back the same description each call
    _, residuals = plan.forward([jnp.ones(3)], [])
    kinds = (_vjp.GIVEN,)
    backward = plan.backward(residuals.info, kinds, (True,))
    assert backward is plan.backward(residuals.info, kinds, (True,))


def test_a_gradient_nobody_needs_is_not_computed():
    plan = _plan(lambda a, b: jnp.sin(a) * b, n_diff=2)
    inputs = [jnp.full(2, 0.0), jnp.full(2, 5.0)]
    outs, residuals = plan.forward(inputs, [])
    sources = {_vjp.KEPT: residuals.kept, _vjp.INPUT: inputs, _vjp.OUTPUT: outs}
    leaves = [sources[kind][index] for kind, index in residuals.info.where]
    backward = plan.backward(residuals.info, (_vjp.GIVEN,), (False, True))
    got = backward(leaves, [jnp.ones(2)])
    assert got[0] is None and got[1].tolist() == [0.0, 0.0]
    both = plan.backward(residuals.info, (_vjp.GIVEN,), (True, True))
    compiled = [b.lower(leaves, [jnp.ones(2)]).compile().as_text() for b in (backward, both)]
    products = [text.count("multiply(") for text in compiled]
    assert products[0] < products[1]  # XLA drops what the unneeded gradient needed


def test_cotangents_conjugate_broadcast_and_fill():
    avals = [((2, 2), jnp.complex64), ((2,), jnp.float32), ((3,), jnp.int32)]
    kinds = [_vjp.GIVEN, _vjp.ZERO, _vjp.FLOAT0]
    given, zero, none = _vjp.cotangents(avals, kinds, [jnp.full((1, 2), 1 + 2j, jnp.complex64)])
    assert given.shape == (2, 2) and np.all(np.asarray(given) == 1 - 2j)
    assert zero.tolist() == [0.0, 0.0] and none.dtype == jax.dtypes.float0


def test_static_results_are_kept_aside():
    plan = _plan(lambda a: {"y": a * 2, "label": "kept", "none": None})
    _, residuals = plan.forward([jnp.ones(2)], [])
    assert residuals.info.outputs.rebuild(["Y"]) == {"y": "Y", "label": "kept", "none": None}
