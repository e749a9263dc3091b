"""All GPU checks in one script: run on a CUDA machine, prints a short table last.

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/gpu_check.py

Each check is a function returning rows ``(check, result, detail)``; the sections live in
``benchmarks/_gpu_*.py`` beside this file (façade, JAX interop, ...). A failing check is
reported as FAIL with its error and the script goes on, so one run shows everything.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable

from _gpu_common import Row

SECTIONS = ("_gpu_facade", "_gpu_jax", "_gpu_allocators")


def main() -> int:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device; nothing to check.")
        return 0
    rows: list[Row] = []
    for name in SECTIONS:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            rows.append((name, "SKIP", f"not importable: {err}"))
            continue
        checks: list[Callable[[], list[Row]]] = module.CHECKS
        for check in checks:
            label = getattr(check, "__name__", repr(check))
            start = time.perf_counter()
            try:
                rows.extend(check())
            except Exception as err:  # report and go on
                traceback.print_exc()
                rows.append((label, "FAIL", f"{type(err).__name__}: {err}"[:120]))
            print(f"[{time.perf_counter() - start:6.1f}s] {label}", flush=True)
    width = max(len(r[0]) for r in rows) if rows else 10
    print("\n=== GPU check:", torch.cuda.get_device_name(), "===")
    for name_, result, detail in rows:
        print(f"{name_:<{width}}  {result:<5}  {detail}")
    return 1 if any(r[1] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
