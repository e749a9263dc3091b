"""The buffers a differentiable ``jax_call`` hands torch: gradients that share memory with
nothing else torch holds, results of one array that are distinct tensors, and any cotangent
torch hands over accepted (a misaligned or strided one copied, never refused)."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import pytest
import torch

import interop
from interop._bridge import _exchange


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes ``t`` covers: [start, end)."""
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + (extent + 1) * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


_ADD = {"eager": lambda a, b: a + b, "jitted": jax.jit(lambda a, b: a + b)}


@pytest.mark.parametrize("kind", list(_ADD))
def test_accumulated_gradients_are_torchs(kind):
    """Eager JAX's transpose of ``a + b`` returns the cotangent itself for both inputs: the
    gradients must still be two buffers, neither of them torch's incoming gradient."""
    add = interop.jax_call(_ADD[kind])
    a, b = torch.zeros(5, requires_grad=True), torch.zeros(5, requires_grad=True)
    cotangent = torch.arange(5.0)
    for _ in range(2):
        add(a, b).backward(cotangent)
    assert a.grad.tolist() == b.grad.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert cotangent.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert not _overlap(a.grad, b.grad)


@pytest.mark.parametrize("kind", list(_ADD))
def test_under_disable_jit_a_jitted_functions_gradients_are_buffers_of_their_own(kind):
    """jax.disable_jit() runs a jitted function's backward eagerly: its transpose of
    ``a + b`` hands back torch's cotangent for both inputs, as an unjitted one does (the
    gradients were the user's cotangent, and one buffer for both)."""
    add = interop.jax_call(_ADD[kind])
    a, b = torch.zeros(5, requires_grad=True), torch.zeros(5, requires_grad=True)
    cotangent = torch.arange(5.0)
    with jax.disable_jit():
        for _ in range(2):
            add(a, b).backward(cotangent)
    assert a.grad.tolist() == b.grad.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert cotangent.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert not _overlap(a.grad, b.grad)


def test_a_gradient_the_function_keeps_is_copied_before_torch_accumulates_into_it():
    """An unjitted custom_vjp whose backward returns an array it keeps (a straight-through
    surrogate): .grad over that array's buffer, accumulated in place, rewrote it for every
    later gradient, JAX's own included. A gradient JAX computed in the call is not copied."""
    surrogate = jnp.array([1.0, 2.0, 3.0])

    @jax.custom_vjp
    def ste(x):
        return jnp.round(x)

    ste.defvjp(lambda x: (jnp.round(x), None), lambda _, ct: (surrogate,))
    rounded = interop.jax_call(ste)
    x = torch.zeros(3, requires_grad=True)
    for _ in range(2):
        rounded(x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    assert surrogate.tolist() == [1.0, 2.0, 3.0]
    assert not _overlap(x.grad, interop.to_torch(surrogate))
    fresh = interop.jax_call(lambda x: jnp.round(x) + x * 2)
    y = torch.zeros(3, requires_grad=True)
    fresh(y).sum().backward()
    assert y.grad.tolist() == [2.0, 2.0, 2.0]


def _fail_a_fullgraph_compile() -> None:
    """A ``torch.compile(fullgraph=True)`` that fails (a graph break), as any script's may:
    afterwards Dynamo's frame hook holds one more reference to a called function's
    arguments (torch 2.13, CPython 3.11), which a reference count must not read as a
    holder."""

    def breaks(x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return x

    with pytest.raises(Exception, match="graph_break"):
        torch.compile(breaks, backend="eager", fullgraph=True)(torch.ones(3))


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "recording"])
@pytest.mark.parametrize("after", [False, True], ids=["", "after-a-fullgraph-error"])
def test_a_result_the_function_keeps_is_copied_and_an_input_returned_as_is_is_not(grad, after):
    """An unjitted function returning a constant it closes over (a table): an in-place op
    on the result rewrote the constant for every later call; an input returned as is
    still aliases that input (documented), and a result JAX computed is not copied (nor
    one the backward reads, tanh's), a failed fullgraph compile earlier in the process
    or not (every result was copied after one)."""
    if after:
        _fail_a_fullgraph_compile()
    table = jnp.arange(3.0)
    lookup = interop.jax_call(lambda x: (jnp.tanh(x), table, x))
    x = torch.ones(3, requires_grad=grad)
    squashed, kept, same = lookup(x)
    with torch.no_grad():
        kept.add_(100.0)
    assert table.tolist() == [0.0, 1.0, 2.0] and lookup(x)[1].tolist() == [0.0, 1.0, 2.0]
    assert _overlap(same, x) and not _overlap(kept, interop.to_torch(table))
    clones = []
    original = torch.Tensor.clone
    try:
        torch.Tensor.clone = lambda self, *a, **k: clones.append(self.shape) or original(self)
        lookup(x)
    finally:
        torch.Tensor.clone = original
    assert clones == [(3,)]  # the table's only
    assert squashed.tolist() == pytest.approx([0.7615942] * 3)


