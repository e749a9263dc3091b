"""What the boundary costs a training step: ``jax_call`` forward + backward against pure JAX
and pure torch, and per-sample gradients through ``torch.func`` against JAX's own, side by
side in one run.

    JAX_PLATFORMS=cpu python benchmarks/bench_grad_boundary.py            # full (minutes)
    JAX_PLATFORMS=cpu python benchmarks/bench_grad_boundary.py --quick    # seconds
    JAX_PLATFORMS=cpu python benchmarks/bench_grad_boundary.py --sync-dispatch

``--sync-dispatch`` turns JAX's asynchronous CPU dispatch off for the whole run
(``jax.config.update("jax_cpu_enable_async_dispatch", False)``, which JAX reads once, when
its CPU backend starts): every candidate then computes on the calling thread. Handing a
result to torch waits for it, so with dispatch asynchronous each crossing waits for XLA's
worker thread; pure JAX waits once per step.

Forward + backward of ``tanh(x @ w)``, both inputs requiring grad, from a dense cotangent,
one thread each (``torch.set_num_threads(1)``; XLA's CPU client runs the small matmuls
inline):

- pure JAX: the same computation on JAX arrays, a jitted forward keeping the residuals
  (``jax.vjp``) and a jitted backward: two dispatches, the floor any bridge pays;
- ``interop.jax_call`` of the jitted layer, called on torch tensors, ``.backward(ct)``;
- pure torch: the layer written in torch;
- ``jax_call`` through torch's public ``autograd.Function.apply``, which binds
  ``forward``'s signature with ``inspect`` on every call: what the bridge's direct call of
  the C ``apply`` saves (``_private.autograd_function_apply``);
- a bare bridge (:class:`BareBridge`): an ``autograd.Function`` around the same two jitted
  functions as pure JAX, with none of ``jax_call``'s checks: the floor of the design.

Targets: ``jax_call`` at most 3x pure JAX on the small case (x 8x16, w 16x16) and 1.3x on
the medium one (x 128x256, w 256x256).

Per-sample gradients: the gradient of a squared-error loss of ``tanh(x_i @ w)`` for each
of a batch of 64 samples (x 64x16, w 16x16; and x 64x256, w 256x256, where the
computation outweighs the calls): ``torch.func.vmap(torch.func.grad(loss))``
through ``jax_call`` (which runs ``jax.vmap`` of the forward and of the VJP, one call each
for the batch) against JAX's own ``jax.jit(jax.vmap(jax.grad(loss)))``, and against
torch.func on the loss written in torch. Target: at most 2x JAX's.

Each round times a batch of calls of every candidate in an order rotating round to round
(``_timing.py``); the figure is the best round, the ratio that of the bests.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
import torch
from _timing import Sampler, best_ratio, run_rounds, statement_sampler

import interop
from interop import _private
from interop._bridge import _autograd

#: (case, rows of x, features): x is (rows, features), w is (features, features).
SIZES = {"small (x 8x16, w 16x16)": (8, 16), "medium (x 128x256, w 256x256)": (128, 256)}
#: The most ``jax_call`` may cost, in units of pure JAX, per case.
TARGETS = {"small (x 8x16, w 16x16)": 3.0, "medium (x 128x256, w 256x256)": 1.3}
#: (case, features): per-sample gradients of a batch of 64, x is (64, features).
PER_SAMPLE = {
    "per-sample gradients, small (batch 64, x 64x16, w 16x16)": 16,
    "per-sample gradients, medium (batch 64, x 64x256, w 256x256)": 256,
}
PER_SAMPLE_TARGET = 2.0
PURE, OURS, TORCH = "pure JAX", "interop.jax_call", "pure torch"
#: ``jax_call`` through torch's public ``Function.apply`` (``inspect.signature`` per call):
#: the row that shows ``_private.autograd_function_apply`` pays.
PUBLIC_APPLY = "interop.jax_call, public apply"
#: :class:`BareBridge`: what a bridge costs before any of ``jax_call``'s own work.
BARE = "bare autograd.Function bridge"
JAX_VMAP, OURS_VMAP, TORCH_VMAP = (
    "jax.vmap(jax.grad)",
    "torch.func.vmap(grad) via jax_call",
    "torch.func.vmap(grad) in torch",
)


@jax.jit
def layer(w: jax.Array, x: jax.Array) -> jax.Array:
    """The JAX layer every candidate differentiates."""
    return jnp.tanh(x @ w)


def _tensors(rows: int, features: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(rows)
    w = torch.randn(features, features, generator=generator) / features**0.5
    x = torch.randn(rows, features, generator=generator)
    target = torch.randn(rows, features, generator=generator)
    return {"w": w, "x": x, "ct": target}


class BareBridge(torch.autograd.Function):
    """The floor of any bridge built on an ``autograd.Function``: the forward hands the
    tensors to a jitted ``jax.vjp`` and the result back, the backward hands the cotangent
    to the jitted pullback and the gradients back; none of ``jax_call``'s checks, plans
    or transforms."""

    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out, ctx.pullback = _BARE_FORWARD(interop.to_jax(w.detach()), interop.to_jax(x.detach()))
        return interop.to_torch(out)

    @staticmethod
    def backward(ctx: Any, ct: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grad_w, grad_x = _BARE_BACKWARD(ctx.pullback, interop.to_jax(ct.contiguous()))
        return interop.to_torch(grad_w), interop.to_torch(grad_x)


_BARE_FORWARD = jax.jit(lambda w, x: jax.vjp(layer, w, x))
_BARE_BACKWARD = jax.jit(lambda pullback, ct: pullback(ct))


def step_case(rows: int, features: int, calls: int | None) -> dict[str, Sampler]:
    """Per candidate, a sampler of one forward + backward (µs per call)."""
    t = _tensors(rows, features)
    w, x, ct = t["w"].requires_grad_(), t["x"].requires_grad_(), t["ct"]
    forward = jax.jit(lambda w, x: jax.vjp(layer, w, x))
    backward = jax.jit(lambda pullback, ct: pullback(ct))
    wj, xj, ctj = (jnp.asarray(v.detach().numpy()) for v in (w, x, ct))
    names: dict[str, Any] = {
        "w": w, "x": x, "ct": ct, "wj": wj, "xj": xj, "ctj": ctj, "jax": jax, "torch": torch,
        "forward": forward, "backward": backward, "ours": interop.jax_call(layer),
        "bridge": _autograd, "fast": _autograd._apply, "public": _autograd.JaxFunction.apply,
        "bare": BareBridge.apply,
    }  # fmt: skip
    statements = {
        PURE: "out, pullback = forward(wj, xj); jax.block_until_ready(backward(pullback, ctj))",
        OURS: "w.grad = x.grad = None; ours(w, x).backward(ct)",
        TORCH: "w.grad = x.grad = None; torch.tanh(x @ w).backward(ct)",
        PUBLIC_APPLY: (
            "w.grad = x.grad = None; bridge._apply = public\n"
            "try:\n    ours(w, x).backward(ct)\nfinally:\n    bridge._apply = fast"
        ),
        BARE: "w.grad = x.grad = None; bare(w, x).backward(ct)",
    }
    for statement in statements.values():  # compile every jit, warm every cache
        exec(statement, dict(names))
    return {
        name: statement_sampler(stmt, names, calls=calls, batch_seconds=5e-3)
        for name, stmt in statements.items()
    }


def _jax_loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((layer(w, x) - y) ** 2)


def per_sample_case(features: int, calls: int | None) -> dict[str, Sampler]:
    """Per candidate, a sampler of the per-sample gradients of a batch of 64 (µs)."""
    t = _tensors(64, features)
    w, x, y = t["w"], t["x"], t["ct"]
    ours_layer = interop.jax_call(layer)

    def ours_loss(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = ours_layer(w, x)
        return ((out - y) ** 2).mean()

    def torch_loss(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((torch.tanh(x @ w) - y) ** 2).mean()

    func = torch.func
    names: dict[str, Any] = {
        "w": w, "x": x, "y": y, "jax": jax,
        "wj": jnp.asarray(w.numpy()), "xj": jnp.asarray(x.numpy()), "yj": jnp.asarray(y.numpy()),
        "jax_per_sample": jax.jit(jax.vmap(jax.grad(_jax_loss), in_axes=(None, 0, 0))),
        "ours": func.vmap(func.grad(ours_loss), in_dims=(None, 0, 0)),
        "theirs": func.vmap(func.grad(torch_loss), in_dims=(None, 0, 0)),
    }  # fmt: skip
    statements = {
        JAX_VMAP: "jax.block_until_ready(jax_per_sample(wj, xj, yj))",
        OURS_VMAP: "ours(w, x, y)",
        TORCH_VMAP: "theirs(w, x, y)",
    }
    for statement in statements.values():
        exec(statement, dict(names))
    return {
        name: statement_sampler(stmt, names, calls=calls, batch_seconds=5e-3)
        for name, stmt in statements.items()
    }


def run(*, quick: bool = False, calls: int | None = None) -> dict[str, dict[str, float]]:
    """Best µs per call per case and candidate, and ``ratio``: ours over JAX's."""
    torch.set_num_threads(1)
    rounds = 5 if quick else 41
    batch = 2 if quick else calls
    cases = {name: step_case(rows, features, batch) for name, (rows, features) in SIZES.items()}
    for name, features in PER_SAMPLE.items():
        cases[name] = per_sample_case(features, batch)
    samples = run_rounds(cases, rounds)
    results: dict[str, dict[str, float]] = {}
    for name, by_candidate in samples.items():
        best = {candidate: min(values) for candidate, values in by_candidate.items()}
        ours, reference = (OURS_VMAP, JAX_VMAP) if name in PER_SAMPLE else (OURS, PURE)
        best["ratio"] = best_ratio(by_candidate[ours], by_candidate[reference])
        results[name] = best
    return results


