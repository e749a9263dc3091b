"""GPU checks of the JAX interop, run by ``benchmarks/gpu_check.py`` on a CUDA machine.

Each check returns rows ``(check, result, detail)``; result is PASS, FAIL or INFO (a count
or a timing that documents a hazard rather than asserts it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
from _gpu_common import Row, verdict
from bench_handoff import aligned_views, run

import interop
from interop._bridge._handoff import SHARED_DTYPES

ROOT = Path(__file__).resolve().parents[1]
TRIALS = 20
SLEEP_CYCLES = 20_000_000  # about 10 ms of GPU time: makes a late write late for sure


def _cuda_view(nbytes: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
    buf = torch.zeros(nbytes + offset + 512, dtype=torch.uint8, device="cuda")
    start = (-buf.data_ptr()) % 256 + offset
    return buf[start : start + nbytes].view(dtype)


def zero_copy_per_dtype() -> list[Row]:
    """Every shared dtype, at aligned and odd offsets: aliased, bit-exact, round-trips."""
    failures = []
    dtypes = sorted(SHARED_DTYPES, key=str)
    for dtype in dtypes:
        for offset in (0, 16, 256):
            view = _cuda_view(64 * dtype.itemsize, dtype, offset)
            view.view(torch.uint8).copy_(
                torch.randint(0, 2 if dtype == torch.bool else 256, (view.nbytes,)).to(torch.uint8)
            )
            try:
                array = interop.to_jax(view)
                back = interop.to_torch(array)
            except interop.HandoffError as err:
                failures.append(f"{dtype}@{offset}: {type(err).__name__}")
                continue
            same = np.array_equal(
                np.asarray(array).reshape(-1).view(np.uint8),
                view.view(torch.uint8).cpu().numpy(),
            )
            if not (array.unsafe_buffer_pointer() == view.data_ptr() == back.data_ptr() and same):
                failures.append(f"{dtype}@{offset}")
    detail = f"{len(dtypes)} dtypes x offsets 0/16/256" + (
        f"; failed: {', '.join(failures)}" if failures else ""
    )
    return [("jax zero-copy per dtype (cuda)", verdict(not failures), detail[:200])]


def side_stream_race() -> list[Row]:
    """Torch writes on a side stream, JAX reads: raw from_dlpack vs to_jax(stream=side)."""
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    n = 1 << 22
    view = _cuda_view(n * 4, torch.float32)
    total = jax.jit(jnp.sum)

    def stale(handoff: Callable[[torch.Tensor], object]) -> int:
        count = 0
        for _ in range(TRIALS):
            view.zero_()
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                torch.cuda._sleep(SLEEP_CYCLES)  # type: ignore[no-untyped-call]
                view.fill_(1.0)
            count += float(total(handoff(view))) != n
            torch.cuda.synchronize()
        return count

    raw = stale(lambda v: jax.dlpack.from_dlpack(v))
    ours = stale(lambda v: interop.to_jax(v, stream=side))
    return [
        ("jax side-stream: raw from_dlpack", "INFO", f"{raw}/{TRIALS} stale reads"),
        ("jax side-stream: to_jax(stream=side)", verdict(ours == 0), f"{ours}/{TRIALS} stale"),
    ]


def _slow_sum(x: jax.Array) -> jax.Array:
    total: jax.Array = jax.lax.fori_loop(0, 200, lambda i, acc: acc + jnp.sin(x * i).sum(), 0.0)
    return total


def jax_call_reuse() -> list[Row]:
    """Overwrite the input region right after the call: the result must not change."""
    slow = jax.jit(_slow_sum)
    view = _cuda_view((1 << 20) * 4, torch.float32).fill_(1.0)
    expected = float(slow(jnp.ones(1 << 20, jnp.float32)))

    def wrong(call: Callable[[torch.Tensor], object]) -> int:
        count = 0
        for _ in range(TRIALS):
            view.fill_(1.0)
            result = call(view)
            view.fill_(3.0)  # the region is handed out again at once
            count += float(result) != expected  # type: ignore[arg-type]
        return count

    raw = wrong(lambda v: slow(jax.dlpack.from_dlpack(v)))
    ours = wrong(interop.jax_call(slow))
    return [
        ("jax_call reuse: raw from_dlpack", "INFO", f"{raw}/{TRIALS} wrong results"),
        ("jax_call reuse: jax_call", verdict(ours == 0), f"{ours}/{TRIALS} wrong results"),
    ]


def to_torch_ordering() -> list[Row]:
    """Torch reads a JAX result at once, on the current and on a side stream."""
    slow = jax.jit(lambda x: jax.lax.fori_loop(0, 200, lambda i, acc: jnp.sin(acc) + x, x))
    x = jnp.linspace(0.0, 1.0, 1 << 20, dtype=jnp.float32)
    expected = torch.from_numpy(np.asarray(slow(x))).cuda()
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    current = side_wrong = 0
    for _ in range(TRIALS):
        current += not torch.equal(interop.to_torch(slow(x)), expected)
        tensor = interop.to_torch(slow(x), stream=side)
        with torch.cuda.stream(side):
            copy = tensor.clone()
        side.synchronize()
        side_wrong += not torch.equal(copy, expected)
    return [
        ("to_torch ordering (current stream)", verdict(current == 0), f"{current}/{TRIALS}"),
        ("to_torch ordering (side stream)", verdict(side_wrong == 0), f"{side_wrong}/{TRIALS}"),
    ]


_PREALLOCATION_PROBE = """
import warnings, torch, interop
{setup}
free_before = torch.cuda.mem_get_info()[0]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    warned = warn_if_jax_preallocates("cuda:0")
import jax.numpy as jnp
jnp.ones(4).block_until_ready()
free_after = torch.cuda.mem_get_info()[0]
try:
    interop.configure_jax_for_sharing(mem_fraction=0.5)
    late = "accepted"
