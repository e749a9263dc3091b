"""benchmarks/bench_jax_grad.py runs (quick mode) and prints every candidate it can measure.

No timing is asserted (CI machines are too noisy); the peers are benchmark-only
dependencies (``pip install 'functional-ws[bench]'``), reported missing where absent.
"""

from __future__ import annotations

from support.helpers import load_benchmark


def test_quick_run_measures_ours_and_pure_jax_and_names_the_peers(capsys):
    bench = load_benchmark("bench_jax_grad")
    results = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert set(results) == set(bench.SIZES)
    for name, best in results.items():
        assert best[bench.OURS] > 0 and best[bench.PURE] > 0 and best[bench.COPY] > 0
        for peer in (bench.JAX2TORCH, bench.TJI):
            assert peer in best or f"{name}: {peer} not installed" in out
        assert ("ratio" in best) == any(p in best for p in (bench.JAX2TORCH, bench.TJI))
