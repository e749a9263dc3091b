"""``make demo`` and ``python -m functional_ws bench`` run and say what they promise."""

import subprocess
import sys

import torch

from interop._demo import run_demo


def test_demo_runs_on_cpu_and_writes_the_picture(tmp_path, capsys):
    path = run_demo(torch.device("cpu"), tmp_path / "layout.png")
    out = capsys.readouterr().out
    assert path.exists() and path.stat().st_size > 10_000
    assert "step 3: the sampler's tail survived the step: True" in out
    assert "Workspace is locked" in out
    assert "shares the view's memory: True (aligned to 256)" in out
    assert f"layout picture written to {path}" in out


def test_cli_help_lists_bench():
    out = subprocess.run(
        [sys.executable, "-m", "functional_ws", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "bench" in out.stdout
