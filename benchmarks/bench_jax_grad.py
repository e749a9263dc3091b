"""A differentiable JAX layer called from torch: forward + backward per call, side by side.

    JAX_PLATFORMS=cpu python benchmarks/bench_jax_grad.py            # full (about a minute)
    JAX_PLATFORMS=cpu python benchmarks/bench_jax_grad.py --quick    # a few seconds
    pip install 'functional-ws[bench]'                               # the peers measured

The layer is ``tanh(x @ w)``, jitted, with both inputs requiring grad; a call is its
forward and its backward from a dense cotangent. Candidates, all on the same tensors:

- pure JAX: the same computation on JAX arrays, a jitted forward keeping the residuals and
  a jitted backward (two dispatches: the floor every wrapper pays);
- ``interop.jax_call``, and ``interop.jax_call`` on a copy of the input (``x.clone()``:
  what keeping a copy of the inputs for the backward, instead of the inputs, would cost);
- jax2torch 0.0.7 (``jax.vjp`` per call; its ``t2j``/``j2t`` fail on jax 0.10 as shipped,
  with the DLPack capsule API jax removed, so they are ported to ``jax.dlpack.from_dlpack``
  and ``torch.from_dlpack``, nothing else changed);
- torch_jax_interop 0.0.8's ``WrappedJaxFunction`` (``w`` as its parameter).

Each round times a batch of calls of every candidate, in an order rotating round to round
(``_timing.py``); the figure is the best round. Overhead = a wrapper's time minus pure
JAX's. Target: ours at most 0.7x the best peer's overhead. Zero copies are asserted by
pointers in ``tests/bridge/test_jax_grad.py``, not here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
import torch
from _timing import Sampler, run_rounds, statement_sampler

import interop

#: (case, rows of x, features): x is (rows, features), w is (features, features).
SIZES = {"small (8x16, 16x16)": (8, 16), "medium (128x256, 256x256)": (128, 256)}
TARGET = 0.7
PURE, OURS, COPY = "pure JAX", "interop.jax_call", "interop.jax_call(x.clone())"
JAX2TORCH, TJI = "jax2torch", "torch_jax_interop"
INSTALL = "pip install 'functional-ws[bench]'"


@jax.jit
def layer(w: jax.Array, x: jax.Array) -> jax.Array:
    """The JAX layer every candidate differentiates."""
    return jnp.tanh(x @ w)


def _jax2torch() -> Callable[..., Any] | str:
    """jax2torch's wrapper of ``layer``, its DLPack helpers ported, or why it is missing."""
    try:  # the module, which its package's __init__ shadows with the function
        peer = importlib.import_module("jax2torch.jax2torch")
    except ImportError:
        return f"not installed ({INSTALL})"
    # to_dlpack ignored requires_grad; __dlpack__ refuses it: detach, as to_dlpack did.
    peer.t2j = lambda t: jax.dlpack.from_dlpack(t.contiguous().detach())  # type: ignore[attr-defined]
    peer.j2t = torch.utils.dlpack.from_dlpack  # type: ignore[attr-defined]
    return peer.jax2torch(layer)  # type: ignore[no-any-return]


def _torch_jax_interop(w: torch.Tensor) -> torch.nn.Module | str:
    try:
        from torch_jax_interop import WrappedJaxFunction
    except ImportError as err:
        return f"not installed ({INSTALL}; {err})"
    return cast(torch.nn.Module, WrappedJaxFunction(layer, interop.to_jax(w.detach())))


