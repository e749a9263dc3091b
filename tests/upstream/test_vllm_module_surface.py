"""vLLM 0.33.0's and 0.34.0's workspace module, read (never run) from their sdists, against
``interop`` and against the README's table.

``vllm/v1/worker/workspace.py`` is parsed with :mod:`ast` (``tests/support/vllm_sdist.py``
fetches and pins it). Every public function of the module and public method of
``WorkspaceManager`` must exist in ``interop`` and take upstream's parameters, in upstream's
order, with a default where upstream has one (``interop`` may add keyword-only ones).
Upstream's module constant ``_VIEW_ALIGNMENT`` (0.34.0) must equal ours. And the README's
"API against the original" table must say of each release only what its module defines: a
row's ✓ means every name the row lists is defined there, and a public name defined there
gets a ✓.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from support.vllm_sdist import VLLM_0_33_0, VLLM_0_34_0, Sdist, sdist_member

import interop

MODULE = "vllm/v1/worker/workspace.py"
RELEASES = {"vLLM 0.33.0": VLLM_0_33_0, "vLLM 0.34.0": VLLM_0_34_0}
README = Path(__file__).resolve().parents[2] / "README.md"


class Surface:
    """What a release's workspace module defines, by name."""

    def __init__(self, source: str) -> None:
        tree = ast.parse(source)
        self.functions: dict[str, ast.FunctionDef] = {}
        self.methods: dict[str, ast.FunctionDef] = {}
        self.constants: dict[str, object] = {}
        self.names: set[str] = set()  # every name the module or the class defines
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef) and node.name == "WorkspaceManager":
                self.names.add(node.name)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        self.methods[item.name] = item
                for assign in ast.walk(node):  # self.x = ... in any method
                    if isinstance(assign, ast.Attribute) and isinstance(assign.ctx, ast.Store):
                        self.names.add(assign.attr)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.names.add(target.id)
                        if isinstance(node.value, ast.Constant):
                            self.constants[target.id] = node.value.value
            elif isinstance(node, ast.ImportFrom):
                self.names.update(alias.asname or alias.name for alias in node.names)
        self.names.update(self.functions, self.methods)


def surface(sdist: Sdist) -> Surface:
    return Surface(sdist_member(sdist, MODULE))


def _parameters(node: ast.FunctionDef) -> list[tuple[str, str, bool]]:
    """(name, kind, has a default) of each parameter, ``self`` left out."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    found = [(a.arg, "positional", d) for a, d in zip(positional, defaults, strict=True)]
    if args.vararg:
        found.append((args.vararg.arg, "*", False))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        found.append((arg.arg, "keyword", default is not None))
    return [p for p in found if p[0] != "self"]


def _ours(function: object) -> list[tuple[str, str, bool]]:
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.VAR_POSITIONAL: "*",
        inspect.Parameter.KEYWORD_ONLY: "keyword",
        inspect.Parameter.VAR_KEYWORD: "**",
    }
    return [
        (p.name, kinds[p.kind], p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
        if p.name != "self"
    ]


def _signatures(release: Sdist) -> list[tuple[str, ast.FunctionDef, object]]:
    """(name, upstream's definition, ours) of each public function and method."""
    found = surface(release)
    pairs = [(name, node, getattr(interop, name, None)) for name, node in found.functions.items()]
    pairs += [
        (f"WorkspaceManager.{name}", node, getattr(interop.WorkspaceManager, name, None))
        for name, node in found.methods.items()
    ]
    return [p for p in pairs if not p[0].rpartition(".")[2].startswith("_") or "__init__" in p[0]]


@pytest.mark.parametrize("release", RELEASES.values(), ids=lambda r: r.name)
def test_every_public_function_and_method_takes_upstreams_parameters(release):
    checked = _signatures(release)
    assert len(checked) >= 13  # seven functions, the constructor, five or six methods
    for name, node, ours in checked:
        assert ours is not None, f"{release.name}'s {name} is missing from interop"
        theirs, mine = _parameters(node), _ours(ours)
        assert mine[: len(theirs)] == theirs, (name, theirs, mine)
        extra = mine[len(theirs) :]
        assert all(kind == "keyword" and default for _, kind, default in extra), (name, extra)


def test_get_retained_and_the_alignment_constant_arrived_in_0_34_0():
    old, new = surface(VLLM_0_33_0), surface(VLLM_0_34_0)
    assert "get_retained" not in old.methods and "get_retained" in new.methods
    assert "_VIEW_ALIGNMENT" not in old.names
    assert new.constants["_VIEW_ALIGNMENT"] == interop._VIEW_ALIGNMENT == 256


# ----- the README's table -----


def _table() -> tuple[list[str], list[list[str]]]:
    """The header and rows of the README's "API against the original" table."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The API against the original", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return cells[0], cells[2:]


def _names(first_cell: str) -> list[str]:
    """The identifiers a row is about: each code span's leading name."""
    return re.findall(r"`([A-Za-z_]\w*)", first_cell)


@pytest.mark.parametrize("column", RELEASES)
def test_the_readmes_release_columns_say_only_what_each_release_defines(column):
    header, rows = _table()
    (at,) = [i for i, h in enumerate(header) if h == column or h.startswith(f"{column} (")]
    defined = surface(RELEASES[column]).names
    rows_about_names = [(row[0], _names(row[0]), row[at]) for row in rows if "`" in row[0]]
    assert any("get_retained" in names for _, names, _ in rows_about_names)
    for first, names, cell in rows_about_names:
        if cell.startswith("✓"):
            missing = [n for n in names if n not in defined]
            assert not missing, f"{column} has ✓ for {first!r}, but defines no {missing}"
        public = [n for n in names if not n.startswith("_")]
        if public and all(n in defined for n in public):
            assert cell.startswith("✓"), f"{column} defines {public}, yet says {cell!r}"
        if names and all(n in defined for n in names):
            assert cell, f"{column} defines {names}, yet its cell is empty"
