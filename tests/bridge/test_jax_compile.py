"""``torch.compile`` around code that calls ``jax_call``, ``to_jax`` and ``to_torch``.

Default mode, in the eager, aot_eager and inductor backends: the eager results, forward and
gradients, with ``jax_call`` inside the graph as the custom op ``functional_ws::jax_call``.
``fullgraph=True``: a loss calling a ``jax_call`` layer compiles whole (static and dynamic
shapes); what cannot be in a graph is refused with advice naming what to do. Few, small
compiles: inductor's are slow (see the durations ``pytest --durations`` reports).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import pytest
import torch
from torch.autograd import forward_ad

import interop
from interop._bridge._custom_op import EAGER_ADVICE, TRACE_FAILED_ADVICE, TRANSFORM_ADVICE
from interop._bridge._handoff import HANDOFF_ADVICE

OP = torch.ops.functional_ws.jax_call.default


@jax.jit
def _layer(params, x, index, scale):
    hidden = jnp.tanh(x @ params["w"] + params["b"])
    return hidden[index] * scale, jnp.argmax(hidden, axis=1)


layer = interop.jax_call(_layer)


def loss(w, b, x, index):
    routed, top = layer({"w": w, "b": b}, x * 2, index, 3)
    return (routed**2).sum() + top.sum()


def handoff(x):
    a = interop.to_jax(x * 2)
    return interop.to_torch(jnp.sin(a) * 2) + 1


def _inputs(n: int):
    generator = torch.Generator().manual_seed(n)
    w = torch.randn(4, 3, generator=generator)
    b = torch.randn(3, generator=generator)
    x = torch.randn(n, 4, generator=generator)
    index = torch.arange(n - 1, -1, -2, dtype=torch.int32)
    return w, b, x, index


def _loss_and_grads(fn, n: int):
    w, b, x, index = _inputs(n)
    leaves = [t.clone().requires_grad_() for t in (w, b, x)]
    value = fn(*leaves, index)
    value.backward()
    return value.detach(), [t.grad for t in leaves]


class _Recorder:
    """A backend that records the graphs' call targets, then hands them to ``backend``."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.targets: list[object] = []

    def __call__(self, gm: torch.fx.GraphModule, inputs: list[object]):
        self.targets += [node.target for node in gm.graph.nodes]
        return torch._dynamo.lookup_backend(self.backend)(gm, inputs)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_default_mode_gives_the_eager_results(backend):
    recorder = _Recorder(backend)
    compiled = torch.compile(loss, backend=recorder)
    for n in (5, 6):  # a new shape: a new specialised graph
        got, got_grads = _loss_and_grads(compiled, n)
        want, want_grads = _loss_and_grads(loss, n)
        assert torch.allclose(got, want, rtol=1e-5)
        for g, w in zip(got_grads, want_grads, strict=True):
            assert torch.allclose(g, w, rtol=1e-5, atol=1e-6)
    assert OP in recorder.targets  # the call is in the graph, not at a graph break
    x = torch.linspace(-1, 1, 5)
    assert torch.allclose(torch.compile(handoff, backend=backend)(x), handoff(x))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_fullgraph_compiles_the_loss_whole(backend):
    compiled = torch.compile(loss, backend=backend, fullgraph=True)
    got, got_grads = _loss_and_grads(compiled, 6)
    want, want_grads = _loss_and_grads(loss, 6)
    assert torch.allclose(got, want, rtol=1e-5)
    assert all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got_grads, want_grads, strict=True))


