"""What the façade tells people: its logger, the debug switch and the caller's frame."""

from __future__ import annotations

import logging
import os
import sys

import functional_ws

logger = logging.getLogger("interop")

#: Either variable set to 1 turns the debug log on (the second for migrating vLLM users).
DEBUG_VARIABLES = ("FUNCTIONAL_WS_DEBUG", "VLLM_DEBUG_WORKSPACE")
_TRUE = {"1", "true", "yes", "on"}

_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (functional_ws.__file__, __file__)
    if path is not None
)


def debug_enabled() -> bool:
    """Whether the debug log is on; read at each lock, unlock and growth (never per view)."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in DEBUG_VARIABLES)


def caller_origin() -> str:
    """``file:line:function`` of the first frame outside this library, as the original wrote it.

    Frames in the ``interop`` and ``functional_ws`` packages are skipped, so the answer names
    the user's line whether it called the manager or a module-level function.
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_LIBRARY_DIRS):
            return f"{os.path.basename(filename)}:{frame.f_lineno}:{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "unknown"