def report(results: dict[str, dict[str, float]]) -> list[str]:
    """The table's lines: µs per candidate, the ratio and its verdict per case."""
    lines = []
    for name, best in results.items():
        lines.append(f"  {name}")
        for candidate, us in best.items():
            if candidate != "ratio":
                lines.append(f"    {candidate:<36} {us:10.1f} µs")
        target = PER_SAMPLE_TARGET if name in PER_SAMPLE else TARGETS[name]
        verdict = "met" if best["ratio"] <= target else "MISSED"
        lines.append(f"    ours / JAX's: {best['ratio']:.2f}x (target {target}x: {verdict})")
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the benchmark and print its table; returns the best µs and ratios per case.

    Args:
        argv: command-line arguments (``--quick``, ``--calls``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds of 2 calls")
    parser.add_argument("--calls", type=int, default=None, help="default: ~5 ms batches")
    parser.add_argument(
        "--sync-dispatch",
        action="store_true",
        help="JAX's CPU dispatch synchronous (jax_cpu_enable_async_dispatch=False)",
    )
    args = parser.parse_args(argv)
    if args.sync_dispatch:
        if _private.jax_backends_started():
            raise SystemExit("--sync-dispatch: JAX's CPU backend started already")
        jax.config.update("jax_cpu_enable_async_dispatch", False)  # type: ignore[no-untyped-call]
    results = run(quick=args.quick, calls=args.calls)
    asynchronous = jax.config.values.get("jax_cpu_enable_async_dispatch", True)
    dispatch = "asynchronous" if asynchronous else "synchronous"
    print(
        f"the boundary's cost, cpu, one thread, jax {jax.__version__}, torch "
        f"{torch.__version__}{' (quick)' if args.quick else ''}; JAX's CPU dispatch "
        f"{dispatch}; best of interleaved rounds"
    )
    for line in report(results):
        print(line)
    return results


if __name__ == "__main__":
    main()
