"""The README's "Transforms" table names, row by row, the test that checks what the row
says; each named test must exist (so a row cannot claim a check nobody runs), and the
table must cover every transform a user reaches for."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
#: What the table must have a row for (a word of the row's first cell each).
COVERED = (
    "eager autograd", "create_graph", "torch.func.grad", "jacrev", "hessian",
    "functional_call", "torch.func.vmap", "per-sample", "dual tensors", "torch.func.jvp",
    "is_grads_batched", "linearize", "eager`, `aot_eager`, `inductor", "fullgraph",
    "warm compile cache", "checkpointing", "DistributedDataParallel",
)  # fmt: skip


def _rows() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Transforms\n", 1)[1].split("\n### ", 1)[0]
    lines = section.split("\n| ", 1)[1].split("\n\n", 1)[0].splitlines()  # the first table
    lines = ["| " + lines[0], *lines[1:]]
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]]
    return [row for row in rows if not row[0].startswith("---")]


def test_every_row_names_a_test_that_exists():
    rows = _rows()
    assert len(rows) >= len(COVERED)
    for row in rows:
        found = TEST.findall(row[-1])
        assert found, f"the row {row[0]!r} names no test"
        for path, name in found:
            assert f"\ndef {name}(" in (ROOT / path).read_text(), (path, name)


def test_the_table_covers_every_transform():
    firsts = " ".join(row[0] for row in _rows())
    assert [what for what in COVERED if what not in firsts] == []
