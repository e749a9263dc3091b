"""What a manager shows: :meth:`WorkspaceManager.stats`, its pictures (``plot``, the
notebook display, ``repr``), the last layouts and spans they draw, and recordings.

Part of the façade (``_facade.py`` composes it into :class:`interop.WorkspaceManager`): it
reads the engine's state and the memos' last plans, and changes nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch

import functional_ws as fws

from ._allocators import RetiredTracking
from ._display import manager_html, manager_plot, manager_repr
from ._engine import Engine
from ._history import History
from ._memo import Memos, last_plans
from ._recording import Recorder
from ._stats import WorkspaceStats, collect


class Displays:
    """The reading and display methods of :class:`interop.WorkspaceManager`."""

    _engine: Engine
    _memos: Memos
    _allocator: RetiredTracking  # the adaptor stack (``_allocators.allocator_stack``)
    _recorder: Recorder
    _device: torch.device

    def stats(self) -> WorkspaceStats:
        """Per slot capacity, high-water mark, growth count, retired-but-pinned bytes, allocator.

        Returns:
            A :class:`WorkspaceStats`; ``pinned_bytes`` counts retired buffers that live
            views (or arrays imported from them) still hold; ``allocator`` says where the
            bytes live (``"torch"``, ``"jax"`` or the callable's name).

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu", allocator="jax")
            >>> _ = ws.get_simultaneous(((100,), torch.float32))
            >>> s = ws.stats().slots[0]
            >>> s.capacity, s.high_water, s.growths, s.pinned_bytes, s.allocator
            (512, 512, 1, 0, 'jax')
        """
        return collect(self._engine.state, self._allocator.retired.pinned(), self._allocator.name)

    @property
    def last_layouts(self) -> dict[tuple[int, int], fws.Layout]:
        """Per slot, the layout of the last :meth:`get_simultaneous` (what pictures draw)."""
        return last_plans(self._engine.state, self._memos.acquired)

    @property
    def last_spans(self) -> dict[tuple[int, int], fws.Span]:
        """Per slot, the span of the last :meth:`get_retained` (drawn intact or clobbered)."""
        return last_plans(self._engine.state, self._memos.retained)

    def recording(self) -> AbstractContextManager[History]:
        """Record every public call and the state after it, until the block ends.

        Calls from every thread are recorded, each once (a public method calling another
        is recorded as the outer call); recordings nest, each receiving every call made
        inside its block. ``Record.state`` is the manager's state right after the call.

        Returns:
            A context manager yielding the :class:`interop.History`.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> with ws.recording() as history:
            ...     _ = ws.get_simultaneous(((100,), torch.float32))
            ...     _ = ws.get_simultaneous(((10,), torch.float32))
            >>> history.capacities()
            {(0, 0): [0, 512, 512]}
        """
        return self._recorder.recording(self)

    def plot(self, ax: Any = None) -> Any:
        """A matplotlib figure of the workspace: :func:`functional_ws.plot` of this
        manager's state, last layouts and last spans.

        Raises:
            ImportError: matplotlib is not installed (``pip install 'functional-ws[plot]'``).
        """
        state, device, allocator = self._engine.state, self._device, self._allocator.name
        return manager_plot(state, self.last_layouts, self.last_spans, device, allocator, ax)

    def _repr_html_(self) -> str:
        state, device, allocator = self._engine.state, self._device, self._allocator.name
        return manager_html(state, self.last_layouts, self.last_spans, device, allocator)

    def __repr__(self) -> str:
        return manager_repr(self._engine.state, self._device, self._allocator.name)