@pytest.mark.parametrize("kind", list(_ADD))
def test_gradients_share_no_memory_with_the_incoming_gradient_or_each_other(kind):
    add = interop.jax_call(_ADD[kind])
    a, b = torch.zeros(5, requires_grad=True), torch.zeros(5, requires_grad=True)
    cotangent = torch.arange(5.0)
    ga, gb = torch.autograd.grad(add(a, b), (a, b), cotangent)
    assert not _overlap(ga, cotangent) and not _overlap(gb, cotangent)
    assert not _overlap(ga, gb)


@pytest.mark.parametrize("shape", [(), (1,)], ids=["scalar", "one-element"])
def test_one_element_gradients_are_two_buffers(shape):
    """Scalar biases and scales: the transpose of ``a + b`` hands both the same element."""
    add = interop.jax_call(lambda a, b: a + b)
    a, b = torch.zeros(shape, requires_grad=True), torch.zeros(shape, requires_grad=True)
    add(a, b).sum().backward()
    assert a.grad.data_ptr() != b.grad.data_ptr()
    a.grad.zero_()
    assert b.grad.item() == 1.0


def test_neighbouring_gradients_keep_their_bytes_and_overlapping_ones_are_copied():
    whole = torch.arange(8.0)
    for pair in ([whole[4:], whole[:4]], [whole[:4], whole[4:]]):  # adjacent, no byte shared
        assert [t.data_ptr() for t in _exchange.unshared(pair)] == [t.data_ptr() for t in pair]
    first, second = _exchange.unshared([whole[:4], whole[3:]])  # one element shared
    assert first.data_ptr() == whole.data_ptr() and second.data_ptr() != whole[3:].data_ptr()
    assert second.tolist() == whole[3:].tolist()


def test_clip_grad_norm_scales_each_gradient_once():
    add = interop.jax_call(lambda a, b: a + b)
    params = [torch.ones(4, requires_grad=True) for _ in range(2)]
    reference = [p.detach().clone().requires_grad_() for p in params]
    add(*params).backward(torch.full((4,), 3.0))
    (reference[0] + reference[1]).backward(torch.full((4,), 3.0))
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    torch.nn.utils.clip_grad_norm_(reference, 1.0)
    for got, want in zip(params, reference, strict=True):
        assert torch.allclose(got.grad, want.grad)


def test_an_identity_gradient_is_not_the_incoming_gradient():
    identity = interop.jax_call(lambda v: v + 0.0)  # eager JAX hands the cotangent back
    x = torch.zeros(3, requires_grad=True)
    cotangent = torch.ones(3)
    identity(x).backward(cotangent)
    x.grad.add_(1.0)  # what an optimiser's in-place update of .grad does
    assert cotangent.tolist() == [1.0, 1.0, 1.0]


_TWICE = {"eager": lambda x: (x * 2,) * 2, "jitted": jax.jit(lambda x: (x * 2,) * 2)}


