"""The hot-path benchmark runs (briefly), and its baseline does what the original did.

No timing is asserted here: CI machines are too noisy. The figures come from running
``benchmarks/bench_hot_path.py`` itself (see README).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_hot_path


def test_quick_run_prints_every_case_and_returns_medians(capsys):
    results = bench_hot_path.main(["--quick"])
    out = capsys.readouterr().out
    assert set(results) == set(bench_hot_path.TARGETS)
    for case, medians in results.items():
        assert medians["ours"] > 0 and medians["baseline"] > 0 and medians["ratio"] > 0
        assert case in out
    assert "ratio_empty" in results["get_simultaneous x3"]


def test_baseline_lays_views_out_as_the_manager_does():
    device = torch.device("cpu")
    base = bench_hot_path.OriginalAlgorithm(device, 32 << 20)
    base_views = base.get_simultaneous(*bench_hot_path.SPECS_3)
    ours = bench_hot_path.WorkspaceManager(device)
    our_views = ours.get_simultaneous(*bench_hot_path.SPECS_3)
    for a, b in zip(base_views, our_views, strict=True):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
        assert a.data_ptr() - base_views[0].data_ptr() == b.data_ptr() - our_views[0].data_ptr()
    view, intact = base.get_retained(*bench_hot_path.RETAINED)
    assert not intact and base.get_retained(*bench_hot_path.RETAINED)[1]
    assert view.shape == bench_hot_path.RETAINED[1]