def test_fullgraph_with_dynamic_shapes_specialises_and_works():
    recorder = _Recorder("aot_eager")
    compiled = torch.compile(loss, backend=recorder, fullgraph=True, dynamic=True)
    for n in (5, 7):
        got, got_grads = _loss_and_grads(compiled, n)
        want, want_grads = _loss_and_grads(loss, n)
        assert torch.allclose(got, want, rtol=1e-5)
        assert all(
            torch.allclose(g, w, atol=1e-6) for g, w in zip(got_grads, want_grads, strict=True)
        )
    assert recorder.targets.count(OP) == 2  # one graph per shape


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_fullgraph_with_a_python_float_that_changes_between_calls(backend):
    """Dynamo makes a float that changed symbolic on its next compile: it goes through the
    op as a value (no constant can hold it), forward and backward."""
    scaled = interop.jax_call(jax.jit(lambda w, s: jnp.sin(w) * s))
    recorder = _Recorder(backend)
    compiled = torch.compile(lambda w, s: scaled(w, s).sum(), backend=recorder, fullgraph=True)
    w = torch.linspace(-1.0, 1.0, 4)
    for s in (0.5, 0.5, 2.0, -3.0):  # a learning rate, a temperature...
        leaf = w.clone().requires_grad_()
        value = compiled(leaf, s)
        value.backward()
        assert torch.allclose(value, torch.sin(w).sum() * s)
        assert torch.allclose(leaf.grad, torch.cos(w) * s)
    assert OP in recorder.targets


def test_fullgraph_refuses_a_jax_array_argument_with_advice():
    w, b, x, index = _inputs(5)
    compiled = torch.compile(
        lambda w, x: layer({"w": w, "b": b}, x, index, 3)[0], backend="eager", fullgraph=True
    )
    with pytest.raises(RuntimeError) as caught:
        compiled(w, jnp.asarray(x.numpy()))
    assert EAGER_ADVICE in str(caught.value)


def test_fullgraph_refuses_the_bare_handoff_with_advice():
    compiled = torch.compile(handoff, backend="eager", fullgraph=True)
    with pytest.raises(RuntimeError) as caught:
        compiled(torch.ones(3))
    assert HANDOFF_ADVICE in str(caught.value)


class _Pair(NamedTuple):
    first: object
    second: object


def _raises(x):
    raise ValueError("the function's own error, at trace time")


TRACE_FAILURES = [
    ("namedtuple-result", lambda x: _Pair(x * 2, x * 3), interop.errors.UnsupportedPytreeError,
     "returned a _Pair, which the compiled graph cannot rebuild"),
    ("fn-raises", _raises, ValueError, "the function's own error"),
]  # fmt: skip


@pytest.mark.parametrize(
    "fn, error, match", [case[1:] for case in TRACE_FAILURES],
    ids=[case[0] for case in TRACE_FAILURES],
)  # fmt: skip
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_trace_failure_is_raised_as_itself_not_wrapped_by_dynamo(backend, fn, error, match):
    """The trace runs inside Dynamo's fake-tensor run, which wrapped its error in a
    TorchRuntimeError: the call runs at a graph break instead, where it raises itself."""
    wrapped = interop.jax_call(jax.jit(fn))
    with pytest.raises(error, match=match):
        torch.compile(lambda x: wrapped(x), backend=backend)(torch.ones(3))
    with pytest.raises(RuntimeError) as caught:
        torch.compile(lambda x: wrapped(x), backend=backend, fullgraph=True)(torch.ones(3))
    assert TRACE_FAILED_ADVICE in str(caught.value)
    # fullgraph=True's error shows the function's own error too, its type named
    named = error.__qualname__ if error.__module__ == "builtins" else f"{error.__module__}."
    assert f"The trace's error: {named}" in str(caught.value)
    assert re.search(match, str(caught.value))


def test_a_fullgraph_error_quotes_each_functions_own_trace_error():
    """Two functions failing differently: each call's fullgraph error quotes its own."""
    for text in ("first failure", "second failure"):

        def fn(x, text=text):
            raise KeyError(text)

        wrapped = interop.jax_call(fn)
        with pytest.raises(RuntimeError, match=f"The trace's error: KeyError: '{text}'"):
            torch.compile(wrapped, backend="eager", fullgraph=True)(torch.ones(2))


class _Unprintable(ValueError):
    def __str__(self):
        raise RuntimeError("no message")