@pytest.mark.parametrize("kind", list(_TWICE))
@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
def test_results_of_one_array_are_distinct_tensors(kind, grad):
    x = torch.ones(3, requires_grad=grad)
    first, second = interop.jax_call(_TWICE[kind])(x)
    assert not _overlap(first, second)
    before = first._version
    second.add_(1.0)  # only that tensor changes, and only its version counter
    assert first.tolist() == [2.0, 2.0, 2.0] and first._version == before


# ----- any cotangent torch hands over is accepted -----


def _misaligned_cotangent_loss(y: torch.Tensor) -> torch.Tensor:
    """cat's backward hands ``y`` a slice of one larger gradient, one element in: an
    address that is not 64-byte aligned."""
    whole = torch.cat([torch.ones(1), y])
    return (whole * torch.arange(1.0, whole.numel() + 1)).sum()


def _strided_cotangent_loss(y: torch.Tensor) -> torch.Tensor:
    """cat's backward along dim 1 hands ``y`` a column of one larger gradient: a step
    slice."""
    whole = torch.cat([y[:, None], torch.ones(y.shape[0], 1)], dim=1)
    return (whole * torch.arange(1.0, whole.numel() + 1).reshape(whole.shape)).sum()


_LOSSES = {"misaligned": _misaligned_cotangent_loss, "strided": _strided_cotangent_loss}


