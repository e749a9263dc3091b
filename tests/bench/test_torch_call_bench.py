"""benchmarks/bench_torch_call.py runs (quick mode), checks every candidate's answer, and
prints each ratio it has a target for.

No timing is asserted (CI machines are too noisy): the full run's figures are in README.md.
"""

from __future__ import annotations

from support.helpers import load_benchmark


def test_quick_run_measures_every_candidate_and_prints_the_targets(capsys):
    bench = load_benchmark("bench_torch_call")
    results = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert set(results) == set(bench.SIZES)
    candidates = {bench.PURE, bench.OURS, bench.INSIDE, bench.CALLBACK, bench.FALLBACK}
    for best in results.values():
        assert set(best) == candidates and all(us > 0 for us in best.values())
    for numerator, denominator, name, target in bench.TARGETS:
        assert f"{name}: {numerator} / {denominator} = " in out
        assert f"(target {target}x: " in out