def test_a_trace_error_whose_message_cannot_be_read_still_breaks_the_graph_clearly():
    def fn(x):
        raise _Unprintable()

    wrapped = interop.jax_call(fn)
    with pytest.raises(RuntimeError, match="_Unprintable: <its message could not be read>"):
        torch.compile(wrapped, backend="eager", fullgraph=True)(torch.ones(2))


def test_a_trace_that_failed_before_is_traced_again_and_becomes_the_op_once_it_passes():
    """The failure is the trace's just made, not one kept from an earlier trace: once fn
    traces (what made it raise is gone), fullgraph=True compiles the call as the op."""
    failing = [True]

    def fn(x):
        if failing[0]:
            raise ValueError("not yet")
        return x * 2

    wrapped = interop.jax_call(jax.jit(fn))
    with pytest.raises(ValueError, match="not yet"):
        torch.compile(lambda x: wrapped(x), backend="eager")(torch.ones(3))
    failing[0] = False
    torch._dynamo.reset()
    got = torch.compile(lambda x: wrapped(x), backend="eager", fullgraph=True)(torch.ones(3))
    assert got.tolist() == [2.0] * 3


_scalar_loss = interop.jax_call(jax.jit(lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)))
REVERSE_TRANSFORMS = [
    ("grad", torch.func.grad(_scalar_loss)),
    ("jacrev", torch.func.jacrev(_scalar_loss)),
    ("vmap-of-grad", torch.func.vmap(torch.func.grad(_scalar_loss), in_dims=(None, 0))),
]


@pytest.mark.parametrize(
    "transformed", [case[1] for case in REVERSE_TRANSFORMS],
    ids=[case[0] for case in REVERSE_TRANSFORMS],
)  # fmt: skip
def test_a_torch_func_transform_inside_compile_runs_the_call_eagerly(transformed):
    """The op's autograd is no autograd.Function torch.func can transform (torch 2.13
    refused it: "must override the setup_context staticmethod"): the call runs eagerly at
    a graph break, where the transform's rules run it; fullgraph=True says what to do."""
    w, _, x, _ = _inputs(5)
    got = torch.compile(transformed, backend="aot_eager")(w, x)
    assert torch.allclose(got, transformed(w, x), atol=1e-6)
    torch._dynamo.reset()  # (else the graph compiled above serves the fullgraph call)
    with pytest.raises(RuntimeError) as caught:
        torch.compile(transformed, backend="aot_eager", fullgraph=True)(w, x)
    assert TRANSFORM_ADVICE in str(caught.value)


def test_default_mode_runs_a_jax_array_argument_eagerly():
    w, b, x, index = _inputs(5)
    w.requires_grad_()
    compiled = torch.compile(lambda w, x: layer({"w": w, "b": b}, x, index, 3)[0].sum(),
                             backend="eager")  # fmt: skip
    compiled(w, jnp.asarray(x.numpy())).backward()
    want = w.detach().clone().requires_grad_()
    layer({"w": want, "b": b}, x, index, 3)[0].sum().backward()
    assert torch.allclose(w.grad, want.grad)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_forward_mode_under_compile_keeps_the_tangent(backend):
    """The op has no tangent rule (torch 2.13 then dropped the tangent silently): inside a
    dual level the call runs eagerly, where the jvp rule gives it. Compiled first outside
    one, then called inside one, too."""
    sine = interop.jax_call(jax.jit(jnp.sin))
    compiled = torch.compile(lambda a: sine(a) * 2, backend=backend)
    x, tangent = torch.linspace(-1, 1, 3), torch.full((3,), 0.5)
    torch.testing.assert_close(compiled(x), torch.sin(x) * 2)
    with forward_ad.dual_level():
        out = compiled(forward_ad.make_dual(x, tangent))
        got = forward_ad.unpack_dual(out).tangent
    assert got is not None
    torch.testing.assert_close(got, torch.cos(x) * tangent * 2)