def _reference_grad(loss_of, x: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
    ref = x.detach().clone().requires_grad_()
    (grad,) = torch.autograd.grad(loss_of(torch.sin(ref)), ref, create_graph=create_graph)
    return grad


@pytest.fixture
def copies():
    """How many cotangents were copied since the test began."""
    before = _exchange.COTANGENT_COPIES.count
    return lambda: _exchange.COTANGENT_COPIES.count - before


@pytest.mark.parametrize("layout", list(_LOSSES))
def test_a_cotangent_jax_cannot_alias_is_copied_not_refused(layout, copies):
    sin = interop.jax_call(jax.jit(jnp.sin))
    x = torch.linspace(-1, 1, 7, requires_grad=True)
    _LOSSES[layout](sin(x)).backward()
    assert torch.allclose(x.grad, _reference_grad(_LOSSES[layout], x), atol=1e-6)
    assert copies() == 1


@pytest.mark.parametrize("layout", list(_LOSSES))
def test_higher_order_accepts_any_cotangent(layout, copies):
    sin = interop.jax_call(jax.jit(jnp.sin))
    x = torch.linspace(-1, 1, 7, requires_grad=True)
    (grad,) = torch.autograd.grad(_LOSSES[layout](sin(x)), x, create_graph=True)
    want = _reference_grad(_LOSSES[layout], x, create_graph=True)
    assert torch.allclose(grad, want, atol=1e-6)
    (again,) = torch.autograd.grad(grad.sum(), x)
    ref = x.detach().clone().requires_grad_()
    (ref_grad,) = torch.autograd.grad(_LOSSES[layout](torch.sin(ref)), ref, create_graph=True)
    assert torch.allclose(again, torch.autograd.grad(ref_grad.sum(), ref)[0], atol=1e-6)
    assert copies() >= 1


@pytest.mark.parametrize("layout", list(_LOSSES))
def test_the_compiled_backward_accepts_any_cotangent(layout, copies):
    torch._dynamo.reset()
    sin = interop.jax_call(jax.jit(jnp.sin))
    loss_of = _LOSSES[layout]
    compiled = torch.compile(lambda x: loss_of(sin(x)), backend="aot_eager", fullgraph=True)
    x = torch.linspace(-1, 1, 7, requires_grad=True)
    compiled(x).backward()
    torch._dynamo.reset()
    assert torch.allclose(x.grad, _reference_grad(loss_of, x), atol=1e-6)


@pytest.mark.parametrize("part", ["real", "imag"])
def test_a_lazily_conjugated_cotangent_is_copied_not_refused(part, copies):
    """``.conj()`` after the call hands its backward a cotangent with torch's lazy
    conjugate bit, which DLPack cannot carry: copied, with torch's gradient."""
    double = interop.jax_call(jax.jit(lambda z: z * 2))
    z = torch.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    w = torch.tensor([1 - 1j, 2 + 1j])
    getattr(double(z).conj() * w, part).sum().backward()
    ref = z.detach().clone().requires_grad_()
    getattr((ref * 2).conj() * w, part).sum().backward()
    assert torch.allclose(z.grad, ref.grad) and copies() == 1


def test_each_copy_is_counted_and_logged_at_debug_level(copies, caplog):
    caplog.set_level(logging.DEBUG, logger="interop")
    x = torch.linspace(-1, 1, 7, requires_grad=True)
    _misaligned_cotangent_loss(interop.jax_call(jax.jit(jnp.sin))(x)).backward()
    assert copies() == 1
    assert "copied a tensor torch handed over (a cotangent" in caplog.text and "(7,)" in caplog.text


def test_a_misaligned_input_is_still_refused():
    """Inputs are the caller's to align (a documented refusal); only cotangents are copied."""
    base = torch.zeros(9)
    with pytest.raises(interop.errors.MisalignedViewError):
        interop.jax_call(jax.jit(jnp.sin))(base[1:])


#: Unjitted functions whose result JAX hands back without a copy (the input itself).
_RETURNED_AS_IS = {
    "identity": lambda x: x,
    "slice-all": lambda x: x[:],
    "same-shape-reshape": lambda x: x.reshape(x.shape),
    "same-dtype-astype": lambda x: x.astype(x.dtype),
}


@pytest.mark.parametrize("fn", list(_RETURNED_AS_IS.values()), ids=list(_RETURNED_AS_IS))
def test_an_input_returned_as_is_without_grad_is_tracked_as_a_view_of_it(fn):
    """No input requiring grad (the path that hands tensors over and back): the result over
    the input's bytes had a version counter of its own, so a write to the input after a
    torch op saved the result gave that op's backward the new bytes, silently ([10, 11,
    12, 13] for [0, 1, 2, 3]). It is a view of the input now, as ``x.view_as(x)`` is:
    torch refuses that backward, as it refuses the same with ``x[:]``."""
    call = interop.jax_call(fn)
    for write_into in ("input", "result"):
        x = torch.arange(4.0)
        w = torch.ones(4, requires_grad=True)
        out = call(x)
        assert out.data_ptr() == x.data_ptr() and not out.requires_grad  # still aliases it
        loss = (out * w).sum() if write_into == "input" else (x * w).sum()
        with torch.no_grad():
            (x if write_into == "input" else out).add_(10.0)
        assert x._version == out._version == 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def test_another_array_over_an_inputs_bytes_without_grad_is_a_copy():
    """An input returned twice: both are views of it (as torch's ``(x.view_as(x),) * 2``);
    an array over an input's bytes that is not the input (a new JAX array of its buffer)
    is a copy, as the recording path makes it."""
    x = torch.arange(4.0)
    first, second = interop.jax_call(lambda v: (v, v))(x)
    assert first is not second and first.data_ptr() == second.data_ptr() == x.data_ptr()
    x.add_(1.0)
    assert first._version == second._version == x._version == 1
    x = torch.arange(4.0)
    out = interop.jax_call(lambda v: jax.dlpack.from_dlpack(v))(x)
    assert not _overlap(out, x) and out.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_an_input_returned_as_is_with_grad_off_requires_no_grad(mode):
    """A parameter through an identity with grad off: the result requires no grad (a view
    made under ``no_grad`` would, and ``.numpy()`` on it raised), over the same bytes."""
    w = torch.nn.Parameter(torch.ones(4))
    with getattr(torch, mode)():
        out = interop.jax_call(lambda t: t)(w)
    assert not out.requires_grad and out.data_ptr() == w.data_ptr()
    assert out.numpy().tolist() == [1.0] * 4