except interop.errors.JaxAlreadyStartedError:
    late = "refused"
print(warned, len(caught), round(free_before / 2**30, 1), round(free_after / 2**30, 1), late)
"""


def preallocation() -> list[Row]:
    """JAX's default preallocation is reported; configure_jax_for_sharing() prevents it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_PYTHON_CLIENT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    rows = []
    for name, setup, want_warning in (
        ("default", "", True),
        ("configured", "interop.configure_jax_for_sharing()", False),
    ):
        out = subprocess.run(
            [sys.executable, "-c", _PREALLOCATION_PROBE.format(setup=setup)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        if out.returncode:
            rows.append((f"jax preallocation ({name})", "FAIL", out.stderr.strip()[-150:]))
            continue
        warned, caught, before, after, late = out.stdout.split()
        took = float(before) - float(after)
        ok = (warned == "True") == want_warning and late == "refused"
        ok = ok and (took > 0.5 * float(before) if want_warning else took < 2.0)
        rows.append(
            (
                f"jax preallocation ({name})",
                verdict(ok),
                f"warned={warned} ({caught} warnings), free {before} -> {after} GiB, "
                f"configure after start {late}",
            )
        )
    return rows


def handoff_timings() -> list[Row]:
    """bench_handoff on CUDA views: µs per handoff and ratios to the raw DLPack calls."""
    rows = run("cuda", quick=False)
    out: list[Row] = []
    for name, us, ratio in rows:
        result = "INFO"
        if name == "interop.to_jax(view)":
            result = verdict(ratio <= 0.25)
        elif name == "interop.to_torch(array)":
            result = verdict(ratio <= 1.0)
        out.append((f"handoff {name}", result, f"{us:.2f} µs, {ratio:.2f}x"))
    return out


CHECKS: list[Callable[[], list[Row]]] = [
    zero_copy_per_dtype,
    side_stream_race,
    jax_call_reuse,
    to_torch_ordering,
    preallocation,
    handoff_timings,
]

__all__ = ["CHECKS", "aligned_views"]
