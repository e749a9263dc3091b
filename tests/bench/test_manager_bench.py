"""The hot-path benchmark runs (briefly), and its statements ask what its constants say.

No timing is asserted here: CI machines are too noisy. The figures come from running
``benchmarks/bench_hot_path.py`` itself (see README). Its baseline is the shared
``ReferenceWorkspaceManager`` (``tests/kit/test_reference.py`` checks it against the original).
"""

import torch
from support.helpers import load_benchmark

from interop import WorkspaceManager
from interop._workspace._requests import canonical
from interop.testing import ReferenceWorkspaceManager

bench_hot_path = load_benchmark("bench_hot_path")


def test_quick_run_prints_every_case_and_returns_medians(capsys):
    results = bench_hot_path.main(["--quick"])
    out = capsys.readouterr().out
    assert set(results) == set(bench_hot_path.TARGETS)
    for case, medians in results.items():
        assert medians["ours"] > 0 and medians["baseline"] > 0 and medians["ratio"] > 0
        assert case in out
    assert "ratio_empty" in results["get_simultaneous x3"]
    for spelled in bench_hot_path.FLOORS:  # what CPython's lookup alone costs each spelling
        assert results[spelled]["floor"] > 0 and "vs_tuple" in results[spelled]
    assert "floor of 'vs tuple'" in out


def _run(statement: str, **names: object) -> object:
    """What one timed statement returns, its locals bound as the benchmark binds them."""
    scope = {"torch": torch, "device": torch.device("cpu"), **names}
    exec(bench_hot_path.LOCALS, scope)
    return eval(statement, scope)


def test_every_statement_builds_the_requests_the_constants_name():
    b = bench_hot_path
    ours, base = WorkspaceManager("cpu"), ReferenceWorkspaceManager(torch.device("cpu"))
    expected = {
        "get_simultaneous x1": [spec for spec in b.SPECS_1],
        "get_simultaneous x3": [spec for spec in b.SPECS_3],
        "get_retained": [b.RETAINED[1:]],
        "get_persistent": [b.PERSISTENT[1:]],
        **{case: list(b.SPECS_1) for case in b.SPELLED},
    }
    for case, statements in b.STATEMENTS.items():
        for name, statement in statements.items():
            result = _run(statement, ours=ours, base=base)
            if name == "spelling":  # the request itself, as the caller builds it
                assert canonical(result) == tuple(expected[case]), (case, name)
                continue
            if case == "get_retained":
                if name == "ours":  # the warm-up's key: a second call finds the span intact
                    assert _run(statement, ours=ours)[1]
                tensors = [result[0]]  # (view, intact)
            elif case == "get_persistent":
                tensors = [result]
            else:
                tensors = result
            got = [(tuple(t.shape), t.dtype) for t in tensors]
            assert got == expected[case], (case, name)


def test_baseline_lays_views_out_as_the_facade_does():
    device = torch.device("cpu")
    base = ReferenceWorkspaceManager(device)
    ours = WorkspaceManager(device)
    base_views = base.get_simultaneous(*bench_hot_path.SPECS_3)
    our_views = ours.get_simultaneous(*bench_hot_path.SPECS_3)
    for a, b in zip(base_views, our_views, strict=True):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
        assert a.data_ptr() - base_views[0].data_ptr() == b.data_ptr() - our_views[0].data_ptr()
