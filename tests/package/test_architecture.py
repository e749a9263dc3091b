"""The layers' rules, checked on the source: arrows point one way, no cycles, no hand-built
core values in the shell."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def _top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it is imported: :func:`_imports` without the
    imports inside functions and classes (those run only when called)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    deferred = ast.Module(
        body=[n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)],
        type_ignores=[],
    )
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(deferred):
        if isinstance(node, ast.If) and _is_type_checking(node):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
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
        "functional_ws._build",
    }
    # The presenter registry and the constructor builder sit below the state: they import
    # nothing of the package.
    assert _graph(CORE, "functional_ws._presenters")["functional_ws._presenters"] == set()
    assert _graph(CORE, "functional_ws._build")["functional_ws._build"] == set()


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


# ----- the manager's rooms (interop/_workspace/README.md) -----

#: The façade's modules and what sits above them (the module API, the command line).
ABOVE_THE_FACADE = {
    "interop",
    "interop.__main__",
    "interop._cli",
    "interop._demo",
    "interop._module_api",
    "interop._workspace._facade",
}


def _shell_graph() -> dict[str, set[str]]:
    """The shell's imports, without the package itself: the shell's modules name it only in
    ``from . import _submodule`` (which :func:`_imports` also counts as the package)."""
    return {m: deps - {"interop"} for m, deps in _graph(SHELL, "interop").items()}


def test_shell_has_no_import_cycle():
    assert _cycle(_shell_graph()) is None


def test_nothing_below_the_facade_imports_it():
    graph = _shell_graph()
    facade = {m for m in ABOVE_THE_FACADE if m.startswith("interop._workspace._facade")}
    below = {m: deps & facade for m, deps in graph.items() if m not in ABOVE_THE_FACADE}
    assert not {m: deps for m, deps in below.items() if deps}


def _is_own_mutex(expr: ast.expr) -> bool:
    """Whether ``expr`` is a mutex reached from ``self`` (``self._mutex``, ``self.x._mutex``)."""
    if not (isinstance(expr, ast.Attribute) and "mutex" in expr.attr):
        return False
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id == "self"


def _takes_a_lock(source: str) -> bool:
    """Whether ``source`` takes a lock reached from ``self``: ``with self._mutex:`` or
    ``self._mutex.acquire()`` (and the same through an attribute, ``self.engine._mutex``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.With) and any(_is_own_mutex(i.context_expr) for i in node.items):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "acquire"
            and _is_own_mutex(node.func.value)
        ):
            return True
    return False


def test_the_lock_finder_finds_each_way_of_taking_the_mutex():
    samples = {
        "with self._mutex:\n    pass": True,
        "self._mutex.acquire()": True,
        "self.engine._mutex.acquire(timeout=1)": True,
        "with self._engine._mutex, open(f):\n    pass": True,
        "self._mutex.release()": False,
        "other._mutex.acquire()": False,
        "with self._lock:\n    pass": False,
    }
    assert {code: _takes_a_lock(code) for code in samples} == samples


def test_only_the_engine_takes_the_managers_mutex():
    takers = sorted(
        p.name for p in SHELL.rglob("*.py") if _takes_a_lock(p.read_text(encoding="utf-8"))
    )
    assert takers == ["_engine.py"]


