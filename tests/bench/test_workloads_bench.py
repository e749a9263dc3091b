"""The workload benchmark runs (``--quick``, in a subprocess) and prints every path's verdict.

No timing is asserted: the figures come from running ``benchmarks/bench_workloads.py``
itself. What is checked is the table's shape: every path, a PASS/MISS verdict on each, the
summary line, and exit status 0 whatever the verdicts (it measures; it does not judge).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from support.helpers import load_benchmark

bench_workloads = load_benchmark("bench_workloads")
ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_every_path_with_a_verdict_and_exits_zero():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_workloads.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("path"))
    assert "verdict" in lines[header]
    rows = {}
    for line in lines[header + 1 :]:
        match = re.match(r"(?P<path>.+?)\s{2,}.*\s(?P<verdict>PASS|MISS)$", line)
        if match:
            rows[match["path"].strip()] = match["verdict"]
    assert set(rows) == set(bench_workloads.TARGETS), lines
    summary = re.fullmatch(r"(\d+) of (\d+) targets missed(: .*)?", lines[-1])
    assert summary, lines[-1]
    assert int(summary[1]) == list(rows.values()).count("MISS")
    assert int(summary[2]) == len(bench_workloads.TARGETS)


def test_verdict_is_pass_at_the_target_and_miss_above_it():
    row = bench_workloads.Row("p", "", "", 0.7, 0.7, "0.700", "0.70")
    assert row.verdict == "PASS"
    assert bench_workloads.Row("p", "", "", 0.71, 0.7, "0.710", "0.70").verdict == "MISS"
