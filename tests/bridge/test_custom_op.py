"""The custom op functional_ws::jax_call on its own: descriptions, torch's op checks, the
op's contract (no aliasing), its fake implementation's refusals, its autograd."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch
from conftest import enable_x64

import interop
from interop._bridge import _custom_op


@pytest.mark.parametrize(
    "tree",
    [
        ((), {}),
        ((1, 2.5, "s", None, True), {"k": -3}),
        (([1, (2, [3])],), {"a": {"b": None}}),
        ((torch.ones(1), [torch.zeros(2), 4]), {"t": torch.ones(3)}),
    ],
    ids=["empty", "constants", "nested", "tensors"],
)
def test_describe_then_rebuild_gives_the_tree_back(tree):
    tensors, ints, floats = [], [], []
    structure = _custom_op.describe(tree, tensors, ints, floats)
    hash(structure)  # a constant Dynamo can put in a graph
    assert all(isinstance(t, torch.Tensor) for t in tensors)
    assert all(type(f) is float for f in floats) and "2.5" not in repr(structure)
    rebuilt = _custom_op.rebuild(structure, iter(tensors), iter(ints), iter(floats))
    assert repr(rebuilt) == repr(tree)


@pytest.mark.parametrize("leaf", [jnp.ones(2), object(), (1).__class__], ids=["jax", "obj", "cls"])
def test_leaves_the_op_cannot_carry_are_described_as_none(leaf):
    assert _custom_op.describe(((torch.ones(1), [leaf]), {}), [], [], []) is None


def _mixed(w, x, n):
    # The float result first: opcheck sums the results in place, starting from the first.
    return {"a": jnp.tanh(x @ w) * n, "b": jnp.argmax(x, axis=1)}


def test_torch_s_op_checks_pass():
    key = _custom_op.add_entry(jax.jit(_mixed), ("tuple", ("T", "T", "I")), jitted=True)
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(4, 3, generator=generator, requires_grad=True)
    x = torch.randn(5, 4, generator=generator, requires_grad=True)
    results = torch.library.opcheck(_custom_op.jax_call_op, (key, [w, x], [3], []))
    assert set(results.values()) == {"SUCCESS"}, results


def test_results_never_alias_the_inputs_or_each_other():
    key = _custom_op.add_entry(lambda x: (x, x * 2, x * 2), ("tuple", ("T",)), jitted=False)
    x = torch.ones(4)
    results = _custom_op.jax_call_op(key, [x], [], [])
    pointers = [x.data_ptr(), *(r.data_ptr() for r in results)]
    assert len(set(pointers)) == len(pointers)
    assert [r.tolist() for r in results] == [[1.0] * 4, [2.0] * 4, [2.0] * 4]


def test_the_fake_implementation_refuses_float64_with_x64_off():
    key = _custom_op.add_entry(jnp.sin, ("tuple", ("T",)), jitted=False)
    with pytest.raises(interop.errors.X64DisabledError):
        _custom_op.jax_call_op(key, [torch.empty(2, dtype=torch.float64, device="meta")], [], [])


def test_a_result_the_graph_cannot_rebuild_is_refused_clearly():
    key = _custom_op.add_entry(lambda x: jax.tree_util.Partial(jnp.add, x), ("tuple", ("T",)),
                               jitted=False)  # fmt: skip
    with pytest.raises(interop.errors.UnsupportedPytreeError, match="tuples, lists or dicts"):
        _custom_op.jax_call_op(key, [torch.empty(2, device="meta")], [], [])


def test_a_result_structure_an_int_decides_names_the_int_when_compiled():
    # The number of results (their dtypes and ranks) is in the key of the compiled call, so
    # an int that decides it compiles per value; a structure that differs in names only
    # (the same leaves) cannot be told apart by the key: refused, naming the int.
    heads = interop.jax_call(lambda a, n: tuple(a * i for i in range(n)))
    compiled = torch.compile(lambda a, n: heads(a, n), backend="eager")
    x = torch.ones(3)
    assert len(compiled(x, 2)) == len(heads(x, 2)) == 2
    got = compiled(x, 3)
    assert [t.tolist() for t in got] == [t.tolist() for t in heads(x, 3)]
    named = interop.jax_call(lambda a, n: {"first" if n == 1 else "second": a})
    renamed = torch.compile(lambda a, n: named(a, n), backend="eager")
    assert list(renamed(x, 1)) == ["first"]
    with pytest.raises(interop.errors.UnsupportedPytreeError, match="value of an int or float"):
        renamed(x, 2)


def test_fake_and_real_results_agree_on_dict_order():
    fn = lambda x: {"b": x * 2, "a": x.sum()}  # noqa: E731
    key = _custom_op.add_entry(fn, ("tuple", ("T",)), jitted=False)
    fake = _custom_op.jax_call_op(key, [torch.empty(3, device="meta")], [], [])
    real = _custom_op.jax_call_op(key, [torch.ones(3)], [], [])
    assert [f.shape for f in fake] == [r.shape for r in real] == [(), (3,)]


def test_the_op_differentiates_to_second_order():
    key = _custom_op.add_entry(
        jax.jit(lambda w, x, n: (jnp.sin(x @ w) * n, jnp.argmax(x))),
        ("tuple", ("T", "T", "I")),
        jitted=True,
    )
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(3, 2, dtype=torch.float64, generator=generator, requires_grad=True)
    x = torch.randn(4, 3, dtype=torch.float64, generator=generator, requires_grad=True)
    with enable_x64():
        first = lambda w, x: _custom_op.jax_call_op(key, [w, x], [2], [])[0]  # noqa: E731
        assert torch.autograd.gradcheck(first, (w, x))
        assert torch.autograd.gradgradcheck(first, (w, x))


def test_the_op_s_backward_refuses_overwritten_inputs():
    key = _custom_op.add_entry(lambda x: (x * x,), ("tuple", ("T",)), jitted=False)
    x = torch.ones(3, requires_grad=True)
    h = x * 1
    (y,) = _custom_op.jax_call_op(key, [h], [], [])
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_the_op_differentiates_without_ints_too():
    key = _custom_op.add_entry(jnp.sin, ("tuple", ("T",)), jitted=False)
    x = torch.zeros(3, requires_grad=True)
    (y,) = _custom_op.jax_call_op(key, [x], [], [])
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]


def test_a_new_compile_reads_the_result_dtype_the_function_returns_now():
    # The results' shapes and dtypes were kept per inputs: a config changed between two
    # compilations in one process gave the graph the old dtype, and it dropped a .float().
    import types

    config = types.SimpleNamespace(dtype=jnp.float32)
    cast = interop.jax_call(lambda x: (x * 2).astype(config.dtype))
    x = torch.ones(4)
    assert torch.compile(lambda x: cast(x), backend="aot_eager")(x).dtype == torch.float32
    config.dtype = jnp.bfloat16
    torch._dynamo.reset()
    out = torch.compile(lambda x: cast(x).float() + 0.5, backend="aot_eager")(x)
    assert out.dtype == torch.float32 and out.tolist() == [2.5] * 4
