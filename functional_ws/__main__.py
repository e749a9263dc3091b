"""``python -m functional_ws``: the demo (``make demo``) and the benchmarks (``bench``).

    python -m functional_ws                 # the demo on cuda if available, else cpu
    python -m functional_ws --device cpu --png layout.png
    python -m functional_ws bench [--quick] # the benchmarks' ratio tables

The pure core never imports torch; this command line drives the torch shell (``interop``).
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

BENCHMARKS = ("bench_hot_path.py", "bench_handoff.py")


def _benchmarks_dir() -> Path:
    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    if not folder.is_dir():
        raise SystemExit(
            f"the benchmarks live in the repository ({folder} not found): run this from a "
            "clone installed with `pip install -e .`"
        )
    return folder


def main(argv: list[str] | None = None) -> int:
    """Run the demo, or ``bench`` to run the benchmarks and print their ratio tables."""
    parser = argparse.ArgumentParser(prog="python -m functional_ws", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="the demo (the default)")
    bench = sub.add_parser("bench", help="run the benchmarks, print µs and ratios")
    bench.add_argument("--quick", action="store_true", help="a few seconds, rough numbers")
    for p in (parser, demo):
        p.add_argument("--device", default=None, help="torch device (default: cuda, else cpu)")
        p.add_argument("--png", default=None, help="where to write the layout picture")
    args = parser.parse_args(argv)
    if args.command == "bench":
        folder = _benchmarks_dir()
        for name in BENCHMARKS:
            print(f"\n=== {name} ===", flush=True)
            sys.argv = [name, *(["--quick"] if args.quick else [])]
            runpy.run_path(str(folder / name), run_name="__main__")
        return 0
    import torch

    from interop._demo import run_demo

    run_demo(None if args.device is None else torch.device(args.device), args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
