"""``make demo`` runs and says what it promises; the README's picture is the demo's, current.

The demo runs once (on the CPU, where it is deterministic) for every test here.
"""

import contextlib
import io
from pathlib import Path

import pytest
import torch
from PIL import Image

from interop._demo import run_demo

PICTURE = Path(__file__).resolve().parents[2] / "docs" / "layout.png"
REGENERATE = "docs/layout.png is stale: regenerate it with `make picture`"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    png = tmp_path_factory.mktemp("demo") / "layout.png"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        path = run_demo(torch.device("cpu"), png)
    return path, out.getvalue()


def test_demo_runs_on_cpu_and_writes_the_picture(demo):
    path, out = demo
    assert path is not None and path.stat().st_size > 10_000
    assert "step 3: the sampler's tail survived the step: True" in out
    assert "Workspace is locked" in out
    assert "shares the view's memory: True (aligned to 256)" in out
    assert f"layout picture written to {path}" in out


def test_demo_prints_the_layout_as_text(demo):
    _, out = demo
    text = out.split("\nlayout (one character = ", 1)[1].splitlines()
    bars = [line for line in text if line.startswith("  slot (")]
    assert [b.split(" |")[0] for b in bars] == ["  slot (0, 0)", "  slot (1, 0)"]
    # slot (0, 0) ends on the attention scratch (letter A at offset 0), both keep the tail.
    assert all(b.split("|")[1].startswith("A") and b.split("|")[1].endswith("R") for b in bars)
    assert "    A torch.bfloat16[512, 2048] @0" in text


def test_the_readme_picture_is_the_demos_current_one(demo):
    path, _ = demo
    fresh = Image.open(path).text["Description"].splitlines()
    committed = Image.open(PICTURE).text.get("Description", "(no summary)").splitlines()
    assert fresh == committed, REGENERATE
    assert Image.open(path).size == Image.open(PICTURE).size, REGENERATE
