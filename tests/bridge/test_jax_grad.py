"""jax_call under autograd: gradients as pure torch computes them, gradcheck in float64,
integer leaves that never break a backward, and no gradient from overwritten bytes."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64

import interop
from interop._bridge import _autograd, _exchange


@jax.jit
def moe_layer(params, x, index):
    """A small MoE-like middle layer: a dense part, a gather by integer routing, a count."""
    hidden = jnp.tanh(x @ params["w"])
    routed = hidden[index] * params["scale"]
    return {"y": routed, "hidden": hidden, "routed": jnp.sum(index > 0)}


def torch_moe_layer(params, x, index):
    hidden = torch.tanh(x @ params["w"])
    return {"y": hidden[index.long()] * params["scale"], "hidden": hidden}


def _inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    params = {
        "w": torch.randn(8, 6, generator=generator, requires_grad=True),
        "scale": torch.tensor(1.5, requires_grad=True),
    }
    x = torch.randn(5, 8, generator=generator, requires_grad=True)
    index = torch.tensor([0, 3, 3, 4], dtype=torch.int32)
    return params, x, index


def _copies(params, x):
    fresh = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
    return fresh, x.detach().clone().requires_grad_()


def test_gradients_match_pure_torch():
    params, x, index = _inputs()
    ref_params, ref_x = _copies(params, x)
    out = interop.jax_call(moe_layer)(params, x, index)
    ref = torch_moe_layer(ref_params, ref_x, index)
    assert out["y"].requires_grad and out["hidden"].requires_grad
    assert out["routed"].dtype == torch.int32 and not out["routed"].requires_grad
    assert torch.allclose(out["y"], ref["y"], atol=1e-6)
    loss = (out["y"] ** 2).sum() + out["hidden"].mean() + out["routed"]
    (ref["y"] ** 2 + 0).sum().add(ref["hidden"].mean()).backward()
    loss.backward()
    for got, want in [(params["w"], ref_params["w"]), (params["scale"], ref_params["scale"])]:
        assert torch.allclose(got.grad, want.grad, atol=1e-5)
    assert torch.allclose(x.grad, ref_x.grad, atol=1e-5)


def test_an_unjitted_function_is_differentiated_without_jit():
    """Not jitted by jax_call: its Python runs on every call, as when called in JAX."""
    calls = []

    def layer(v):
        calls.append(v.shape)
        return jnp.sin(v) * 2.0

    v = torch.zeros(3, requires_grad=True)
    layer_call = interop.jax_call(layer)
    for _ in range(2):
        layer_call(v).sum().backward()
    assert len(calls) == 2 and v.grad.tolist() == [4.0, 4.0, 4.0]


def test_static_leaves_are_part_of_the_signature():
    call = interop.jax_call(jax.jit(lambda v, n, mode: v * n if mode == "mul" else v + n,
                                    static_argnums=2))  # fmt: skip
    v = torch.ones(2, requires_grad=True)
    for n, mode, want in [(2.0, "mul", 2.0), (3.0, "mul", 3.0), (3.0, "add", 1.0)]:
        v.grad = None
        call(v, n, mode).sum().backward()
        assert v.grad.tolist() == [want, want]


def test_gradcheck_in_float64_with_x64_on():
    generator = torch.Generator().manual_seed(1)
    w = torch.randn(4, 3, dtype=torch.float64, generator=generator, requires_grad=True)
    x = torch.randn(2, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    index = torch.tensor([1, 0, 1], dtype=torch.int64)
    call = interop.jax_call(jax.jit(lambda w, x, i: (jnp.sin(x @ w)[:, i] * 2, i + 1)))
    with enable_x64():
        assert torch.autograd.gradcheck(lambda w, x: call(w, x, index)[0], (w, x))
        assert torch.autograd.gradgradcheck(lambda w, x: call(w, x, index)[0], (w, x))


def test_third_order_gradients():
    v = torch.tensor([1.0, 2.0], requires_grad=True)
    y = interop.jax_call(jax.jit(lambda a: jnp.sum(a**4)))(v)
    (g1,) = torch.autograd.grad(y, v, create_graph=True)
    (g2,) = torch.autograd.grad(g1.sum(), v, create_graph=True)
    (g3,) = torch.autograd.grad(g2.sum(), v)
    assert g1.tolist() == [4.0, 32.0] and g2.tolist() == [12.0, 48.0]
    assert g3.tolist() == [24.0, 48.0]


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jitted"])
def test_third_order_through_a_wrapper_freed_after_the_first(jitted):
    """The graph ``create_graph=True`` makes outlives the call: its backward needs the
    user's function after the inline wrapper (and the function) are gone."""
    v = torch.tensor([1.0, 2.0], requires_grad=True)
    fn = lambda a: jnp.sum(a**4)  # noqa: E731 - freed below
    (g1,) = torch.autograd.grad(
        interop.jax_call(jax.jit(fn) if jitted else fn)(v), v, create_graph=True
    )
    del fn
    gc.collect()
    (g2,) = torch.autograd.grad(g1.sum(), v, create_graph=True)
    (g3,) = torch.autograd.grad(g2.sum(), v)
    assert g2.tolist() == [12.0, 48.0] and g3.tolist() == [24.0, 48.0]


