"""Per-handoff cost, torch <-> JAX: interop's handoff beside the raw DLPack calls, one run.

    JAX_PLATFORMS=cpu python benchmarks/bench_handoff.py            # full
    JAX_PLATFORMS=cpu python benchmarks/bench_handoff.py --quick    # a few seconds
    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/bench_handoff.py --device cuda

Each round times every candidate on the same three workspace-like views (float32, bfloat16,
int8, 256-byte aligned), interleaved so that machine noise hits all alike; the figure is the
median over rounds of the per-handoff time. Ratios are against ``jax.dlpack.from_dlpack``
(torch -> JAX) and ``torch.from_dlpack`` (JAX -> torch).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import torch

import interop
from interop._bridge import _dlpack

Row = tuple[str, float, float]  # (name, µs per handoff, ratio to its baseline)
SPECS = (((1024,), torch.float32), ((64, 64), torch.bfloat16), ((4096,), torch.int8))


def aligned_views(device: str) -> list[torch.Tensor]:
    """Three views carved from one buffer at 256-byte-aligned addresses."""
    sizes = [torch.Size(shape).numel() * dtype.itemsize for shape, dtype in SPECS]
    buf = torch.zeros(sum(sizes) + 256 * (len(sizes) + 1), dtype=torch.uint8, device=device)
    offset = (-buf.data_ptr()) % 256
    views = []
    for (shape, dtype), size in zip(SPECS, sizes, strict=True):
        views.append(buf[offset : offset + size].view(dtype).reshape(shape))
        offset += -(-size // 256) * 256
    return views


def _public_to_jax(view: torch.Tensor) -> jax.Array:
    with _dlpack.forced_path(private=False):
        return interop.to_jax(view)


def measure(
    candidates: dict[str, Callable[[object], object]],
    inputs: Sequence[object],
    *,
    rounds: int,
    number: int,
) -> dict[str, float]:
    """Median over interleaved rounds of µs per call, each call on one of ``inputs``."""
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for fn in candidates.values():  # warm up (first-use lookups, jit of nothing)
        for x in inputs:
            fn(x)
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(number):
                for x in inputs:
                    fn(x)
            elapsed = time.perf_counter() - start
            samples[name].append(elapsed / (number * len(inputs)) * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def run(device: str = "cpu", *, quick: bool = False) -> list[Row]:
    """Time both directions; rows are (name, µs per handoff, ratio to the raw call)."""
    views = aligned_views(device)
    rounds, number = (5, 40) if quick else (25, 200)
    to_jax_times = measure(
        {
            "jax.dlpack.from_dlpack(view)": lambda v: jax.dlpack.from_dlpack(v),
            "jax.dlpack.from_dlpack(view, copy=False)": lambda v: jax.dlpack.from_dlpack(
                v, copy=False
            ),
            "interop.to_jax(view)": lambda v: interop.to_jax(v),  # type: ignore[arg-type]
            "interop.to_jax(view) [public fallback]": _public_to_jax,  # type: ignore[dict-item]
        },
        views,
        rounds=rounds,
        number=number,
    )
    arrays = [interop.to_jax(v) for v in views]
    to_torch_times = measure(
        {
            "torch.from_dlpack(array)": lambda a: torch.utils.dlpack.from_dlpack(a),
            "interop.to_torch(array)": lambda a: interop.to_torch(a),  # type: ignore[arg-type]
        },
        arrays,
        rounds=rounds,
        number=number,
    )
    rows: list[Row] = []
    for times in (to_jax_times, to_torch_times):
        baseline = next(iter(times.values()))
        rows.extend((name, us, us / baseline) for name, us in times.items())
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke run)")
    parser.add_argument("--device", default="cpu", help="torch device of the views")
    args = parser.parse_args(argv)
    rows = run(args.device, quick=args.quick)
    print(
        f"handoff per array, {args.device}, jax {jax.__version__}, torch {torch.__version__}"
        f"{' (quick)' if args.quick else ''}"
    )
    width = max(len(name) for name, _, _ in rows)
    for name, us, ratio in rows:
        print(f"  {name:<{width}}  {us:8.2f} µs  {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
