"""The compiled path's contracts (``jax_call`` under ``torch.compile``: the custom op, its
keys, ``run_eagerly_under_compile``) that bugs planted in it showed untested: results of
one array are two buffers, an int static in the backward too, a complex result's
cotangent, a bool stays a bool, a broadcast cotangent is not copied, a marked class's
static and class methods, keys that depend on nothing else the process did. Each test
fails with its planted bug."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

import interop
from interop._bridge import _custom_op


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_result_returned_twice_comes_back_as_two_buffers_when_compiled(backend):
    """The op's results may not alias each other (a custom op's contract; the eager call
    gives each its own buffer): an in-place op on one changed the other."""
    twice = interop.jax_call(lambda x: (lambda y: (y, y))(x * 2))
    compiled = torch.compile(lambda x: twice(x), backend=backend, fullgraph=True)
    first, second = compiled(torch.ones(3))
    assert first.data_ptr() != second.data_ptr()
    first.add_(1)
    assert second.tolist() == [2.0, 2.0, 2.0]
    direct = _custom_op.add_entry(
        lambda x: (lambda y: (y, y))(x * 2), ("tuple", ("T",)), jitted=False
    )
    a, b = _custom_op.jax_call_op(direct, [torch.ones(3)], [], [])
    assert a.data_ptr() != b.data_ptr()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_int_that_decides_a_shape_differentiates_when_compiled(backend):
    """An int argument reaches the function as a Python int in the compiled backward too
    (the backward's jit keeps the ints static): a function slicing by it, static in its own
    jit, crashed the compiled backward with a tracer where it needs a value."""
    head = interop.jax_call(jax.jit(lambda x, n: jnp.tanh(x[:n]) * 2, static_argnums=1))

    def loss(x, n):
        return (head(x, n) ** 2).sum()

    generator = torch.Generator().manual_seed(0)
    x0 = torch.randn(6, generator=generator)
    got, want = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    compiled = torch.compile(loss, backend=backend, fullgraph=True)
    compiled(got, 4).backward()
    loss(want, 4).backward()
    torch.testing.assert_close(got.grad, want.grad)
    assert got.grad[4:].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_complex_result_gets_its_cotangent_when_compiled(backend):
    """A complex result is differentiable (inexact): its cotangent reaches the JAX
    backward in the compiled graph as in the eager call (dropped, the gradient was None)."""
    rotate = interop.jax_call(jax.jit(lambda x: x * jnp.complex64(1 + 2j)))

    def loss(x):
        return torch.view_as_real(rotate(x)).pow(2).sum()

    x0 = torch.linspace(-1, 1, 4)
    got, want = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    torch.compile(loss, backend=backend, fullgraph=True)(got).backward()
    loss(want).backward()
    assert got.grad is not None
    torch.testing.assert_close(got.grad, want.grad)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_bool_argument_reaches_the_function_as_a_bool_when_compiled(backend):
    """A bool is a constant of the call, not an int through the op: as an int the function
    saw 1 for True (a mask of int32 where the eager call gives bool)."""
    masked = interop.jax_call(lambda x, keep: (x * 2, jnp.full(x.shape, keep)))
    compiled = torch.compile(lambda x, keep: masked(x, keep), backend=backend, fullgraph=True)
    x = torch.ones(3)
    for keep in (True, False):
        doubled, mask = compiled(x, keep)
        assert mask.dtype == masked(x, keep)[1].dtype == torch.bool
        assert mask.tolist() == [keep] * 3 and doubled.tolist() == [2.0] * 3


def test_a_broadcast_cotangent_goes_to_the_compiled_backward_compact_not_copied():
    """``.sum()``'s backward hands a stride-0 cotangent: compact, JAX aliases it (and
    broadcasts inside); handed over as is, every step copied a cotangent of the result's
    size (counted in COTANGENT_COPIES)."""
    from interop._bridge import _exchange

    sin = interop.jax_call(jax.jit(jnp.sin))
    compiled = torch.compile(lambda x: sin(x).sum(), backend="aot_eager", fullgraph=True)
    x = torch.linspace(-1, 1, 64).reshape(8, 8).requires_grad_()
    before = _exchange.COTANGENT_COPIES.count
    compiled(x).backward()
    assert _exchange.COTANGENT_COPIES.count == before
    torch.testing.assert_close(x.grad, torch.cos(x.detach()))


def test_static_and_class_methods_of_a_marked_class_run_eagerly_too():
    """``run_eagerly_under_compile`` marks the function under a ``staticmethod`` or
    ``classmethod`` (its ``__func__``): the descriptor itself has no code to mark, and
    Dynamo traced into the method. (No marked class of the package has one today.)"""
    from interop._compile import run_eagerly_under_compile

    @run_eagerly_under_compile
    class Scratch:
        @staticmethod
        def size(n: int) -> int:
            return n * 2

        @classmethod
        def make(cls) -> Scratch:
            return cls()

    assert Scratch.size._torchdynamo_disable and Scratch.make.__func__._torchdynamo_disable


_CFG = __import__("types").SimpleNamespace(scale=2.0)
scale = jnp.zeros(3)  # a global that shares the attribute's name; the function never reads it


def _scaled(x):
    return x * _CFG.scale


def test_a_fingerprint_reads_only_the_globals_a_function_loads(monkeypatch):
    """An attribute's name (``_CFG.scale``) is no read of the global ``scale``: rebinding
    that global changed the function's key (a warm cache of every graph calling it
    missed, in every process that happened to hold another value there)."""
    from interop._bridge import _functions

    before = _functions.describe(_scaled)
    monkeypatch.setitem(globals(), "scale", jnp.zeros((5, 5)))
    assert _functions.describe(_scaled) == before


def test_a_function_s_number_depends_on_no_other_function_the_process_keyed_first():
    """The number in a key counts only the live functions of the same fingerprint: from a
    process-wide counter, a process that traced another graph first (an eval step before
    the training step) named the same function otherwise, and missed the warm cache."""
    from interop._bridge import _functions

    others = [jax.jit(lambda x, k=k: x + k) for k in range(3)]  # other fingerprints
    for other in others:  # keyed first
        _functions.function_for(other).op_key  # noqa: B018
    unique = jax.jit(lambda x: x * 1234.5 - 0.25)  # a fingerprint no other function has
    assert _functions.function_for(unique).op_key.endswith("#0")
    twin = jax.jit(lambda x: x * 1234.5 - 0.25)  # the same code: the next number
    assert _functions.function_for(twin).op_key.endswith("#1")


_SETTINGS = {"dtype": jnp.float32}


def _reads_its_dtype_from_a_setting(x):  # unjitted: its Python runs at every call
    return (x * 1.5).astype(_SETTINGS["dtype"])


@pytest.mark.parametrize("change", ["x64", "setting"])
def test_a_compiled_graph_refuses_results_of_other_dtypes_than_it_was_traced_for(change):
    """A graph's kernels read the op's results as the dtypes traced: with JAX's x64 turned
    on since (``jax.enable_x64``), or a function reading its dtype from a setting that
    changed, inductor read float64 bytes as float32 (wrong numbers; the reverse corrupted
    the heap). The op refuses such results, naming what changed; the next call under the
    traced settings runs."""
    if change == "x64":
        layer = interop.jax_call(jax.jit(lambda x: (x * 1.5).astype(float)))
        changed = jax.enable_x64(True)
    else:
        layer = interop.jax_call(_reads_its_dtype_from_a_setting)
        changed = _setting(dtype=jnp.bfloat16)
    compiled = torch.compile(lambda x: layer(x) * 2 + 1, backend="inductor")
    x = torch.ones(4)
    assert compiled(x).tolist() == [4.0] * 4
    with changed, pytest.raises(interop.errors.LoadedGraphError, match="traced") as caught:
        compiled(x)
    assert "float32" in str(caught.value), caught.value
    assert compiled(x).tolist() == [4.0] * 4


class _setting:
    def __init__(self, **values):
        self.values = values

    def __enter__(self):
        self.old = dict(_SETTINGS)
        _SETTINGS.update(self.values)

    def __exit__(self, *exc):
        _SETTINGS.clear()
        _SETTINGS.update(self.old)
