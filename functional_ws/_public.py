"""Exports print under the public module that exports them (JAX's package-structure rule).

Implementation lives in ``_``-prefixed modules; a package's ``__init__`` re-exports it and
calls :func:`publish`, so ``functional_ws.acquire`` says it is ``functional_ws.acquire`` (in
``help()``, reprs, tracebacks and pickles) rather than ``functional_ws._ops.acquire``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any


def is_private(module: str) -> bool:
    """Whether a dotted module path has a private component (``functional_ws._ops``).

    Example:
        >>> is_private("functional_ws._ops"), is_private("functional_ws.display")
        (True, False)
    """
    return any(part.startswith("_") for part in module.split("."))


def publish(module: str, namespace: Mapping[str, Any], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``module`` on each class and function among ``names`` in
    ``namespace`` whose own module is private; one exported by a public module already
    (a subpackage that exports it first, as :mod:`functional_ws.display` does ``render``)
    keeps that path.

    Args:
        module: the public module's name (its ``__name__``).
        namespace: its globals.
        names: its ``__all__``.

    Example:
        >>> def f() -> None: ...
        >>> f.__module__ = "pkg._impl"
        >>> publish("pkg", {"f": f}, ["f"])
        >>> f.__module__
        'pkg'
    """
    for name in names:
        obj = namespace[name]
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and is_private(obj.__module__):
            if inspect.isclass(obj):
                _publish_methods(obj, obj.__module__, module)
            obj.__module__ = module


def _publish_methods(cls: type, private: str, module: str) -> None:
    """The class's own functions follow it: :mod:`doctest` (and so ``pytest
    --doctest-modules``) collects a method's example only when the method's module is the
    module its class is found in."""
    for value in vars(cls).values():
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if inspect.isfunction(function) and function.__module__ == private:
            function.__module__ = module
