"""GPU checks of ``WorkspaceManager(allocator="jax")``, run by ``benchmarks/gpu_check.py``.

With JAX's preallocation left ON (a subprocess without ``XLA_PYTHON_CLIENT_PREALLOCATE``),
JAX takes 75% of the GPU at its first operation. A workspace of several GiB with
``allocator="jax"`` then comes out of JAX's pool: it works where the same request from
torch's allocator fails or eats torch's remaining headroom. The child reports
``torch.cuda.memory_allocated()``, the device's free memory and JAX's memory stats before
and after, and checks zero-copy both ways (a workspace view handed to JAX, a JAX result
handed to torch).

    python benchmarks/_gpu_allocators.py --child    # the child alone, prints JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _gpu_common import Row, verdict

ROOT = Path(__file__).resolve().parents[1]
_GIB = 1 << 30


def _jax_stats(device: Any) -> dict[str, int]:
    stats = device.memory_stats() or {}
    return {
        k: int(stats[k]) for k in ("bytes_in_use", "bytes_limit", "bytes_reserved") if k in stats
    }


def _memory(torch: Any, jax_device: Any) -> dict[str, Any]:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {
        "torch_allocated": int(torch.cuda.memory_allocated()),
        "device_free": int(free),
        "device_total": int(total),
        "jax": _jax_stats(jax_device),
    }


def child() -> dict[str, Any]:
    """In a process where JAX preallocates: a multi-GiB ``"jax"`` workspace, and the figures."""
    import jax
    import jax.numpy as jnp
    import torch

    import interop

    jax_device = jax.devices("gpu")[0]
    jnp.zeros(1, device=jax_device).block_until_ready()  # JAX starts: it preallocates
    report: dict[str, Any] = {"preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")}
    report["before"] = before = _memory(torch, jax_device)
    limit = before["jax"].get("bytes_limit", 0)
    nbytes = max(_GIB, min(limit // 2, 48 * _GIB)) // _GIB * _GIB  # a multiple of 1 GiB
    report["nbytes"] = nbytes
    ws = interop.WorkspaceManager("cuda", allocator="jax")
    (view,) = ws.get_simultaneous(((nbytes,), torch.uint8))
    view.fill_(1)
    small, floats = ws.get_simultaneous(((16,), torch.uint8), ((1024,), torch.float32))
    floats.fill_(2.0)
    report["after"] = _memory(torch, jax_device)
    report["stats"] = str(ws.stats())
    array = interop.to_jax(floats)
    report["to_jax_aliases"] = array.unsafe_buffer_pointer() == floats.data_ptr()
    report["jax_sum"] = float(jnp.sum(array))
    result = jnp.arange(8, dtype=jnp.float32) * 2
    back = interop.to_torch(result)
    report["to_torch_aliases"] = back.data_ptr() == result.unsafe_buffer_pointer()
    report["aligned"] = all(v.data_ptr() % 256 == 0 for v in (view, small, floats))
    del view, small, floats, array
    try:  # the same request from torch's allocator, in what JAX left
        torch.empty((nbytes,), dtype=torch.uint8, device="cuda")
        report["torch_same_request"] = "fits"
    except torch.cuda.OutOfMemoryError:
        report["torch_same_request"] = "out of memory"
    return report


def jax_workspace_with_preallocation_on() -> list[Row]:
    """Run :func:`child` with JAX's preallocation on; one row per claim."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    env.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
    done = subprocess.run(
        [sys.executable, __file__, "--child"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return [("jax allocator, preallocation on", "FAIL", done.stderr.strip()[-200:])]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1), flush=True)
    before, after, nbytes = report["before"], report["after"], report["nbytes"]
    torch_growth = after["torch_allocated"] - before["torch_allocated"]
    jax_growth = after["jax"].get("bytes_in_use", 0) - before["jax"].get("bytes_in_use", 0)

    def gib(n: int) -> str:
        return f"{n / _GIB:.2f} GiB"

    return [
        (
            "jax workspace, prealloc on",
            verdict(torch_growth < _GIB and jax_growth >= nbytes),
            f"{gib(nbytes)} workspace: torch allocated +{gib(torch_growth)}, JAX in use "
            f"+{gib(jax_growth)} (limit {gib(after['jax'].get('bytes_limit', 0))}), device "
            f"free {gib(before['device_free'])} -> {gib(after['device_free'])}",
        ),
        (
            "same request from torch",
            "INFO",
            f"{report['torch_same_request']} with {gib(after['device_free'])} free",
        ),
        (
            "jax workspace zero-copy",
            verdict(
                report["to_jax_aliases"]
                and report["to_torch_aliases"]
                and report["aligned"]
                and report["jax_sum"] == 2048.0
            ),
            f"to_jax aliases {report['to_jax_aliases']}, to_torch aliases "
            f"{report['to_torch_aliases']}, 256-aligned {report['aligned']}, "
            f"sum {report['jax_sum']}",
        ),
    ]


CHECKS: list[Callable[[], list[Row]]] = [jax_workspace_with_preallocation_on]


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    print(json.dumps(child()))
