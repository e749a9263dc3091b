"""Building the core's frozen dataclasses fast: constructors generated from their fields.

A transition builds a new :class:`~functional_ws.SlotState` and a new
:class:`~functional_ws.WorkspaceState` on every change, and a request never seen before
builds a :class:`~functional_ws.Layout`. A frozen dataclass's ``__init__`` sets each field
through ``object.__setattr__`` (a name lookup each) and runs ``__post_init__``; values a
transition computed from valid ones need neither. So each class gets a constructor made
once, at import, from ``dataclasses.fields(cls)`` (as equinox and attrs build theirs): it
takes the fields in order and stores each through its slot's descriptor. Adding a field to
a class changes nothing here.

What these constructors skip is validation: they are for values built from valid ones.
:func:`functional_ws.initial_state`, :func:`functional_ws.from_dict` and the classes' own
constructors validate.

Example:
    >>> import dataclasses
    >>> @dataclasses.dataclass(frozen=True, slots=True)
    ... class Point:
    ...     x: int
    ...     y: int = 0
    >>> new_point = fast_constructor(Point)
    >>> new_point(1, 2) == Point(1, 2), new_point(3) == Point(3)
    (True, True)
    >>> with_y = fast_replacer(Point, "y")
    >>> with_y(Point(1, 2), 5)
    Point(x=1, y=5)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _namespace(cls: type) -> dict[str, Any]:
    """The globals of the generated code: the class, ``object.__new__`` and each field's
    slot descriptor's ``__set__`` (what ``object.__setattr__`` calls for a slotted class);
    ``__name__`` is the class's module, whose constructors they are."""
    namespace: dict[str, Any] = {"_cls": cls, "_new": object.__new__, "__name__": cls.__module__}
    for field in dataclasses.fields(cls):
        namespace[f"_set_{field.name}"] = cls.__dict__[field.name].__set__
    return namespace


def _generated(
    cls: type, name: str, source: str, defaults: dict[str, Any] | None = None
) -> Callable[..., Any]:
    """The function ``name`` defined by ``source`` in the class's namespace (plus
    ``defaults``, which its signature reads when it is defined)."""
    namespace = _namespace(cls)
    namespace.update(defaults or {})
    exec(compile(source, f"<{name} of {cls.__qualname__}>", "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    function.__qualname__ = f"{name}[{cls.__qualname__}]"
    return function


def fast_constructor(cls: type[T]) -> Callable[..., T]:
    """A function of ``cls``'s fields (positional, in declaration order, with the same
    defaults) that builds an instance without ``__init__``.

    Args:
        cls: a frozen dataclass with ``slots=True``.
    """
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    defaults = {
        f"_default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING
    }
    params = ", ".join(
        f"{f.name}=_default_{f.name}" if f"_default_{f.name}" in defaults else f.name
        for f in fields
    )
    body = "".join(f"    _set_{f.name}(obj, {f.name})\n" for f in fields)
    source = f"def new({params}):\n    obj = _new(_cls)\n{body}    return obj\n"
    return _generated(cls, "new", source, defaults)


def fast_replacer(cls: type[T], name: str) -> Callable[[T, Any], T]:
    """A function ``(instance, value)`` returning a copy of ``instance`` whose field ``name``
    is ``value`` (``dataclasses.replace`` for one field, without ``__init__``).

    Args:
        cls: a frozen dataclass with ``slots=True``.
        name: one of its fields.
    """
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if name not in fields:
        raise ValueError(f"name must be a field of {cls.__qualname__}, got {name!r}.")
    body = "".join(
        f"    _set_{f}(obj, value)\n" if f == name else f"    _set_{f}(obj, old.{f})\n"
        for f in fields
    )
    source = f"def replace(old, value):\n    obj = _new(_cls)\n{body}    return obj\n"
    return _generated(cls, "replace", source)
