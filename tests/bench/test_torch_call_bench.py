"""benchmarks/bench_torch_call.py runs (quick mode), checks every candidate's answer, and
prints each ratio it has a target for.

No timing is asserted (CI machines are too noisy): the full run's figures are in README.md.
"""

from __future__ import annotations

import pytest
import torch
from support.helpers import load_benchmark


def test_quick_run_measures_every_candidate_and_prints_the_targets(capsys):
    bench = load_benchmark("bench_torch_call")
    results = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert set(results) == set(bench.SIZES)
    candidates = {bench.PURE, bench.PIPELINED, bench.FLOOR, bench.OURS, bench.INSIDE}
    candidates |= {bench.CALLBACK, bench.FALLBACK}
    if bench._torch_callback.BUFFERS_AVAILABLE:
        candidates.add(bench.BARE)
    for best in results.values():
        assert set(best) == candidates and all(us > 0 for us in best.values())
    for numerator, denominator, name, target in bench.TARGETS:
        assert f"{name}: {numerator} / {denominator} = " in out
        assert f"(target {target}x: " in out


def test_the_gpu_checks_of_torch_call_import_and_skip_without_cuda():
    """benchmarks/gpu_check.py runs them on a GPU; here they must import and say SKIP."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs these checks in benchmarks/gpu_check.py")
    gpu_jax = load_benchmark("_gpu_jax")
    for check in (gpu_jax.torch_call_stream_ordering, gpu_jax.torch_call_on_cuda):
        assert check in gpu_jax.CHECKS
        ((name, result, detail),) = check()
        assert result == "SKIP" and detail == "no CUDA device", name
