"""How core values present themselves: a registry that ``functional_ws.display`` fills.

The value modules (the state, plans, diffs) sit below the presentation and import nothing
above them; a value class inherits :class:`Presented`, and ``str(value)``, a notebook's HTML
and IPython's pretty text then use whatever renderer the display package installed for its
class (``import functional_ws`` always imports it). Without one they fall back to ``repr``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from html import escape
from typing import Any, Literal, TypeVar

Kind = Literal["text", "html"]
_RENDERERS: dict[tuple[type, str], Callable[[Any], str]] = {}
#: How displays name keys, newest first: each says ``None`` for a key it does not know.
_KEY_NAMERS: list[Callable[[Any], str | None]] = []


def install_presenter(cls: type, kind: Kind, render: Callable[[Any], str]) -> None:
    """Make ``str(value)`` (``kind="text"``) or a notebook's display (``"html"``) of every
    ``cls`` (and subclass) use ``render``."""
    _RENDERERS[(cls, kind)] = render


def present(value: object, kind: Kind) -> str | None:
    """``value`` rendered by the renderer installed for its class (or nearest base), if any."""
    for cls in type(value).__mro__:
        render = _RENDERERS.get((cls, kind))
        if render is not None:
            return render(value)
    return None


#: The lines a notebook's plain-text display keeps: the first and the last half of this
#: many (``str`` and ``print`` give every line). The HTML displays have bounds of their own.
PRETTY_LINES = 200
#: The characters a notebook's plain-text display keeps of one line.
PRETTY_LINE_CHARS = 1000


def bounded_text(text: str) -> str:
    """``text`` as a notebook's plain-text display shows it: at most :data:`PRETTY_LINES`
    lines (the first and the last half, a line between them counting those left out) of at
    most :data:`PRETTY_LINE_CHARS` characters each. A notebook stores this beside the HTML
    in the ``.ipynb``: a long recording must not make it megabytes.

    Example:
        >>> print(bounded_text("\\n".join(f"line {i}" for i in range(1000))).splitlines()[99:102])
        ['line 99', '... 800 lines not shown (print() shows every line) ...', 'line 900']
    """
    lines = text.split("\n")
    if len(lines) > PRETTY_LINES:
        half = PRETTY_LINES // 2
        left_out = len(lines) - 2 * half
        note = f"... {left_out} lines not shown (print() shows every line) ..."
        lines = [*lines[:half], note, *lines[-half:]]
    return "\n".join(
        line
        if len(line) <= PRETTY_LINE_CHARS
        else f"{line[:PRETTY_LINE_CHARS]}... ({len(line) - PRETTY_LINE_CHARS} more characters)"
        for line in lines
    )


class Presented:
    """A mixin: ``str``, ``_repr_html_`` and ``_repr_pretty_`` through the installed renderers.

    IPython prefers a ``__repr__`` defined by a class (a dataclass's) to a ``_repr_pretty_``
    it inherits, so a class with its own ``__repr__`` also names ``_repr_pretty_`` itself:
    ``_repr_pretty_ = Presented._repr_pretty_``.
    """

    __slots__ = ()

    def __str__(self) -> str:
        text = present(self, "text")
        return repr(self) if text is None else text

    def _repr_html_(self) -> str:
        html = present(self, "html")
        return f"<pre>{escape(str(self))}</pre>" if html is None else html

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(bounded_text(str(self)))


def install_key_namer(name: Callable[[Any], str | None]) -> None:
    """Make every display name a key (persistent, retained) as ``name(key)`` says, where it
    says something (``None``: not a key it knows). A shell that stores a user's key wrapped
    (the torch shell keeps ``get_persistent``'s tensors under ``(torch.Tensor, key)``)
    installs one that shows the key the user wrote; installing the same one again does
    nothing."""
    if name not in _KEY_NAMERS:
        _KEY_NAMERS.insert(0, name)


_C = TypeVar("_C", bound=type)


def robust_repr(cls: _C) -> _C:
    """Give a dataclass a ``repr`` that never raises for a key inside it: its own, or where a
    key's ``__repr__`` raises, the fields written with :func:`safe_repr` (the placeholder
    :func:`key_text` writes for such a key). A REPL's echo, pytest's assertion messages and
    debuggers call ``repr``."""
    generated: Callable[[Any], str] = cls.__dict__["__repr__"]  # the dataclass's own

    def __repr__(self: Any) -> str:
        try:
            return generated(self)
        except Exception:
            return fields_repr(self)

    __repr__.__qualname__ = f"{cls.__qualname__}.__repr__"
    type.__setattr__(cls, "__repr__", __repr__)
    return cls


def fields_repr(value: Any) -> str:
    """``Class(field=..., ...)`` of a dataclass instance, each field by :func:`safe_repr`."""
    parts = ", ".join(
        f"{field.name}={safe_repr(getattr(value, field.name))}"
        for field in dataclasses.fields(value)
        if field.repr
    )
    return f"{type(value).__qualname__}({parts})"


def safe_repr(value: object) -> str:
    """``repr(value)``; where that raises (a key's ``__repr__`` inside), the containers and
    dataclasses written part by part and the key as :func:`key_text` writes it.

    Example:
        >>> class Odd:
        ...     def __repr__(self):
        ...         raise ValueError("no")
        >>> safe_repr(("kv", Odd()))
        "('kv', <a key of type Odd whose repr raised ValueError>)"
    """
    try:
        return repr(value)
    except Exception:
        pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_repr(value)
    if isinstance(value, tuple):
        inner = ", ".join(safe_repr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, (frozenset, set)):
        inner = ", ".join(safe_repr(v) for v in value)
        return f"{type(value).__name__}({{{inner}}})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{safe_repr(k)}: {safe_repr(v)}" for k, v in value.items()) + "}"
    return key_text(value)


def key_text(key: object) -> str:
    """How displays write a key: as an installed namer names it, else its ``repr``, cut at
    :data:`KEY_CHARS` characters; a key whose ``repr`` (or namer) raises is written as a
    placeholder naming its type, so that a display never raises for a key.

    Example:
        >>> class Odd:
        ...     def __repr__(self):
        ...         raise ValueError("no")
        >>> key_text(("kv", 3)), key_text(Odd())
        ("('kv', 3)", '<a key of type Odd whose repr raised ValueError>')
    """
    for name in _KEY_NAMERS:
        try:
            text = name(key)
        except Exception:
            text = None
        if text is not None:
            return text  # a namer bounds what it names (the key inside, by key_text)
    try:
        return clipped(repr(key))
    except Exception as err:
        return f"<a key of type {type(key).__name__} whose repr raised {type(err).__name__}>"


#: The most characters a display writes of one key (a key's repr may be megabytes).
KEY_CHARS = 200


def clipped(text: str) -> str:
    """``text`` cut at :data:`KEY_CHARS` characters (a key's repr, a dtype's name)."""
    return text if len(text) <= KEY_CHARS else f"{text[: KEY_CHARS - 3]}..."
