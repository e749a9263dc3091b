"""Framework-private hooks: each behind a version gate, each with a public fallback.

Every use of another framework's internals (``torch._dynamo...``, ``jax._src...``) that
this package makes lives here, so that a framework upgrade breaks one room. Each hook says
which releases it was checked against, what gates it, and what happens without it.

- :func:`dynamo_skips_jax`: Dynamo runs JAX's Python code eagerly instead of tracing it.
  Private: ``torch._dynamo.trace_rules.add`` (torch 2.2 to 2.13, checked on 2.13), the rule
  Dynamo applies to the third-party libraries it never traces (NumPy, pandas...). Gate: the
  function exists. Fallback: nothing is changed, and JAX code inside a compiled function
  fails to trace as before; put it under ``torch.compiler.disable`` (public) or in a
  function wrapped with :func:`interop.jax_call`.
- :func:`constant_result`: ``torch.compiler.assume_constant_result`` without importing
  Dynamo. The public function imports ``torch._dynamo`` (over a second) only to set one
  attribute, ``_dynamo_marked_constant`` (torch 2.1 to 2.13, checked on 2.13), that Dynamo
  reads when it traces a call. Gate: torch older than 2.14, the releases checked. Fallback:
  the public function itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

_F = TypeVar("_F", bound=Callable[..., Any])
#: The torch releases whose Dynamo reads ``_dynamo_marked_constant`` (checked: 2.13).
_MARKED_CONSTANT_RELEASES = ((2, 1), (2, 14))

#: The modules Dynamo must not trace: JAX's Python code (``jax``) and jaxlib's.
JAX_MODULES = ("jax", "jaxlib")
_TRACE_RULES = "torch._dynamo.trace_rules"


def dynamo_skips_jax() -> bool:
    """Make Dynamo call JAX's functions eagerly (a graph break each) rather than trace them.

    What Dynamo did with JAX code in a compiled function (torch 2.13): it traced into
    ``jax.numpy`` and failed inside JAX with errors that give no clue (``sin requires
    ndarray or scalar arguments, got DynamicJaxprTracer``). Skipped, each JAX call runs
    as plain Python, as NumPy's do. If Dynamo is not imported yet (importing it costs
    over a second), the rule is added right after its import, by a one-shot import hook.

    Returns:
        Whether the rule is in force now (``False`` until Dynamo's first import, and where
        the gate fails: then nothing changes).

    Example:
        >>> import interop._private as private
        >>> private.dynamo_skips_jax() in (True, False)
        True
    """
    rules = sys.modules.get(_TRACE_RULES)
    if rules is not None:
        return _add_skips(rules)
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_TRACE_RULES, _add_skips))
    return False


def _torch_release() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def constant_result(fn: _F) -> _F:
    """Mark ``fn`` as ``torch.compiler.assume_constant_result`` does: Dynamo calls it while
    tracing and puts its result in the graph as a constant.

    Args:
        fn: a function of Python constants, returning Python constants.

    Returns:
        ``fn``, marked.

    Example:
        >>> def answer() -> int:
        ...     return 42
        >>> constant_result(answer) is answer
        True
    """
    low, high = _MARKED_CONSTANT_RELEASES
    if low <= _torch_release() < high:
        fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
        return fn
    public: Any = torch.compiler.assume_constant_result  # pragma: no cover - newer torch
    return public(fn)  # type: ignore[no-any-return]  # pragma: no cover


def _add_skips(rules: types.ModuleType) -> bool:
    add = getattr(rules, "add", None)
    if not callable(add):  # pragma: no cover - torch without trace_rules.add (< 2.2)
        return False
    try:
        for name in JAX_MODULES:
            add(name)
    except Exception:  # pragma: no cover - a changed rule: keep Dynamo's own behaviour
        return False
    return True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` once, right after module ``name`` is first executed."""

    def __init__(self, name: str, then: Callable[[types.ModuleType], object]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot: the finders below find the real module
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # pragma: no cover - a namespace package or a legacy loader
        spec.loader = _ThenLoader(spec.loader, self.then)  # a loader may serve other modules
        return spec


class _ThenLoader(importlib.abc.Loader):
    """``loader``, then ``then(module)`` once the module has run; the rest delegated."""

    def __init__(self, loader: Any, then: Callable[[types.ModuleType], object]) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        self.then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename...: for tracebacks
        return getattr(self.loader, name)