@pytest.mark.parametrize(
    "fn",
    [lambda z: jnp.exp(z) * jnp.conj(z), lambda z: jnp.abs(z) ** 2, lambda z: z.real * z],
    ids=["holomorphic-and-not", "complex-to-real", "mixed"],
)
def test_complex_gradients_follow_torch(fn):
    z = torch.tensor([0.3 + 0.2j, -1.0 + 0.5j], dtype=torch.complex128, requires_grad=True)
    with enable_x64():
        assert torch.autograd.gradcheck(interop.jax_call(jax.jit(fn)), (z,))


def test_real_input_complex_output():
    r = torch.tensor([0.5, -2.0], dtype=torch.float64, requires_grad=True)
    with enable_x64():
        assert torch.autograd.gradcheck(interop.jax_call(jax.jit(lambda r: r * (1 + 2j))), (r,))


def test_integer_inputs_and_outputs_never_break_backward():
    x = torch.tensor([0.5, -1.0, 2.0, 0.0], requires_grad=True)
    k = torch.tensor([2, 0], dtype=torch.int32)
    flag = torch.tensor([True, False])
    y, idx, mask = interop.jax_call(jax.jit(lambda x, k, f: (x[k] * 2, jnp.argsort(x), ~f)))(
        x, k, flag
    )
    assert not idx.requires_grad and not mask.requires_grad
    (y.sum() + idx.sum()).backward()
    assert x.grad.tolist() == [2.0, 0.0, 2.0, 0.0]


def test_unused_outputs_get_zero_cotangents():
    x = torch.ones(3, requires_grad=True)
    _, used = interop.jax_call(jax.jit(lambda v: (v * 2, v * 3)))(x)
    used.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]


def test_only_inputs_that_require_grad_get_gradients():
    a, b = torch.ones(2, requires_grad=True), torch.ones(2)
    interop.jax_call(jax.jit(lambda a, b: a * b * 5))(a, b).sum().backward()
    assert a.grad.tolist() == [5.0, 5.0] and b.grad is None


def test_no_grad_mode_hands_tensors_over_detached():
    x = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        y = interop.jax_call(jnp.sin)(x)
    assert not y.requires_grad and y.tolist() == pytest.approx([0.841470957] * 2)


