"""benchmarks/bench_handoff.py runs (quick mode) and shows the fast path well ahead."""

from __future__ import annotations

from support.helpers import load_benchmark


def test_quick_handoff_benchmark_runs_and_to_jax_beats_from_dlpack(capsys):
    bench = load_benchmark("bench_handoff")
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "interop.to_jax(view)" in out and "interop.to_torch(array)" in out
    ratios = {name: ratio for name, _, ratio in bench.run(quick=True)}
    # Far from the 0.25x target's edge on purpose: this is a smoke test on a noisy machine.
    assert ratios["interop.to_jax(view)"] < 0.5
