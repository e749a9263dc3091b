"""benchmarks/bench_grad_boundary.py runs (quick mode) and prints every candidate, ratio and
verdict. No timing is asserted (CI machines are too noisy): the targets are the
benchmark's to report."""

from __future__ import annotations

import os
import subprocess
import sys

import jax.numpy as jnp
import pytest
from support.helpers import BENCHMARKS, load_benchmark


def test_quick_run_measures_every_candidate_and_gives_a_verdict(capsys):
    bench = load_benchmark("bench_grad_boundary")
    results = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert set(results) == {*bench.SIZES, *bench.PER_SAMPLE}
    for name in bench.SIZES:
        assert {
            bench.PURE,
            bench.OURS,
            bench.TORCH,
            bench.PUBLIC_APPLY,
            bench.BARE,
            "ratio",
        } == set(results[name])
    for name in bench.PER_SAMPLE:
        assert {bench.JAX_VMAP, bench.OURS_VMAP, bench.TORCH_VMAP, "ratio"} == set(results[name])
    assert all(best["ratio"] > 0 for best in results.values())
    assert out.count("ours / JAX's:") == len(results)


def test_sync_dispatch_is_set_before_jax_starts_and_refused_after():
    jnp.zeros(1).block_until_ready()  # this process's JAX has started: too late here
    bench = load_benchmark("bench_grad_boundary")
    with pytest.raises(SystemExit, match="started already"):
        bench.main(["--quick", "--sync-dispatch"])
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_grad_boundary.py"), "--quick", "--sync-dispatch"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "JAX's CPU dispatch synchronous" in done.stdout