def test_retain_graph_backs_up_twice_and_frees_after():
    x = torch.ones(3, requires_grad=True)
    y = interop.jax_call(jax.jit(lambda v: jnp.sum(jnp.sin(v) * v)))(x)
    y.backward(retain_graph=True)
    first = x.grad.clone()
    y.backward()
    assert torch.allclose(x.grad, 2 * first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_residuals_are_saved_tensors_freed_by_the_backward():
    """JAX's own residuals (here cos(x)) are saved like torch's: freed after backward."""
    x = torch.ones(3, requires_grad=True)
    y = interop.jax_call(jax.jit(lambda v: jnp.sin(v) * 2))(x)
    saved = y.grad_fn.saved_tensors
    assert any(t.data_ptr() != x.data_ptr() for t in saved)  # a JAX residual, as a tensor
    y.sum().backward()
    with pytest.raises(RuntimeError, match="freed"):
        _ = y.grad_fn.saved_tensors


# ----- no gradient from overwritten bytes -----


def _workspace_input(ws):
    """A workspace view holding a differentiable copy of x (it then requires grad)."""
    x = torch.linspace(-1, 1, 8, requires_grad=True)
    (view,) = ws.get_simultaneous(((8,), torch.float32))
    view.copy_(x)
    return x, view


def _raises_overwrite(loss):
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as caught:
        loss.backward()
    assert any("jax_call" in note for note in getattr(caught.value, "__notes__", [""]))


def test_overwriting_an_input_in_place_raises():
    x = torch.linspace(-1, 1, 8, requires_grad=True)
    h = x * 1
    y = interop.jax_call(jax.jit(lambda v: v * v))(h)
    h.mul_(5.0)
    _raises_overwrite(y.sum())


def test_the_next_get_simultaneous_reusing_the_region_raises():
    ws = interop.WorkspaceManager("cpu")
    _, view = _workspace_input(ws)
    y = interop.jax_call(jax.jit(lambda v: v * v))(view)
    (again,) = ws.get_simultaneous(((8,), torch.float32))  # the same bytes, handed out anew
    assert again.data_ptr() == view.data_ptr()
    again.fill_(7.0)
    _raises_overwrite(y.sum())


def test_overwriting_an_integer_input_raises():
    x = torch.tensor([0.5, -1.0, 2.0, 0.0], requires_grad=True)
    index = torch.tensor([0, 1], dtype=torch.int32)
    y = interop.jax_call(jax.jit(lambda x, i: x[i] * 3))(x, index)
    index.fill_(3)
    _raises_overwrite(y.sum())


def test_modifying_an_output_the_backward_reads_raises():
    x = torch.ones(3, requires_grad=True)
    y = interop.jax_call(jax.jit(jnp.exp))(x)  # exp's backward reads exp(x): the output
    y.add_(1.0)
    _raises_overwrite(y.sum())


def test_modifying_an_output_the_backward_does_not_read_is_fine():
    x = torch.zeros(3, requires_grad=True)
    y = interop.jax_call(jax.jit(lambda v: jnp.sin(v) * 2))(x)
    y.add_(1.0)
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_a_copy_lets_the_region_be_reused_before_backward():
    """The documented way out: hand jax_call a copy of scratch reused before backward."""
    ws = interop.WorkspaceManager("cpu")
    x, view = _workspace_input(ws)
    y = interop.jax_call(jax.jit(lambda v: v * v))(view.clone())
    (again,) = ws.get_simultaneous(((8,), torch.float32))
    again.fill_(7.0)
    y.sum().backward()
    assert torch.allclose(x.grad, 2 * torch.linspace(-1, 1, 8))


# ----- zero-copy handoff of cotangents and gradients -----


@pytest.fixture
def handoffs(monkeypatch):
    """Records (tensor pointer, array pointer) of every to_jax and to_torch of the autograd
    node (``_autograd``, and ``_exchange`` for cotangents)."""
    seen: dict[str, list[tuple[int, int]]] = {"to_jax": [], "to_torch": []}

    def to_jax(tensor):
        array = interop.to_jax(tensor)
        seen["to_jax"].append((tensor.data_ptr(), array.unsafe_buffer_pointer()))
        return array

    def to_torch(array):
        tensor = interop.to_torch(array)
        seen["to_torch"].append((tensor.data_ptr(), array.unsafe_buffer_pointer()))
        return tensor

    for module in (_autograd, _exchange):
        monkeypatch.setattr(module, "to_jax", to_jax)
        monkeypatch.setattr(module, "to_torch", to_torch)
    return seen


def _seeded(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape)))


