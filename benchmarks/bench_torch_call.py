"""A torch function called from JAX: one call per candidate, side by side, two sizes.

    JAX_PLATFORMS=cpu python benchmarks/bench_torch_call.py            # full (about a minute)
    JAX_PLATFORMS=cpu python benchmarks/bench_torch_call.py --quick    # a few seconds

The function is ``x + 1`` on a float32 vector (one elementwise kernel: what is measured is
the crossing, not torch's arithmetic; ``--fn "x * 2 + 1"`` for two kernels), called eagerly
(one dispatch per call, results waited for). Candidates, on the same JAX array:

- pure JAX: the same computation jitted in JAX (the floor: no torch at all), waited for
  after every call as the others are; and the same with 8 calls queued before one wait
  (JAX's asynchronous dispatch overlaps them; a callback runs synchronously on the
  calling thread, so ``torch_call`` gains nothing from this). The small-array target is
  taken against the lower of the two;
- ``interop.torch_call``: the wrapper called as a user calls it (its argument checks
  included), and the same inside a caller's ``jax.jit`` (no wrapper at run time);
- ``jax.pure_callback``: the torch function behind JAX's own callback, written as well as it
  can be (the host array aliased with ``torch.from_dlpack``, the result handed back as a
  NumPy view; JAX copies it in);
- ``interop.torch_call`` forced onto its ``pure_callback`` fallback (what older jax gets);
- a bare ``buffer_callback`` (where jax has it) that imports XLA's buffers into torch, calls
  the function and copies its result into the output buffer, with none of ``torch_call``'s
  checks: the floor of the buffer path, against which its checks are measured.

Each round times a batch of calls of every candidate, in an order shuffled round to round
(seeded), and the figure is the best round. Not ``_timing.run_rounds``' rotation: after
pure JAX's multi-threaded computation XLA's CPU thread pool keeps the cores busy for a
while, and the candidate timed next ran 1.2-2.4x slower on 1 MiB (measured here); a
rotation keeps the same candidate after pure JAX in every round, a shuffle does not.

Targets: ``torch_call`` at most 0.3x ``jax.pure_callback`` on the 1 MiB array (the copies it
saves), and at most 3x pure JAX on the 4 KiB one (what crossing into torch costs). Zero
copies are asserted by pointers in ``tests/bridge/test_torch_call.py``, not here.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
import numpy as np
import torch
from _timing import Sampler, Samples, statement_sampler

import interop
from interop import _private
from interop._bridge import _torch_callback

#: case -> float32 elements.
SIZES = {"small (4 KiB)": 1024, "medium (1 MiB)": 1 << 18}
PURE, OURS, INSIDE = "pure JAX", "interop.torch_call", "torch_call inside jax.jit"
PIPELINED = "pure JAX, 8 queued per wait"
#: Calls per statement of the pipelined candidate (its figure is per call).
QUEUED = 8
CALLBACK, FALLBACK = "jax.pure_callback", "torch_call, pure_callback fallback"
#: The floor of the buffer path (where jax has ``buffer_callback``): no checks at all.
BARE = "bare buffer_callback, no checks"
#: (numerator, denominator, case, target): each ratio the benchmark checks; the floor is
#: the lower of the two pure-JAX figures.
FLOOR = "pure JAX (the lower)"
TARGETS = (
    (OURS, CALLBACK, "medium (1 MiB)", 0.3),
    (OURS, FLOOR, "small (4 KiB)", 3.0),
)


def add_one(x: Any) -> Any:
    """``x + 1``, for torch tensors and JAX arrays alike."""
    return x + 1


def double_plus_one(x: Any) -> Any:
    """``x * 2 + 1``, for torch tensors and JAX arrays alike."""
    return x * 2 + 1


#: ``--fn``: the function every candidate computes (torch's and JAX's are the same code).
FUNCTIONS = {"x + 1": add_one, "x * 2 + 1": double_plus_one}


def _host(fn: Callable[[Any], Any]) -> Callable[[Any], np.ndarray[Any, Any]]:
    """``jax.pure_callback``'s body: alias the host array, call torch, hand NumPy back."""
    return lambda array: fn(torch.utils.dlpack.from_dlpack(np.asarray(array))).numpy()


def _fallback(
    fn: Callable[[Any], Any], spec: jax.ShapeDtypeStruct, x: jax.Array
) -> Callable[[jax.Array], Any]:
    """A ``torch_call`` traced (and so compiled) while the fallback is forced."""
    call = interop.torch_call(fn, spec)
    saved = _torch_callback.use_buffers
    _torch_callback.use_buffers = False
    try:
        np.asarray(call(x))  # traces and compiles the fallback now
    finally:
        _torch_callback.use_buffers = saved
    return call


def _bare(fn: Callable[[Any], Any], spec: jax.ShapeDtypeStruct) -> Callable[[jax.Array], Any]:
    """``fn`` in a jitted ``buffer_callback`` with none of ``torch_call``'s checks: the
    DLPack imports, ``fn``, and one ``copy_`` into XLA's buffer (the floor of any callback
    that hands torch XLA's buffers; the DLPack imports are ``torch_call``'s own)."""
    from_capsule = _private.torch_capsules()[1]

    def body(ctx: Any, out: Any, x: Any) -> None:
        from_capsule(out[0].__dlpack__()).copy_(fn(from_capsule(x.__dlpack__())))

    return jax.jit(lambda x: _torch_callback.call_buffers(body, (spec,), None)(x)[0])