def _inner_gradient(x):
    """d/dx sum(x**3), by torch's autograd inside a torch_call's fn (grad mode turned on:
    a jax_call's forward runs JAX under no_grad, as autograd.Function.forward does)."""
    with torch.enable_grad():
        leaf = x.detach().requires_grad_()
        (grad,) = torch.autograd.grad((leaf**3).sum(), leaf)
    return grad


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_torch_call_inside_a_compiled_jax_call_gives_the_eager_results(backend):
    """The compiled op runs JAX in its kernel, below torch's autograd: fn, called back from
    JAX there, runs with autograd as an eager caller's does, so its backward has a graph
    (it failed with NoGradientError) and torch's autograd inside fn works."""
    scaled_tanh = interop.torch_call(lambda x: torch.tanh(x) * 3, lambda x: x)
    cubed = interop.torch_call(_inner_gradient, lambda x: x)
    mid = interop.jax_call(
        jax.jit(lambda x: jnp.sin(scaled_tanh(x)) + jax.lax.stop_gradient(cubed(x)))
    )
    compiled = torch.compile(mid, backend=backend)
    x = torch.linspace(-1, 1, 5)
    expected, leaf = torch.sin(torch.tanh(x) * 3) + 3 * x**2, x.clone().requires_grad_()
    torch.testing.assert_close(compiled(leaf), expected)
    compiled(leaf).sum().backward()
    tanh = torch.tanh(x)
    torch.testing.assert_close(leaf.grad, torch.cos(tanh * 3) * 3 * (1 - tanh**2))


def _grad_through_a_written_view(x):
    """autograd.grad of a function that writes through a view (ADInplaceOrView's work)."""
    with torch.enable_grad():
        leaf = x.detach().requires_grad_()
        y = leaf * 1.0
        y[:2].mul_(5.0)
        (grad,) = torch.autograd.grad((y * y).sum(), leaf)
    return grad


def _conjugated(x):
    """The imaginary part of a conjugate (the Conjugate key's work): -x."""
    return (torch.complex(x, x).conj() * 1.0).imag.contiguous()


def _func_grad(x):
    """torch.func.grad inside fn (functorch's keys): 3 x**2."""
    return torch.func.grad(lambda t: (t**3).sum())(x)


@pytest.mark.parametrize("fn", [_grad_through_a_written_view, _conjugated, _func_grad])
def test_a_torch_call_inside_a_compiled_jax_call_runs_fn_as_eager_code_runs(fn):
    """The compiled op's kernel excludes more than autograd (views' bookkeeping, conjugate
    and negative bits, functorch): fn runs with the dispatch an eager caller has, so its
    results are the eager ones (a write through a view was missed: a wrong gradient)."""
    inner = interop.torch_call(fn, lambda x: x)
    mid = interop.jax_call(jax.jit(lambda x: jax.lax.stop_gradient(inner(x))))
    x = torch.linspace(-1, 1, 4)
    expected = mid(x)
    torch.testing.assert_close(expected, fn(x))
    leaf = x.clone().requires_grad_()
    torch.testing.assert_close(torch.compile(mid, backend="aot_eager")(leaf), expected)


def _negated(x):
    """A lazily negated view, resolved (the Negative key's work): -x."""
    return (x._neg_view() * 1.0).contiguous()


@pytest.mark.parametrize("fn", [_conjugated, _negated])
def test_under_inference_mode_a_compiled_jax_call_runs_fn_as_eager_code_runs(fn):
    """Under inference_mode the kernel excludes what it does elsewhere, beside inference
    mode's own exclusions: those were taken for the caller's mode, and fn's conjugate and
    negative bits went missing (a wrong sign)."""
    inner = interop.torch_call(fn, lambda x: x)
    mid = interop.jax_call(jax.jit(lambda x: jax.lax.stop_gradient(inner(x))))
    x = torch.linspace(-1, 1, 4)
    compiled = torch.compile(mid, backend="aot_eager")
    with torch.inference_mode():
        expected, got = mid(x), compiled(x)
    torch.testing.assert_close(got, expected)