#: The frameworks whose private names only ``interop/_private.py`` may use (``sys._getframe``
#: is not among them: the ``sys`` documentation describes it).
FRAMEWORKS = frozenset({"torch", "jax", "jaxlib", "numpy", "np", "os", "importlib", "ml_dtypes"})
#: Private attributes of framework objects reached through a value rather than a module
#: (``tensor._base``, ``array.sharding._device``...) and the marks Dynamo reads.
FRAMEWORK_PRIVATE_NAMES = frozenset({
    "_base", "_cdata", "_data", "_device", "_backends", "_free_weak_ref", "_new_with_weak_ptr",
    "_single_device_array_to_np_array_did_copy", "_torchdynamo_disable",
    "_torchdynamo_disable_msg", "_dynamo_marked_constant", "_storage_Use_Count",
    "_to_dlpack", "_from_dlpack", "_is_view", "_version",
})  # fmt: skip
#: Names of our own objects, whose attributes may share a framework's private names.
OWN = frozenset({"self", "cls"})


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``, or ``None`` if it is not a plain dotted name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _private_framework_uses(source: str) -> list[str]:
    """Each use of a framework's private name in ``source`` (code only: docstrings and
    comments may name them), as ``line: what``."""
    found: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in FRAMEWORKS and any(map(_is_private, parts[1:])):
                    flag(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            parts = node.module.split(".")
            if parts[0] in FRAMEWORKS and (
                any(map(_is_private, parts[1:]))
                or any(_is_private(alias.name) for alias in node.names)
            ):
                flag(node, f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if node.attr in FRAMEWORK_PRIVATE_NAMES and not (dotted and dotted[0] in OWN):
                flag(node, f".{node.attr}")
            elif dotted and dotted[0] in FRAMEWORKS and _is_private(node.attr):
                flag(node, ".".join(dotted))
        elif isinstance(node, ast.keyword) and node.arg in FRAMEWORK_PRIVATE_NAMES:
            flag(node, f"{node.arg}=")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            flag(node, f"{node.func.id}(..., {node.args[1].value!r})")
    return found


def test_framework_private_hooks_live_in_one_module():
    """``torch._C``, ``jax._src``, ``os.environ._data``...: only in ``interop/_private.py``,
    each behind its version gate there (see its docstring)."""
    uses = {
        str(path.relative_to(ROOT)): found
        for path in sorted(SHELL.rglob("*.py"))
        if path.name != "_private.py"
        if (found := _private_framework_uses(path.read_text(encoding="utf-8")))
    }
    assert uses == {}


def test_the_private_use_finder_finds_each_kind():
    samples = {
        "from jax._src.lib import _jax": 1,
        "import importlib._bootstrap": 1,
        "from torch._C import _to_dlpack": 1,
        "f = torch._C._from_dlpack": 2,  # torch._C, and the known name
        "x = os.environ._data": 1,
        "b = tensor._base": 1,
        "d = array.sharding._device": 1,
        "v = getattr(os.environ, '_data', None)": 1,
        "vars(f).update(_torchdynamo_disable=True)": 1,
        "y = self._mutex": 0,
        "y = self._device": 0,
        "z = torch.cuda.current_stream()": 0,
        "from ._private import host_view": 0,
        "w = getattr(fn, '__name__', 'fn')": 0,
        '"""torch._C._to_dlpack in a docstring"""': 0,
    }
    assert {code: len(_private_framework_uses(code)) for code in samples} == samples


# ----- the shell's three areas (interop/README.md): the manager, the bridge, the shared parts


def _area_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("_workspace", "_bridge", "testing"):
        return parts[1]
    return "shared"


def _area_imports(area: str, *, top_level: bool) -> dict[str, set[str]]:
    """Per module of ``area``, the modules of other areas of the shell it imports."""
    found = {}
    for path in SHELL.rglob("*.py"):
        name = _module_name(path)
        if _area_of(name) != area:
            continue
        imports = _top_level_imports(path) if top_level else _imports(path)
        others = {m for m in imports if m.startswith("interop.") and _area_of(m) != area}
        if others:
            found[name] = others
    return found


def test_the_manager_imports_nothing_of_the_bridge_at_its_top():
    """``import interop._workspace`` (a torch-only manager) never imports JAX through the
    bridge: the JAX allocator and JAX's settings check are imported where they are used."""
    bridge = {
        module: {m for m in deps if _area_of(m) == "_bridge"}
        for module, deps in _area_imports("_workspace", top_level=True).items()
    }
    assert not {m: deps for m, deps in bridge.items() if deps}


def test_the_bridge_imports_the_manager_only_for_the_jax_allocator():
    """The bridge works on tensors and arrays, not on a manager: the one module that imports
    the manager's internals is the JAX allocator, which implements its allocator interface."""
    manager = {
        module: {m for m in deps if _area_of(m) == "_workspace"}
        for module, deps in _area_imports("_bridge", top_level=False).items()
    }
    assert {m: deps for m, deps in manager.items() if deps} == {
        "interop._bridge._jax_allocator": {
            "interop._workspace._providers",
            "interop._workspace._providers.Allocation",
            "interop._workspace._providers.InUse",
            "interop._workspace._providers.SlotAllocator",
            "interop._workspace._providers.check_allocation",
        }
    }


def test_the_shared_parts_import_an_area_only_to_publish_or_demonstrate_it():
    """The shared parts (errors, context, diagnostics, private hooks, compile) sit below both
    areas; only the package root, the module API and the demo reach up into them."""
    reaching_up = _area_imports("shared", top_level=False)
    assert set(reaching_up) <= {"interop", "interop._module_api", "interop._demo"}


def test_the_kit_uses_only_the_public_api():
    """``interop.testing`` checks any manager through the public API: it imports neither
    area's internals."""
    internals = {
        module: {m for m in deps if _area_of(m) in ("_workspace", "_bridge")}
        for module, deps in _area_imports("testing", top_level=False).items()
    }
    assert not {m: deps for m, deps in internals.items() if deps}


def test_every_lock_of_the_shell_is_renewed_after_a_fork():
    """A module that makes a ``threading.Lock`` registers it with ``interop/_locks.py``, so a
    fork while another thread holds it does not hang the child."""
    for path in SHELL.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        makes = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and _dotted(node.func) in (["threading", "Lock"], ["threading", "RLock"])
        ]
        if makes and path.name != "_locks.py":
            assert "renew_after_fork(" in source, f"{path.relative_to(ROOT)} makes a lock"
