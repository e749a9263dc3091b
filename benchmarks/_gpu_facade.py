"""GPU checks of the torch façade, run by ``benchmarks/gpu_check.py`` on a CUDA machine.

Each check returns rows ``(check, result, detail)``: the façade's test suite on ``cuda``, the
hot-path benchmark on ``cuda``, absolute alignment, CUDA graph capture and replay over views
of a locked workspace, growth refused during capture, and the peak memory of a growth.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from _gpu_common import Row, verdict

from interop import WorkspaceManager
from interop.errors import GrowthDuringCaptureError

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.device("cuda")
F32, U8 = torch.float32, torch.uint8
_new_stream: Callable[[], torch.cuda.Stream] = torch.cuda.Stream  # its __init__ is untyped


def facade_tests_on_cuda() -> list[Row]:
    """The façade's tests (CUDA-only ones included) with FUNCTIONAL_WS_TEST_DEVICE=cuda."""
    tests = sorted(str(p) for p in (ROOT / "tests" / "workspace").glob("test_manager*.py"))
    tests.append(str(ROOT / "tests" / "workspace" / "test_stateful_manager.py"))
    env = dict(os.environ, FUNCTIONAL_WS_TEST_DEVICE="cuda", HYPOTHESIS_PROFILE="ci")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    print(done.stdout[-4000:], done.stderr[-2000:], flush=True)
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1].strip("= ")
    return [("façade tests on cuda", verdict(done.returncode == 0), summary)]


def hot_path_on_cuda() -> list[Row]:
    """``bench_hot_path`` on cuda: per-call µs, ratio to the baseline and to torch.empty."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_hot_path

    results = bench_hot_path.measure(CUDA, rounds=21, calls=1000)
    for line in bench_hot_path.report(results):
        print(line)
    rows = []
    for case, m in results.items():
        target, beat_empty = bench_hot_path.TARGETS[case]
        ok = m["ratio"] <= target and (not beat_empty or m["ratio_empty"] < 1)
        empty = f", torch.empty {m['torch.empty']:.2f} µs" if "torch.empty" in m else ""
        rows.append(
            (
                f"hot path: {case}",
                verdict(ok),
                f"ours {m['ours']:.2f} µs, baseline {m['baseline']:.2f} µs{empty}, "
                f"ratio {m['ratio']:.2f} (target {target})",
            )
        )
    return rows


def alignment_on_cuda() -> list[Row]:
    """Every view's address is a multiple of 256, for every dtype."""
    ws = WorkspaceManager(CUDA)
    dtypes = [torch.bool, U8, torch.float16, torch.bfloat16, torch.int32, F32, torch.float64]
    views = ws.get_simultaneous(*[((3, 5), d) for d in dtypes])
    retained, _ = ws.get_retained("kv", (7,), torch.float16)
    bad = [v.dtype for v in [*views, retained] if v.data_ptr() % 256]
    return [("alignment on cuda", verdict(not bad), f"misaligned: {bad}" if bad else "all 256")]


def _captured_double(ws: WorkspaceManager, stream: torch.cuda.Stream) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):  # warm up on the capture stream
        a, b = ws.get_simultaneous(((4096,), F32), ((4096,), F32))
        b.copy_(a * 2)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        a, b = ws.get_simultaneous(((4096,), F32), ((4096,), F32))
        b.copy_(a * 2)
    return graph


def graph_capture_and_replay() -> list[Row]:
    """Capture a graph over views of a locked workspace; replay reads new inputs."""
    ws = WorkspaceManager(CUDA)
    ws.reserve(((4096,), F32), ((4096,), F32))
    ws.lock()
    graph = _captured_double(ws, _new_stream())
    source, target = ws.get_simultaneous(((4096,), F32), ((4096,), F32))
    results = []
    for value in (1.0, 5.0):
        source.fill_(value)
        graph.replay()
        torch.cuda.synchronize()
        results.append(bool(target.eq(2 * value).all()))
    return [("graph capture + replay", verdict(all(results)), f"replays correct: {results}")]


def growth_refused_during_capture() -> list[Row]:
    """Unlocked, a growth requested during capture raises and changes nothing."""
    ws = WorkspaceManager(CUDA)
    ws.reserve(((4096,), F32), ((4096,), F32))
    stream = _new_stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        ws.get_simultaneous(((4096,), F32), ((4096,), F32))
    torch.cuda.synchronize()
    before = ws.state
    refused = ""
    with torch.cuda.graph(graph, stream=stream):
        a, b = ws.get_simultaneous(((4096,), F32), ((4096,), F32))
        b.copy_(a + 1)
        try:
            ws.get_simultaneous(((1 << 24,), F32))
        except GrowthDuringCaptureError as err:
            refused = type(err).__name__
    graph.replay()
    torch.cuda.synchronize()
    ws.get_simultaneous(((1 << 24,), F32))  # after capture it grows
    ok = bool(refused) and ws.state.slots[0].growths == before.slots[0].growths + 1
    return [("growth refused in capture", verdict(ok), refused or "NOT refused")]


def growth_peak() -> list[Row]:
    """max_memory_allocated during a growth with no pinned views <= new capacity + alignment."""
    ws = WorkspaceManager(CUDA)
    old, new = 256 << 20, 512 << 20
    ws.get_simultaneous(((old,), U8))
    torch.cuda.synchronize()
    others = torch.cuda.memory_allocated() - old
    torch.cuda.reset_peak_memory_stats()
    ws.get_simultaneous(((new,), U8))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - others
    limit = new + ws.state.alignment
    detail = f"peak {peak} B for a {old} B -> {new} B growth (limit {limit} B)"
    return [("growth peak", verdict(peak <= limit), detail)]


CHECKS: list[Callable[[], list[Row]]] = [
    alignment_on_cuda,
    graph_capture_and_replay,
    growth_refused_during_capture,
    growth_peak,
    hot_path_on_cuda,
    facade_tests_on_cuda,
]
