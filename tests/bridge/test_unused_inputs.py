"""An input no gradient reaches gets torch's ``None``, not JAX's zeros (``_bridge/_reach.py``):
``.grad`` stays ``None``, ``torch.autograd.grad`` refuses it, an optimizer skips it. Each
case against the same model written in torch, on every path a backward takes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.func import grad, jacrev, vmap

import interop
from interop._bridge._reach import reached

#: (JAX function, the same in torch) of (x, w): w reaches no result that the loss reads.
CASES: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "never read": (lambda x, w: jnp.tanh(x) * 2, lambda x, w: torch.tanh(x) * 2),
    "stop_gradient": (
        lambda x, w: x * jax.lax.stop_gradient(w),
        lambda x, w: x * w.detach(),
    ),
    "through an integer": (
        lambda x, w: x * jnp.argmax(w),
        lambda x, w: x * w.argmax(),
    ),
    "inside a jitted function": (
        lambda x, w: jax.jit(lambda a, b: (a * 3, b * 3))(x, w)[0],
        lambda x, w: (x * 3, w * 3)[0],
    ),
    "inside jax.checkpoint": (
        lambda x, w: jax.checkpoint(lambda a, b: a * 3 + jax.lax.stop_gradient(b))(x, w),
        lambda x, w: x * 3 + w.detach(),
    ),
    "only in a result the loss ignores": (
        lambda x, w: (jnp.sin(x), w * 2),
        lambda x, w: (torch.sin(x), w * 2),
    ),
}


def _loss(out: Any) -> torch.Tensor:
    return (out[0] if isinstance(out, tuple) else out).sum()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, generator=gen).requires_grad_()
    w = torch.randn(4, generator=gen).requires_grad_()
    return x, w


@pytest.mark.parametrize("case", CASES)
def test_grad_stays_none_as_in_torch(case: str) -> None:
    f_jax, f_torch = CASES[case]
    grads = []
    for f in (interop.jax_call(jax.jit(f_jax)), f_torch):
        x, w = _inputs()
        _loss(f(x, w)).backward()
        grads.append((x.grad, w.grad))
    (got_x, got_w), (want_x, want_w) = grads
    assert want_w is None and got_w is None
    torch.testing.assert_close(got_x, want_x)


@pytest.mark.parametrize("case", ["never read", "only in a result the loss ignores"])
def test_autograd_grad_refuses_it_as_torch_does(case: str) -> None:
    f_jax, f_torch = CASES[case]
    messages = []
    for f in (interop.jax_call(jax.jit(f_jax)), f_torch):
        x, w = _inputs()
        with pytest.raises(RuntimeError, match="not have been used in the graph") as info:
            torch.autograd.grad(_loss(f(x, w)), [x, w])
        messages.append(str(info.value))
        assert torch.autograd.grad(_loss(f(x, w)), [x, w], allow_unused=True)[1] is None
    assert messages[0] == messages[1]


def test_create_graph_and_batched_grads_give_none_too() -> None:
    f_jax, f_torch = CASES["never read"]
    for create_graph in (True, False):
        found = []
        for f in (interop.jax_call(jax.jit(f_jax)), f_torch):
            x, w = _inputs()
            y = f(x, w)
            if create_graph:
                gx, gw = torch.autograd.grad(y.sum(), [x, w], create_graph=True, allow_unused=True)
            else:
                gx, gw = torch.autograd.grad(
                    y, [x, w], torch.eye(4), is_grads_batched=True, allow_unused=True
                )
            found.append((gx, gw))
        assert found[0][1] is None and found[1][1] is None
        torch.testing.assert_close(found[0][0], found[1][0])


def test_a_second_order_gradient_gives_none_where_torch_does() -> None:
    """The first-order gradient of x through the second result does not depend on x; its
    own gradient was zeros: the differentiable backward multiplied the first result's
    zero cotangent into a term of x (review)."""
    f_jax = jax.jit(lambda x, w: (jnp.sin(x) * w[0] ** 2, w**3 * x))
    f_torch = lambda x, w: (torch.sin(x) * w[0] ** 2, w**3 * x)  # noqa: E731
    found = []
    for f in (interop.jax_call(f_jax), f_torch):
        x, w = _inputs()
        (gx,) = torch.autograd.grad(f(x, w)[1].sum(), x, create_graph=True)
        (gx**2).sum().backward()
        found.append((x.grad, w.grad))
    assert found[0][0] is None and found[1][0] is None
    torch.testing.assert_close(found[0][1], found[1][1])


def test_adamw_skips_it_as_in_torch() -> None:
    """AdamW decays every parameter that has a gradient: with JAX's zeros the unused one
    shrank each step, where torch leaves it alone."""
    f_jax, f_torch = CASES["never read"]
    params = []
    for f in (interop.jax_call(jax.jit(f_jax)), f_torch):
        x, w = _inputs()
        opt = torch.optim.AdamW([x, w], lr=0.1, weight_decay=0.5)
        for _ in range(3):
            opt.zero_grad()
            _loss(f(x, w)).backward()
            opt.step()
        params.append((x.detach().clone(), w.detach().clone()))
    torch.testing.assert_close(params[0][0], params[1][0])
    torch.testing.assert_close(params[0][1], params[1][1], rtol=0, atol=0)
    torch.testing.assert_close(params[0][1], _inputs()[1].detach(), rtol=0, atol=0)


def test_torch_func_gives_zeros_as_it_does_for_torch() -> None:
    """torch.func turns a gradient nobody reaches into zeros: the same for both."""
    f_jax, f_torch = CASES["never read"]
    x, w = (t.detach() for t in _inputs())
    xs = torch.randn(3, 4)
    found = []
    for f in (interop.jax_call(jax.jit(f_jax)), f_torch):
        scalar = lambda a, b, f=f: f(a, b).sum()  # noqa: E731
        found.append(
            (
                grad(scalar, argnums=(0, 1))(x, w),
                jacrev(scalar, argnums=1)(x, w),
                vmap(grad(scalar, argnums=(0, 1)), in_dims=(0, None))(xs, w),
            )
        )
    torch.testing.assert_close(found[0], found[1])
    assert not found[0][1].any()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", CASES)
def test_compiled_gives_none_as_eager_does(backend: str, case: str) -> None:
    """A result the loss ignores got a zero cotangent from the custom op's autograd (torch
    materialises them by default), so compiled gave zeros where eager gives None."""
    f_jax, f_torch = CASES[case]
    torch._dynamo.reset()  # one lambda's code for every case: past Dynamo's recompile limit
    for f in (interop.jax_call(jax.jit(f_jax)), f_torch):
        compiled = torch.compile(lambda a, b, f=f: _loss(f(a, b)), backend=backend, fullgraph=True)
        x, w = _inputs()
        compiled(x, w).backward()
        assert w.grad is None and x.grad is not None


def test_an_unjitted_function_keeps_jax_zeros() -> None:
    """Its Python runs on every call and may read what changes between calls: the bridge
    does not read its jaxpr once for all (README: "Gradients through `jax_call`")."""
    use_w = [False]

    def f(x, w):
        return x * w if use_w[0] else x * 2

    call = interop.jax_call(f)
    for flag, want in ((False, [0.0] * 4), (True, None)):
        use_w[0] = flag
        x, w = _inputs()
        call(x, w).sum().backward()
        if want is None:
            torch.testing.assert_close(w.grad, x.detach())
        else:
            assert w.grad.tolist() == want


DDP = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, torch, torch.distributed as dist
    import interop

    class Model(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.x, self.w = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(4))
            self.layer = layer

        def forward(self):
            return self.layer(self.x, self.w).sum()

    dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=0, world_size=1)
    jax_layer = interop.jax_call(jax.jit(lambda x, w: jnp.tanh(x) * 2))
    for name, layer in (("jax", jax_layer), ("torch", lambda x, w: torch.tanh(x) * 2)):
        for unused in (True, False):
            model = torch.nn.parallel.DistributedDataParallel(
                Model(layer), find_unused_parameters=unused
            )
            try:
                for _ in range(2):
                    model.zero_grad()
                    model().backward()
                w = model.module.w.grad
                print(name, unused, None if w is None else w.tolist())
            except RuntimeError as err:
                print(name, unused, "refused" if "finished reduction" in str(err) else err)
    dist.destroy_process_group()
    """
)


