"""What the façade tells people: its logger, the debug switch and the caller's frame."""

from __future__ import annotations

import logging
import os
import runpy
import sys

import functional_ws

from ._private import interpreter_files

logger = logging.getLogger("interop")

#: Either variable set to a non-zero int (or true, yes, on) turns the debug log on (the second
#: for migrating vLLM users, read as vLLM reads it).
DEBUG_VARIABLES = ("FUNCTIONAL_WS_DEBUG", "VLLM_DEBUG_WORKSPACE")
_TRUE = {"true", "yes", "on"}

_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (functional_ws.__file__, __file__)
    if path is not None
)
#: Library files that play the user: the demo's requests are named as a user's would be.
_USER_FILES = frozenset({os.path.join(os.path.dirname(os.path.abspath(__file__)), "_demo.py")})
#: The interpreter's own frames between ``python -m``/``runpy`` and the user's code, for
#: interpreters that do not freeze these modules (frozen ones are named ``<frozen ...>``).
_INTERPRETER_FILES = frozenset(
    (*(os.path.abspath(p) for p in (runpy.__file__,) if p is not None), *interpreter_files())
)


def debug_enabled() -> bool:
    """Whether the debug log is on; read at each lock and unlock, and at a growth's log
    (never per view)."""
    return any(_switched_on(os.environ.get(name, "")) for name in DEBUG_VARIABLES)


def _switched_on(value: str) -> bool:
    """A debug variable's value as vLLM reads ``VLLM_DEBUG_WORKSPACE`` (``bool(int(v))``: any
    non-zero int), or a word (``true``, ``yes``, ``on``)."""
    value = value.strip().lower()
    try:
        return int(value) != 0
    except ValueError:
        return value in _TRUE


def is_user_file(filename: str) -> bool:
    """Whether a frame of ``filename`` is the user's: neither this library nor the interpreter.

    The library is the ``interop`` and ``functional_ws`` packages, except the demo, which
    plays the user; the interpreter is its frozen modules (``<frozen runpy>``) and the files of
    ``runpy`` and ``importlib``'s bootstrap. ``<string>`` (``python -c``), ``<stdin>`` and
    notebook cells are the user's.

    Args:
        filename: a code object's ``co_filename``.

    Returns:
        ``True`` for the user's code.

    Example:
        >>> is_user_file("<frozen runpy>"), is_user_file("<string>"), is_user_file(__file__)
        (False, True, False)
    """
    if filename.startswith("<frozen "):
        return False
    if not filename.startswith("<"):
        path = os.path.abspath(filename)
        if path in _INTERPRETER_FILES:
            return False
        if path.startswith(_LIBRARY_DIRS) and path not in _USER_FILES:
            return False
    return True


def caller_origin() -> str:
    """``file:line:function`` of the user's frame that called in, as the original wrote it.

    Frames in the ``interop`` and ``functional_ws`` packages are skipped, so the answer names
    the user's line whether it called the manager or a module-level function; so are the
    interpreter's own frames (``<frozen runpy>`` under ``python -m``), which are nobody's
    line. See :func:`is_user_file`.

    Returns:
        ``"script.py:12:main"``, or ``"unknown"`` when no frame is the user's.

    Example:
        >>> caller_origin().split(":")[0]  # a doctest runs in a "<doctest ...>" frame
        '<doctest interop._diagnostics.caller_origin[0]>'
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            return f"{os.path.basename(filename)}:{frame.f_lineno}:{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "unknown"
