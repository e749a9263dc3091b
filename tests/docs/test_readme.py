"""The README runs as written: every python block, on the CPU, in a fresh interpreter.

Each block runs as a script with warnings as errors (``-W error``) and logging sent to
stderr, and must leave stderr empty: the retired-buffer warning is a ``logging`` warning,
and any other warning text fails too. A block that defines tests runs under pytest instead,
which must collect it without a warning (Hypothesis seeded, so every run draws the same
examples). A ``text`` block right after a python block is
what it prints, exactly. A template (code with your names in it) says so in its first line,
``# template: ...``, and is listed in ``TEMPLATES``.

After a change to what a block prints, ``python tests/docs/test_readme.py`` rewrites the output
blocks from fresh runs (read the diff before committing it).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: Blocks with your names in them, by section heading; each starts with "# template:".
TEMPLATES: set[str] = {"Checking any workspace manager: `interop.testing`"}
#: Blocks left out for now, by section heading, and why.
PENDING: dict[str, str] = {}

_BLOCK = re.compile(r"^```python\n(.*?)^```\n(?:\n```text\n(.*?)^```\n)?", re.S | re.M)
_HEADING = re.compile(r"^#{2,3} (.+)$", re.M)
_DEFINES_TESTS = re.compile(r"^(class Test\w*|def test_\w*|Test\w* = )", re.M)
# Logging to stderr, then the block as __main__ (its tracebacks name the block's file).
_RUNNER = (
    "import logging, runpy, sys; logging.basicConfig(); "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)


@dataclasses.dataclass(frozen=True)
class Block:
    """One python block of the README, where it is and what it should print."""

    heading: str
    code: str
    expected: str | None
    span: tuple[int, int]  # of the expected output in the README text, for the update


def readme_blocks(text: str) -> list[Block]:
    """Every python block with the heading above it; at most one block per heading."""
    blocks = []
    for match in _BLOCK.finditer(text):
        headings = _HEADING.findall(text, 0, match.start())
        blocks.append(Block(headings[-1], match.group(1), match.group(2), match.span(2)))
    return blocks


BLOCKS = readme_blocks(README.read_text())


def run_block(block: Block, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run a block in a fresh interpreter, in ``folder``, the way a reader would."""
    # On the CPU, even where a GPU is present: the outputs shown are the CPU's.
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JAX_PLATFORMS": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
    }
    if _DEFINES_TESTS.search(block.code):
        path = folder / "test_readme_block.py"
        command = [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider"]
        command.append("--hypothesis-seed=0")  # the same examples on every run
    else:
        path = folder / "readme_block.py"
        command = [sys.executable, "-W", "error", "-c", _RUNNER]
    path.write_text(block.code)
    return subprocess.run(
        [*command, str(path)], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


def test_every_heading_has_at_most_one_block_and_exclusions_exist():
    headings = [b.heading for b in BLOCKS]
    assert len(headings) == len(set(headings)), headings
    assert (TEMPLATES | set(PENDING)) <= set(headings)


def test_templates_say_so_in_their_first_line():
    said = {b.heading for b in BLOCKS if b.code.startswith("# template:")}
    assert said == TEMPLATES


@pytest.mark.parametrize(
    "block",
    [b for b in BLOCKS if b.heading not in TEMPLATES | set(PENDING)],
    ids=lambda b: b.heading,
)
def test_block_runs_as_written_without_a_warning(block, tmp_path):
    out = run_block(block, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr == "", out.stderr
    if _DEFINES_TESTS.search(block.code):
        assert re.search(r"^\d+ passed", out.stdout, re.M) and "warning" not in out.stdout
    if block.expected is not None:
        assert out.stdout == block.expected


def update_readme() -> None:
    """Rewrite each python block's output block with what the block prints now."""
    text = README.read_text()
    for block in reversed(readme_blocks(text)):
        if block.expected is None or block.heading in TEMPLATES | set(PENDING):
            continue
        with tempfile.TemporaryDirectory() as folder:
            out = run_block(block, Path(folder))
        if out.returncode != 0 or out.stderr:
            raise SystemExit(f"{block.heading}: the block fails\n{out.stderr}")
        text = text[: block.span[0]] + out.stdout + text[block.span[1] :]
    README.write_text(text)


if __name__ == "__main__":
    update_readme()