def case(rows: int, features: int, calls: int | None) -> tuple[dict[str, Sampler], dict[str, str]]:
    """Per candidate, a sampler of one forward + backward (µs); and the peers missing."""
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(features, features, generator=generator) / features**0.5
    x = torch.randn(rows, features, generator=generator)
    cotangent = torch.randn(rows, features, generator=generator)
    w.requires_grad_()
    x.requires_grad_()
    forward = jax.jit(lambda w, x: jax.vjp(layer, w, x))
    backward = jax.jit(lambda pullback, ct: pullback(ct))
    wj, xj, ctj = (jnp.asarray(t.detach().numpy()) for t in (w, x, cotangent))
    names: dict[str, Any] = {
        "w": w, "x": x, "ct": cotangent, "wj": wj, "xj": xj, "ctj": ctj,
        "forward": forward, "backward": backward, "ours": interop.jax_call(layer), "jax": jax,
    }  # fmt: skip
    statements = {
        PURE: "out, pullback = forward(wj, xj); jax.block_until_ready(backward(pullback, ctj))",
        OURS: "w.grad = x.grad = None; ours(w, x).backward(ct)",
        COPY: "w.grad = x.grad = None; ours(w, x.clone()).backward(ct)",
    }
    missing: dict[str, str] = {}
    peer = _jax2torch()
    if isinstance(peer, str):
        missing[JAX2TORCH] = peer
    else:
        names["peer"] = peer
        statements[JAX2TORCH] = "w.grad = x.grad = None; peer(w, x).backward(ct)"
    module = _torch_jax_interop(w)
    if isinstance(module, str):
        missing[TJI] = module
    else:
        names["module"] = module
        statements[TJI] = "x.grad = None; module.zero_grad(); module(x).backward(ct)"
    for statement in statements.values():  # compile every jit, warm every cache
        exec(statement, dict(names))
    samplers = {
        name: statement_sampler(stmt, names, calls=calls, batch_seconds=5e-3)
        for name, stmt in statements.items()
    }
    return samplers, missing


def run(*, quick: bool = False, calls: int | None = None) -> dict[str, dict[str, float]]:
    """Best µs per call, per case and candidate; ``ratio`` is ours over the best peer's
    overhead (absent where no peer is installed)."""
    rounds = 5 if quick else 41
    cases, missing = {}, {}
    for name, (rows, features) in SIZES.items():
        cases[name], missing[name] = case(rows, features, 4 if quick else calls)
    samples = run_rounds(cases, rounds)
    results: dict[str, dict[str, float]] = {}
    for name, by_candidate in samples.items():
        best = {candidate: min(values) for candidate, values in by_candidate.items()}
        peers = [best[p] - best[PURE] for p in (JAX2TORCH, TJI) if p in best]
        if peers:
            best["ratio"] = (best[OURS] - best[PURE]) / min(peers)
        results[name] = best
    run.missing = missing  # type: ignore[attr-defined]
    return results


def report(results: dict[str, dict[str, float]]) -> list[str]:
    """The table's lines: µs, overhead over pure JAX, and the verdict per case."""
    lines = []
    for name, best in results.items():
        lines.append(f"  {name}")
        for candidate, us in best.items():
            if candidate != "ratio":
                overhead = us - best[PURE]
                lines.append(f"    {candidate:<30} {us:9.1f} µs   overhead {overhead:9.1f} µs")
        if "ratio" in best:
            verdict = "met" if best["ratio"] <= TARGET else "MISSED"
            lines.append(
                f"    ours / best peer's overhead: {best['ratio']:.3f}x "
                f"(target {TARGET}x: {verdict})"
            )
    for name, absent in getattr(run, "missing", {}).items():
        for peer, why in absent.items():
            lines.append(f"  {name}: {peer} {why}")
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the benchmark and print its table; returns the best µs and ratios per case.

    Args:
        argv: command-line arguments (``--quick``, ``--calls``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds of 4 calls")
    parser.add_argument("--calls", type=int, default=None, help="default: ~5 ms batches")
    args = parser.parse_args(argv)
    results = run(quick=args.quick, calls=args.calls)
    print(
        f"jax_call forward + backward, cpu, jax {jax.__version__}, torch {torch.__version__}"
        f"{' (quick)' if args.quick else ''}; best of interleaved rounds"
    )
    for line in report(results):
        print(line)
    return results


if __name__ == "__main__":
    main()