def case(size: int, calls: int | None, fn: Callable[[Any], Any] = add_one) -> dict[str, Sampler]:
    """Per candidate, a sampler of one call of ``fn`` (µs)."""
    x = jnp.linspace(-1, 1, size, dtype=jnp.float32)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)  # type: ignore[no-untyped-call]
    ours = interop.torch_call(fn, spec)
    names: dict[str, Any] = {
        "x": x,
        "jax": jax,
        "pure": jax.jit(fn),
        "ours": ours,
        "inside": jax.jit(lambda x: ours(x)),
        "callback": jax.jit(lambda x: jax.pure_callback(_host(fn), spec, x)),
        "fallback": _fallback(fn, spec, x),
    }
    if _torch_callback.BUFFERS_AVAILABLE:
        names["bare"] = _bare(fn, spec)
    statements = {
        PURE: "jax.block_until_ready(pure(x))",
        PIPELINED: "\n".join(["y = pure(x)"] * QUEUED + ["jax.block_until_ready(y)"]),
        OURS: "jax.block_until_ready(ours(x))",
        INSIDE: "jax.block_until_ready(inside(x))",
        CALLBACK: "jax.block_until_ready(callback(x))",
        FALLBACK: "jax.block_until_ready(fallback(x))",
    }
    if "bare" in names:
        statements[BARE] = "jax.block_until_ready(bare(x))"
    expected = fn(np.asarray(x))
    for statement in statements.values():  # compile every jit; check every answer
        scope = dict(names)
        exec(statement.replace("jax.block_until_ready(", "result = ("), scope)
        np.testing.assert_allclose(np.asarray(scope["result"]), expected, rtol=1e-6)
    return {
        name: statement_sampler(stmt, names, calls=calls, batch_seconds=5e-3)
        for name, stmt in statements.items()
    }


def shuffled_rounds(cases: dict[str, dict[str, Sampler]], rounds: int, seed: int = 0) -> Samples:
    """Per case, ``rounds`` batches of each candidate, the candidates in a seeded random
    order each round (every candidate follows every other one alike); after each case's
    first round, discarded, as a warm-up.

    Example:
        >>> shuffled_rounds({"c": {"a": lambda: 1.0, "b": lambda: 2.0}}, 2)
        {'c': {'a': [1.0, 1.0], 'b': [2.0, 2.0]}}
    """
    order = random.Random(seed)
    samples: Samples = {}
    for case_name, by_name in cases.items():
        names = list(by_name)
        samples[case_name] = {name: [] for name in names}
        for sampler in by_name.values():
            sampler()
        for _ in range(rounds):
            order.shuffle(names)
            for name in names:
                samples[case_name][name].append(by_name[name]())
    return samples


def run(
    *, quick: bool = False, calls: int | None = None, fn: str = "x + 1"
) -> dict[str, dict[str, float]]:
    """Best µs per call, per case and candidate, computing ``FUNCTIONS[fn]``."""
    rounds = 5 if quick else 61
    cases = {name: case(size, 4 if quick else calls, FUNCTIONS[fn]) for name, size in SIZES.items()}
    samples = shuffled_rounds(cases, rounds)
    results = {}
    for name, by_candidate in samples.items():
        best = {candidate: min(values) for candidate, values in by_candidate.items()}
        best[PIPELINED] /= QUEUED
        best[FLOOR] = min(best[PURE], best[PIPELINED])
        results[name] = best
    return results


def report(results: dict[str, dict[str, float]]) -> list[str]:
    """The table's lines: µs and the ratios to pure JAX and to ``pure_callback``, per case;
    then each target and its verdict."""
    lines = []
    for name, best in results.items():
        lines.append(f"  {name}")
        for candidate, us in best.items():
            if candidate == FLOOR:
                continue
            lines.append(
                f"    {candidate:<36} {us:9.1f} µs   {us / best[FLOOR]:6.2f}x pure JAX   "
                f"{us / best[CALLBACK]:6.3f}x pure_callback"
            )
    for numerator, denominator, name, target in TARGETS:
        if name in results:
            ratio = results[name][numerator] / results[name][denominator]
            verdict = "met" if ratio <= target else "MISSED"
            lines.append(
                f"  {name}: {numerator} / {denominator} = {ratio:.3f}x "
                f"(target {target}x: {verdict})"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the benchmark and print its table; returns the best µs per case and candidate.

    Args:
        argv: command-line arguments (``--quick``, ``--calls``).
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds of 4 calls")
    parser.add_argument("--calls", type=int, default=None, help="default: ~5 ms batches")
    parser.add_argument("--fn", choices=sorted(FUNCTIONS), default="x + 1")
    args = parser.parse_args(argv)
    results = run(quick=args.quick, calls=args.calls, fn=args.fn)
    path = "buffer_callback" if _torch_callback.use_buffers else "pure_callback (fallback)"
    print(
        f"torch_call per call of {args.fn}, cpu, jax {jax.__version__}, "
        f"torch {torch.__version__}, "
        f"torch_call through {path}{' (quick)' if args.quick else ''}; best of interleaved "
        "rounds"
    )
    for line in report(results):
        print(line)
    return results


if __name__ == "__main__":
    main()
