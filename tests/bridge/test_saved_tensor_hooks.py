"""Saved-tensor hooks around a differentiable ``jax_call``: what a hook unpacks is what the
backward reads, as for torch's own operations.

Torch checks no version counter when a saved tensor has hooks (it cannot: the hook may have
copied it), so a write to an input after the forward is legal there, and the gradient uses
what the hook kept. The first backward of a ``jax_call`` once read the forward's own JAX
arrays instead: a silent wrong gradient under ``save_on_cpu`` or any offloading hook.
"""

from __future__ import annotations

import contextlib
import gc

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.utils.checkpoint

import interop

#: Each function in JAX and in torch: a product's backward reads its inputs (a write to
#: one after the forward reaches it), a sine's reads a residual JAX computed (cos x).
_FUNCTIONS = {
    "product": (lambda x, w: jnp.sum(x * w), lambda x, w: torch.sum(x * w)),
    "sine": (lambda x, w: jnp.sum(jnp.sin(x) * w), lambda x, w: torch.sum(torch.sin(x) * w)),
}


def _copying():
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)


def _replacing():
    """An exaggerated lossy hook (compression): it unpacks other values than it packed."""
    return torch.autograd.graph.saved_tensors_hooks(lambda t: torch.full_like(t, 0.5), lambda t: t)


def _save_on_cpu():
    return torch.autograd.graph.save_on_cpu(pin_memory=True)  # copies on a CPU machine too


def _gradients(function, hooks, write_after: bool, backwards: int = 1):
    torch.manual_seed(0)
    x = torch.randn(6, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    with hooks():
        h = torch.relu(x) + 1.0  # an activation feeding the call, as in a model
        y = function(h, w)
    if write_after:
        with torch.no_grad():
            h.mul_(3.0)  # legal under hooks: torch checks no version then
    for i in range(backwards):
        y.backward(retain_graph=i + 1 < backwards)
    return x.grad, w.grad


@pytest.mark.parametrize("function", list(_FUNCTIONS))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jitted"])
@pytest.mark.parametrize(
    ("hooks", "write_after"),
    [(_copying, True), (_save_on_cpu, True), (contextlib.nullcontext, False)],
    ids=["copying-then-written", "save_on_cpu-then-written", "no-hooks"],
)
@pytest.mark.parametrize("backwards", [1, 2], ids=["one-backward", "retain_graph"])
def test_the_backward_reads_what_the_hook_kept(function, jit, hooks, write_after, backwards):
    in_jax, in_torch = _FUNCTIONS[function]
    mine = interop.jax_call(jax.jit(in_jax) if jit else in_jax)
    got = _gradients(mine, hooks, write_after, backwards)
    expected = _gradients(in_torch, hooks, write_after, backwards)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jitted"])
@pytest.mark.parametrize("backwards", [1, 2], ids=["one-backward", "retain_graph"])
def test_the_backward_reads_what_the_hook_unpacks(jit, backwards):
    """A product's backward reads its two inputs, in JAX as in torch: a hook that unpacks
    0.5 for each makes both gradients 0.5 (times the cotangent)."""
    in_jax, in_torch = _FUNCTIONS["product"]
    mine = interop.jax_call(jax.jit(in_jax) if jit else in_jax)
    got = _gradients(mine, _replacing, False, backwards)
    expected = _gradients(in_torch, _replacing, False, backwards)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, torch.full_like(a, 0.5 * backwards))


def test_a_saved_tensors_own_hooks_are_honoured():
    """Hooks registered on the node's saved tensor after the forward (not a context)."""
    f = interop.jax_call(jax.jit(lambda x, w: jnp.sum(x * w)))
    torch.manual_seed(0)
    x, w = torch.randn(5), torch.randn(5, requires_grad=True)
    y = f(x, w)
    for saved in y.grad_fn._raw_saved_tensors:
        saved.register_hooks(lambda t: t.clone(), lambda t: t)
    expected = x.clone()
    x.mul_(3.0)
    y.backward()
    torch.testing.assert_close(w.grad, expected)


class _Arena:
    """An offloading pool: every saved tensor copied into one flat buffer, one element
    apart (at addresses JAX cannot alias)."""

    def __init__(self) -> None:
        self.buffer = torch.empty(1000)
        self.offset = 1

    def pack(self, t: torch.Tensor):
        n = t.numel()
        where = self.buffer[self.offset : self.offset + n]
        where.copy_(t.detach().reshape(-1))
        self.offset += n + 1
        return where, t.shape

    def unpack(self, packed):
        where, shape = packed
        return where.view(shape)


@pytest.mark.parametrize("backwards", [1, 2], ids=["one-backward", "retain_graph"])
def test_a_hook_unpacking_at_an_odd_address_is_copied_not_refused(backwards):
    arena = _Arena()
    hooks = lambda: torch.autograd.graph.saved_tensors_hooks(arena.pack, arena.unpack)  # noqa: E731
    in_jax, in_torch = _FUNCTIONS["sine"]
    mine = _gradients(interop.jax_call(jax.jit(in_jax)), hooks, False, backwards)
    arena = _Arena()
    torchs = _gradients(in_torch, hooks, False, backwards)
    for got, expected in zip(mine, torchs, strict=True):
        torch.testing.assert_close(got, expected)


def _live_jax_bytes() -> int:
    gc.collect()
    return sum(array.nbytes for array in jax.live_arrays())


def _offloaded(function, x, w):
    store: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> int:
        store.append(t.detach().clone())  # a copy elsewhere; the original is let go
        return len(store) - 1

    with torch.autograd.graph.saved_tensors_hooks(pack, store.__getitem__):
        return function(x, w)


def _checkpointed(function, x, w):
    return torch.utils.checkpoint.checkpoint(function, x, w, use_reentrant=False)


@pytest.mark.parametrize("how", [_offloaded, _checkpointed], ids=["offloaded", "checkpointed"])
def test_hooks_that_let_the_saved_tensors_go_let_the_jax_buffers_go(how):
    """Under saved-tensor hooks the forward keeps none of its JAX buffers beside what the
    hooks hold (JAX's residual cos(x), the inputs' aliases): offloading, and non-reentrant
    checkpointing, save the memory they save for torch's own operations."""
    in_jax, in_torch = _FUNCTIONS["sine"]
    n = 1 << 18  # 1 MiB per float32 array
    torch.manual_seed(0)
    x, w = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
    before = _live_jax_bytes()
    y = how(interop.jax_call(jax.jit(in_jax)), x, w)
    held = _live_jax_bytes() - before
    assert held < n  # cos(x) alone is 4 * n bytes
    y.backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    in_torch(xr, wr).backward()
    torch.testing.assert_close((x.grad, w.grad), (xr.grad, wr.grad))
