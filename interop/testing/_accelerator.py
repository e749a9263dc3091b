"""Check a verbatim copy of vLLM's manager on a CPU-only machine.

vLLM's ``WorkspaceManager`` calls ``torch.accelerator.empty_cache()`` on every growth, and
with a CPU-only torch that call raises ``RuntimeError: Cannot access accelerator device when
none is available``: the class cannot grow a CPU workspace at all, so the kit would stop at
its first growth. :func:`no_accelerator_cache` turns the cache calls into no-ops for as long
as it is active, and only where no accelerator exists (there, there is no cache to empty):
on a GPU machine it changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


def _nothing_to_empty() -> None:
    """Stands in for ``empty_cache`` where no accelerator exists."""


def accelerator_present() -> bool:
    """Whether ``torch.accelerator`` sees a device (``False`` on a torch without it)."""
    accelerator = getattr(torch, "accelerator", None)
    return accelerator is not None and bool(accelerator.is_available())


@contextlib.contextmanager
def no_accelerator_cache() -> Iterator[bool]:
    """Make ``torch.accelerator.empty_cache()`` and ``torch.cuda.empty_cache()`` no-ops here.

    Only where no accelerator is present; with one, the real calls stay (they work there).
    The functions are replaced in the ``torch`` modules themselves, so code that looks them
    up at call time, as vLLM's class does, sees the no-ops; they are put back on exit, also
    when nested. The replacement is process-wide: do not rely on the real calls from other
    threads meanwhile.

    Yields:
        Whether the calls were replaced (``False`` where an accelerator is present).

    Example:
        >>> import torch
        >>> with no_accelerator_cache() as replaced:
        ...     torch.accelerator.empty_cache()  # raises on CPU-only torch outside the block
        >>> replaced == (not torch.accelerator.is_available())
        True
    """
    if accelerator_present():
        yield False
        return
    targets: list[Any] = [getattr(torch, "accelerator", None), torch.cuda]
    saved = [(module, module.empty_cache) for module in targets if module is not None]
    for module, _ in saved:
        module.empty_cache = _nothing_to_empty
    try:
        yield True
    finally:
        for module, original in saved:
            module.empty_cache = original
