"""benchmarks/bench_grad_boundary.py runs (quick mode) and prints every candidate, ratio and
verdict. No timing is asserted (CI machines are too noisy): the targets are the
benchmark's to report."""

from __future__ import annotations

from support.helpers import load_benchmark


def test_quick_run_measures_every_candidate_and_gives_a_verdict(capsys):
    bench = load_benchmark("bench_grad_boundary")
    results = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert set(results) == {*bench.SIZES, *bench.PER_SAMPLE}
    for name in bench.SIZES:
        assert {bench.PURE, bench.OURS, bench.TORCH, bench.PUBLIC_APPLY, "ratio"} == set(
            results[name]
        )
    for name in bench.PER_SAMPLE:
        assert {bench.JAX_VMAP, bench.OURS_VMAP, bench.TORCH_VMAP, "ratio"} == set(results[name])
    assert all(best["ratio"] > 0 for best in results.values())
    assert out.count("ours / JAX's:") == len(results)