def test_distributed_data_parallel_without_find_unused_parameters_gets_zeros(tmp_path):
    """DDP hooks every parameter in the graph: a jax_call's input is in it, so DDP fills
    its gradient with zeros where the same model in torch is refused; with
    ``find_unused_parameters=True``, ``None`` for both (README)."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "jax True None",
        "jax False [0.0, 0.0, 0.0, 0.0]",
        "torch True None",
        "torch False refused",
    ]


# ----- the analysis: False only where JAX's own gradient is zero by construction -----

SPEC = jax.ShapeDtypeStruct((3,), jnp.float32)


def _scan(a: Any, b: Any) -> Any:
    return jax.lax.scan(lambda c, _: (c * a + b * 0.5, None), a, None, length=3)[0]


@jax.custom_jvp
def _custom(a: Any, b: Any) -> Any:
    return a  # the primal ignores b, its derivative rule does not


@_custom.defjvp
def _custom_jvp(primals: Any, tangents: Any) -> Any:
    return primals[0], tangents[0] + tangents[1]


def _through_a_ref(a: Any, b: Any) -> Any:
    """b reaches the result through a ref, which no equation's variables show: the
    analysis said b was unused, and the bridge gave None for a gradient of 2a."""
    ref = jax.new_ref(jnp.zeros_like(a))
    ref[...] = b * 2
    return a * ref[...]


def _through_a_ref_in_a_loop(a: Any, b: Any) -> Any:
    ref = jax.new_ref(jnp.zeros_like(a))

    def body(i: Any, carry: Any) -> Any:
        ref[...] += b
        return carry

    jax.lax.fori_loop(0, 2, body, 0.0)
    return a + ref[...]


#: (function of a, b, whether a gradient reaches each).
ZOO: dict[str, tuple[Callable[..., Any], tuple[bool, bool]]] = {
    "both": (lambda a, b: a * b, (True, True)),
    "b ignored": (lambda a, b: jnp.sin(a), (True, False)),
    "b through stop_gradient": (lambda a, b: a + jax.lax.stop_gradient(b), (True, False)),
    "b through a comparison": (lambda a, b: jnp.where(b > 0, a, 0.0), (True, False)),
    "b through floor (zero, but in torch's graph)": (lambda a, b: a + jnp.floor(b), (True, True)),
    "nested jit, b dropped": (lambda a, b: jax.jit(lambda p, q: p * 2)(a, b), (True, False)),
    "nested jit, b used": (lambda a, b: jax.jit(lambda p, q: p * q)(a, b), (True, True)),
    "checkpoint": (lambda a, b: jax.checkpoint(lambda p, q: p * q)(a, b), (True, True)),
    "cond over both": (lambda a, b: jax.lax.cond(a[0] > 0, lambda: a, lambda: b), (True, True)),
    "cond over a only": (lambda a, b: jax.lax.cond(b[0] > 0, lambda: a, lambda: -a), (True, False)),
    "scan carry": (_scan, (True, True)),
    "while loop": (
        lambda a, b: jax.lax.fori_loop(0, 3, lambda i, c: c * b, a),
        (True, True),
    ),
    "custom_jvp whose rule reads b": (_custom, (True, True)),
    "integer result only": (lambda a, b: [jnp.argmax(a + b)], (False, False)),
    "b through a ref": (_through_a_ref, (True, True)),
    "b through a ref in a loop": (_through_a_ref_in_a_loop, (True, True)),
}


@pytest.mark.parametrize("name", ZOO)
def test_reached_is_false_only_where_jax_gives_exact_zeros(name: str) -> None:
    fn, expected = ZOO[name]

    def listed(a: Any, b: Any) -> list[Any]:
        out = fn(a, b)
        return list(out) if isinstance(out, list) else [out]

    found = reached(listed, [SPEC, SPEC], [True])
    assert found == expected
    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.normal(size=3), jnp.float32) for _ in range(2))
    out = listed(a, b)[0]
    if not jnp.issubdtype(out.dtype, jnp.inexact):
        return
    grads = jax.grad(lambda p, q: listed(p, q)[0].sum(), argnums=(0, 1))(a, b)
    for flag, g in zip(found, grads, strict=True):
        if not flag:
            assert not np.any(np.asarray(g)), (name, g)


def test_a_gradient_through_a_ref_reaches_torch() -> None:
    x, w = _inputs()
    interop.jax_call(jax.jit(_through_a_ref))(x, w).sum().backward()
    torch.testing.assert_close(w.grad, 2 * x.detach())


def test_under_disable_jit_the_compiled_path_keeps_jax_zeros_as_eager_does() -> None:
    """A jitted function runs as Python under jax.disable_jit(): both paths keep JAX's
    zeros then (Plan.reaching and the custom op's _reaching alike)."""
    f_jax, _ = CASES["stop_gradient"]
    call = interop.jax_call(jax.jit(f_jax))
    found = []
    with jax.disable_jit():
        for run in (call, torch.compile(call, backend="aot_eager", fullgraph=True)):
            x, w = _inputs()
            run(x, w).sum().backward()
            found.append(w.grad)
    assert all(g is not None and not g.any() for g in found)


def test_a_function_that_cannot_be_traced_abstractly_reaches_everything() -> None:
    def branchy(a: Any, b: Any) -> list[Any]:
        return [a if float(a[0]) > 0 else a * 2]

    assert reached(branchy, [SPEC, SPEC], [True]) == (True, True)
