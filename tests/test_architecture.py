"""The layers' rules, checked on the source: arrows point one way, no cycles, no hand-built
core values in the shell."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "functional_ws"
SHELL = ROOT / "interop"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (functions included), except under
    ``if TYPE_CHECKING:``; relative imports resolved, ``from a import b`` counted as both
    ``a`` and ``a.b`` (b may be a submodule)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _graph(folder: Path, prefix: str) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in folder.rglob("*.py")}
    return {
        name: {m for m in _imports(path) if m in modules and m != name}
        for name, path in modules.items()
        if name.startswith(prefix)
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph`` (a list of modules), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := dfs(node)):
            return found
    return None


def test_core_has_no_import_cycle():
    graph = _graph(CORE, "functional_ws")
    # A package's __init__ re-exporting its submodules is not an arrow back into it.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_state_module_is_the_floor():
    assert _graph(CORE, "functional_ws._state")["functional_ws._state"] <= {
        "functional_ws._errors",
        "functional_ws._checks",
        "functional_ws._presenters",
    }
    # The presenter registry sits below the state: it imports nothing of the package.
    assert _graph(CORE, "functional_ws._presenters")["functional_ws._presenters"] == set()


def test_core_never_imports_the_shell_or_torch():
    for path in CORE.rglob("*.py"):
        roots = {m.split(".")[0] for m in _imports(path)}
        assert not roots & {"interop", "torch", "runpy"}, path


def test_shell_never_builds_or_edits_core_values():
    for path in SHELL.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for forbidden in ("SlotState(", "WorkspaceState(", "dataclasses.replace(", "Layout(",
                          "Span("):  # fmt: skip
            assert forbidden not in text, f"{path.relative_to(ROOT)} writes {forbidden}"


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# ----- the shell's rooms (interop/README.md) -----

#: The façade's modules and what sits above them (the module API, the command line).
ABOVE_THE_FACADE = {
    "interop",
    "interop.__main__",
    "interop._cli",
    "interop._demo",
    "interop._module_api",
    "interop._facade",
    "interop._facade_plans",
    "interop._facade_persistent",
    "interop._facade_display",
}


def _shell_graph() -> dict[str, set[str]]:
    """The shell's imports, without the package itself: the shell's modules name it only in
    ``from . import _submodule`` (which :func:`_imports` also counts as the package)."""
    return {m: deps - {"interop"} for m, deps in _graph(SHELL, "interop").items()}


def test_shell_has_no_import_cycle():
    assert _cycle(_shell_graph()) is None


def test_nothing_below_the_facade_imports_it():
    graph = _shell_graph()
    facade = {m for m in ABOVE_THE_FACADE if m.startswith("interop._facade")}
    below = {m: deps & facade for m, deps in graph.items() if m not in ABOVE_THE_FACADE}
    assert not {m: deps for m, deps in below.items() if deps}


def _takes_a_lock(path: Path) -> bool:
    """Whether ``path`` enters a lock held by ``self`` (``with self._mutex:`` and kin)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.With):
            for item in node.items:
                expr = item.context_expr
                if (
                    isinstance(expr, ast.Attribute)
                    and isinstance(expr.value, ast.Name)
                    and expr.value.id == "self"
                    and "mutex" in expr.attr
                ):
                    return True
    return False


def test_only_the_engine_takes_the_managers_mutex():
    takers = sorted(p.name for p in SHELL.glob("*.py") if _takes_a_lock(p))
    assert takers == ["_engine.py"]
