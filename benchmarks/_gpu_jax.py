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
from typing import Any

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


def _on_cuda(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` recording, on each call, the torch stream it runs on."""

    def recorded(*tensors: torch.Tensor) -> torch.Tensor:
        _STREAMS_SEEN.append(torch.cuda.current_stream().cuda_stream)
        return fn(*tensors)

    return recorded


_STREAMS_SEEN: list[int] = []


def torch_call_stream_ordering() -> list[Row]:
    """torch_call on CUDA: fn's kernels run on the stream XLA gives the callback, ordered
    after the (slow) kernel that produced the input and before the JAX kernel that reads
    the result; a raw buffer_callback on torch's own stream is the control."""
    if not torch.cuda.is_available():
        return [("torch_call stream ordering", "SKIP", "no CUDA device")]
    from jax.experimental.buffer_callback import buffer_callback

    from interop._bridge import _torch_callback

    n = 1 << 20
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)  # type: ignore[no-untyped-call]

    def late_double(y: torch.Tensor) -> torch.Tensor:
        torch.cuda._sleep(SLEEP_CYCLES)  # type: ignore[no-untyped-call]
        return y * 2

    given: list[int] = []
    original = _torch_callback._on_xla_stream

    def spy(ctx: object, device: torch.device) -> object:
        given.append(int(ctx.stream))  # type: ignore[attr-defined]
        return original(ctx, device)

    _torch_callback._on_xla_stream = spy
    try:
        layer = interop.torch_call(_on_cuda(late_double), spec)

        @jax.jit
        def step(x: jax.Array) -> Any:
            slow = jax.lax.fori_loop(0, 200, lambda i, acc: jnp.sin(acc) + x, x)
            return layer(slow) + 1

        def raw_body(ctx: object, out: object, y: object) -> None:  # torch's current stream
            result = late_double(torch.utils.dlpack.from_dlpack(y))
            torch.utils.dlpack.from_dlpack(out).copy_(result)

        raw = buffer_callback(raw_body, spec)

        @jax.jit
        def raw_step(x: jax.Array) -> Any:
            slow = jax.lax.fori_loop(0, 200, lambda i, acc: jnp.sin(acc) + x, x)
            return raw(slow) + 1

        x = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32)
        expected = np.asarray(jax.jit(lambda x: jax.lax.fori_loop(
            0, 200, lambda i, acc: jnp.sin(acc) + x, x) * 2 + 1)(x))  # fmt: skip
        ours = sum(not np.allclose(np.asarray(step(x)), expected) for _ in range(TRIALS))
        control = sum(not np.allclose(np.asarray(raw_step(x)), expected) for _ in range(TRIALS))
    finally:
        _torch_callback._on_xla_stream = original
    same = bool(given) and given == _STREAMS_SEEN[-len(given) :]
    return [
        ("torch_call on XLA's stream", verdict(same and all(given)),
         f"streams given {sorted(set(given))[:3]}, fn ran on {sorted(set(_STREAMS_SEEN))[:3]}"),
        ("torch_call ordering (jit)", verdict(ours == 0), f"{ours}/{TRIALS} wrong results"),
        ("raw buffer_callback, torch's stream", "INFO", f"{control}/{TRIALS} wrong results"),
    ]  # fmt: skip


def torch_call_on_cuda() -> list[Row]:
    """torch_call's gradients, workspace scratch and caller's slot on CUDA."""
    if not torch.cuda.is_available():
        return [("torch_call on cuda", "SKIP", "no CUDA device")]
    import threading

    seen: list[tuple[str, tuple[int, int], int]] = []
    interop.init_workspace_manager("cuda")
    try:

        def layer_fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            (scratch,) = interop.current_workspace_manager().get_simultaneous(
                ((x.shape[0], w.shape[1]), x.dtype)
            )
            seen.append((str(scratch.device), interop.current_slot(), threading.get_ident()))
            return torch.tanh(x @ w + scratch.zero_())

        layer = interop.torch_call(
            layer_fn,
            lambda x, w: jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), x.dtype),  # type: ignore[no-untyped-call]
        )

        def loss(f: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
            return lambda x, w: jnp.sum(f(x, w) ** 2)

        x = jax.random.normal(jax.random.PRNGKey(0), (64, 32))
        w = jax.random.normal(jax.random.PRNGKey(1), (32, 16)) / 8
        with interop.use_workspace_ubatch(0):
            got = jax.jit(jax.grad(loss(layer), argnums=(0, 1)))(x, w)
        expected = jax.grad(loss(lambda x, w: jnp.tanh(x @ w)), argnums=(0, 1))(x, w)
        close = all(
            np.allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-5)
            for g, e in zip(got, expected, strict=True)
        )
    finally:
        interop.reset_workspace_manager()
    caller = threading.get_ident()
    devices = sorted({device for device, _, _ in seen})
    threads = "the caller's" if all(t == caller for _, _, t in seen) else "another"
    return [
        ("torch_call gradients (cuda)", verdict(close), "jit(grad) against pure JAX"),
        ("torch_call workspace scratch (cuda)", verdict(devices == ["cuda:0"]), f"{devices}"),
        ("torch_call callback thread (cuda)", "INFO", f"{threads} thread; slots {seen[:1]}"),
    ]


CHECKS: list[Callable[[], list[Row]]] = [
    zero_copy_per_dtype,
    side_stream_race,
    jax_call_reuse,
    to_torch_ordering,
    preallocation,
    handoff_timings,
    torch_call_stream_ordering,
    torch_call_on_cuda,
]

__all__ = ["CHECKS", "aligned_views"]
