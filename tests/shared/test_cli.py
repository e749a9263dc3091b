"""``python -m interop``: its help, its arguments, and the refusal naming the demo's line.

The console script is checked from a real install in ``tests/package/test_install.py``.
"""

import os
import re
import runpy
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest
import torch

import interop
from interop._cli import main
from interop._demo import png_path, text_picture
from interop._diagnostics import is_user_file

ROOT = Path(__file__).resolve().parents[2]


def _run_module(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "interop", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_help_keeps_the_example_lines_and_names_the_module(tmp_path):
    out = _run_module("--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "usage: python -m interop [-h] [--device DEVICE] [--png PATH]"
    assert "  python -m interop --device cpu --png layout.png" in lines
    assert "  python -m interop" in lines
    assert "``" not in out.stdout and "functional_ws" not in out.stdout


def test_help_takes_the_console_scripts_name_from_argv(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/functional-ws", "--help"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: functional-ws [-h]")


@pytest.mark.parametrize(
    ("device", "complaint"),
    [
        ("bogus", "'bogus' is not a torch device"),
        ("cuda", "'cuda': this torch sees no CUDA"),
        ("meta", "'meta': the demo runs on cpu or cuda"),
    ],
    ids=["unknown", "cuda-without-cuda", "meta"],
)
def test_a_bad_device_is_a_usage_error(device, complaint, capsys):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this torch sees a CUDA device")
    with pytest.raises(SystemExit) as exit_:
        main(["--device", device], prog="python -m interop")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "python -m interop: error: argument --device: " + complaint in err


@pytest.mark.parametrize(
    ("png", "complaint"),
    [
        ("x.jpg", "must name a .png file, got 'x.jpg'"),
        ("", "must name a file, got ''"),
        ("nowhere/x.png", "the folder 'nowhere' does not exist"),
        pytest.param(
            "/proc/functional_ws.png",
            "the file cannot be written there",  # even by root
            marks=pytest.mark.skipif(not Path("/proc").is_dir(), reason="no /proc here"),
        ),
    ],
    ids=["jpg", "empty", "missing-folder", "unwritable"],
)
def test_a_png_that_cannot_be_written_is_a_usage_error_before_the_demo(png, complaint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cpu", "--png", png], prog="python -m interop")
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert "python -m interop: error: argument --png: png " in captured.err
    assert complaint in captured.err and captured.out == ""  # nothing of the demo ran


def test_the_png_check_touches_nothing_and_refuses_what_is_no_file(tmp_path, monkeypatch):
    """A dangling link was followed (its target made, the link removed); a pipe blocked
    the probe. An existing file is kept as it was."""
    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path / "nowhere.png", "link.png")
    with pytest.raises(ValueError, match="not a regular file"):
        png_path("link.png")
    assert os.path.islink("link.png") and not (tmp_path / "nowhere.png").exists()
    os.mkfifo("pipe.png")
    with pytest.raises(ValueError, match="not a regular file"):
        png_path("pipe.png")
    Path("kept.png").write_bytes(b"old")
    assert png_path("kept.png") == Path("kept.png") and Path("kept.png").read_bytes() == b"old"
    assert png_path("new.png") == Path("new.png") and not Path("new.png").exists()


def test_a_png_without_a_suffix_gets_one_and_the_demo_says_which_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pictures").mkdir()
    assert png_path("layout") == Path("layout.png")
    with pytest.raises(ValueError, match="a folder"):
        png_path("pictures")


def test_the_module_runs_the_demo_and_its_refusal_names_the_demos_line(tmp_path):
    out = _run_module("--device", "cpu", "--png", "layout.png", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    refusal = out.stdout.split("refused while locked (WorkspaceLockedError):\n", 1)[1]
    assert refusal.lstrip().startswith("Workspace is locked but allocation from '_demo.py:")
    assert ":run_demo' requires" in refusal.splitlines()[0]
    assert "<frozen" not in out.stdout and "runpy" not in out.stdout
    assert (tmp_path / "layout.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("filename", "users"),
    [
        ("<frozen runpy>", False),
        ("<frozen importlib._bootstrap>", False),
        ("<frozen importlib._bootstrap_external>", False),
        (runpy.__file__, False),
        (interop.__file__, False),
        (str(Path(interop.__file__).parent / "_manager.py"), False),
        (str(Path(interop.__file__).parent / "testing" / "__init__.py"), False),
        (str(Path(interop.__file__).parent / "_demo.py"), True),
        ("<string>", True),
        ("<stdin>", True),
        (__file__, True),
        ("/home/me/train.py", True),
    ],
    ids=[
        "frozen-runpy", "frozen-bootstrap", "frozen-bootstrap-external", "runpy-file",
        "interop", "manager", "interop-testing", "demo", "python-c", "stdin", "this-test",
        "a-script",
    ],
)  # fmt: skip
def test_whose_frame_is_it(filename, users):
    assert is_user_file(filename) is users


def test_png_asked_but_not_written_exits_1_and_says_so(tmp_path, monkeypatch, capsys):
    """``--png`` given and no picture written (matplotlib missing) exits 1, saying so."""
    monkeypatch.setattr(interop._demo, "run_demo", lambda device, png: None)
    png = tmp_path / "layout.png"
    assert main(["--device", "cpu", "--png", str(png)], prog="python -m interop") == 1
    assert f"python -m interop: no picture written to {png}" in capsys.readouterr().err
    assert main(["--device", "cpu"], prog="python -m interop") == 0  # none asked for


def test_a_png_in_capitals_is_a_png(tmp_path):
    """The suffix is matched in any case: ``layout.PNG`` is a .png file."""
    assert png_path(tmp_path / "layout.PNG") == tmp_path / "layout.PNG"
    with pytest.raises(ValueError, match=r"must name a \.png file"):
        png_path(tmp_path / "layout.jpg")


def test_the_text_pictures_scale_covers_the_widest_slot():
    """The scale is rounded up, so ``width`` characters of it cover the widest slot."""
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((1000,), torch.uint8))  # 1024 B
    head = text_picture(ws, width=60).splitlines()[0]
    per_char = int(re.search(r"one character = (\d+) B", head).group(1))
    assert per_char == 18 and per_char * 60 >= 1024  # ceil(1024 / 60)
    assert unescape(head).startswith("layout (one character = 18 B;")