def test_cotangents_and_gradients_cross_over_zero_copy(handoffs):
    x = _seeded(16, 4).requires_grad_()
    y = interop.jax_call(jax.jit(lambda v: jnp.tanh(v) * 3))(x)
    cotangent = _seeded(4, 4, 4).reshape(16, 4)
    handoffs["to_jax"].clear()
    handoffs["to_torch"].clear()
    y.backward(cotangent)
    assert all(t == a for t, a in handoffs["to_jax"] + handoffs["to_torch"])
    assert cotangent.data_ptr() in {t for t, _ in handoffs["to_jax"]}
    assert x.grad.data_ptr() in {t for t, _ in handoffs["to_torch"]}  # autograd kept it


def test_a_broadcast_cotangent_crosses_over_compact(handoffs):
    x = _seeded(16, 4).requires_grad_()
    y = interop.jax_call(jax.jit(lambda v: jnp.tanh(v) * 3))(x)
    handoffs["to_jax"].clear()
    y.sum().backward()  # the cotangent is a scalar expanded to (16, 4): stride 0
    assert all(t == a for t, a in handoffs["to_jax"])
    ref = x.detach().clone().requires_grad_()
    (torch.tanh(ref) * 3).sum().backward()
    assert torch.allclose(x.grad, ref.grad, atol=1e-6)


_WIDE = [np.int64, np.uint64, np.float64, np.complex128]


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("form", ["array", "scalar"])
@pytest.mark.parametrize("dtype", _WIDE, ids=lambda d: d.__name__)
def test_x64_off_refuses_a_64_bit_numpy_result_rather_than_narrow_it(dtype, form, grad):
    value = np.array([2**40 + 5]).astype(dtype)

    def result(x):
        return value if form == "array" else value[0]

    x = torch.ones(1, requires_grad=grad)
    with pytest.raises(interop.errors.X64DisabledError, match=np.dtype(dtype).name):
        interop.jax_call(result)(x)


def test_x64_off_refuses_float64_inputs():
    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(interop.errors.X64DisabledError):
        interop.jax_call(jnp.sin)(x)


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("form", ["array", "scalar"])
@pytest.mark.parametrize("dtype", _WIDE, ids=lambda d: d.__name__)
def test_x64_off_refuses_a_64_bit_numpy_argument_rather_than_narrow_it(dtype, form, grad):
    # JAX narrowed it silently on the way in (2**40 + 5 arrived as 5), where a 64-bit
    # tensor is refused.
    value = np.array([2**40 + 5]).astype(dtype)
    n = value if form == "array" else value[0]
    x = torch.ones(1, requires_grad=grad)
    call = interop.jax_call(jax.jit(lambda x, n: x * 0 + jnp.real(n % 1000).astype(x.dtype)))
    with pytest.raises(interop.errors.X64DisabledError, match=rf"args\[1\] .*{np.dtype(dtype)}"):
        call(x, n)
    assert call(x, np.array([1005], np.int32)).tolist() == [5.0]
    # Python numbers are not 64-bit data: static (grad) or JAX's weak types, as before.
    assert call(x, 1005).tolist() == [5.0] and call(x, 1005.0).tolist() == [5.0]


@pytest.mark.parametrize("jitted", [True, False], ids=["jitted", "eager"])
def test_a_numpy_argument_refilled_before_the_backward_leaves_the_gradient(jitted):
    # The NumPy array was kept as it is and read again by the backward: refilled in
    # between (a loader reusing its batch buffer), the gradient was the new values'.
    def fn(w, m):
        return jnp.sum(jnp.sin(w * m))

    call = interop.jax_call(jax.jit(fn) if jitted else fn)
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    m = np.array([3.0, 4.0], dtype=np.float32)
    want = torch.cos(w.detach() * torch.tensor([3.0, 4.0])) * torch.tensor([3.0, 4.0])
    loss = call(w, m)
    m[:] = 0.0
    loss.backward()
    assert torch.allclose(w.grad, want)
    (second,) = torch.autograd.grad(call(w, m.copy() + 1.0), w)  # the new values, now
    assert torch.allclose(second, torch.cos(w.detach()))
