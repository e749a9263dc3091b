"""The façade's persistent resources: :meth:`WorkspaceManager.get_persistent_resource` and
:meth:`~WorkspaceManager.get_persistent`.

Part of the façade (``_facade.py`` composes it into :class:`interop.WorkspaceManager`). The
hot path (a key the current slot holds) is a dictionary lookup written out here; a new key
goes to the slow paths (``_serving.py``), which claim it through the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

from functional_ws import ViewSpec

from .. import _context
from .._context import current_slot
from ._persistent import check_persistent_tensor, tensor_factory
from ._requests import canonical_shape, check_torch_dtypes, plain_shape
from ._serving import Server

T = TypeVar("T")


class PersistentResources:
    """The persistent-resource methods of :class:`interop.WorkspaceManager`."""

    _server: Server
    _tables: list[dict[Hashable, Any]]
    _device: torch.device
    _num_ubatches: int
    _num_lanes: int

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        """Return the resource cached for ``key`` in the current ubatch and lane.

        The first request calls ``factory`` and keeps its result for the manager's
        lifetime; later requests return the same object without calling it. Each slot has
        its own cache. While locked, a key missing from the slot's cache raises. A factory
        that raises leaves nothing behind. The factory runs with no lock held, so it may use
        the manager (or wait for another thread that does); if another thread creates the
        same key in the same slot meanwhile, the first to finish wins and both get it.

        Args:
            key: any hashable naming the resource (its type and configuration).
            factory: called with no arguments to create the resource.

        Returns:
            The resource.

        Raises:
            PersistentKeyLockedError: (``AssertionError``, "was not allocated during
                warmup") locked and the key is new in this slot.
            InvalidSpecError: (``ValueError``) an unhashable key.
            TypeError: the key is new and ``factory`` is not callable.

        Example:
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> table = ws.get_persistent_resource("table", lambda: {"made": True})
            >>> ws.get_persistent_resource("table", dict) is table
            True
        """
        index = _context.current_index(self._num_ubatches, self._num_lanes)
        if index >= 0:
            try:
                return self._tables[index][key]  # type: ignore[no-any-return]
            except (KeyError, TypeError):
                pass
        return self._create_resource(key, factory)

    def _create_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        return self._server.create_resource(current_slot(), key, factory)

    def get_persistent(
        self,
        key: Hashable,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        *,
        zero_init: bool = False,
    ) -> torch.Tensor:
        """Get a fixed-shape tensor, optionally zeroed on first allocation only.

        Shares the key namespace of :meth:`get_persistent_resource` as ``(torch.Tensor, key)``.

        Args:
            key: any hashable naming the tensor.
            shape: its shape; the same on every request.
            dtype: its dtype (a ``torch.dtype``); the same on every request.
            zero_init: zero the tensor when it is first created (never later).

        Returns:
            The same tensor on every request in this slot.

        Raises:
            PersistentMismatchError: (``ValueError``, "requested shape") the key holds a
                tensor of another shape or dtype.
            PersistentKeyLockedError: (``AssertionError``) locked and the key is new.
            InvalidSpecError: (``ValueError``) a bad shape or dtype.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> scales = ws.get_persistent("scales", (4,), torch.float32, zero_init=True)
            >>> scales.tolist(), ws.get_persistent("scales", (4,), torch.float32) is scales
            ([0.0, 0.0, 0.0, 0.0], True)
        """
        index = _context.current_index(self._num_ubatches, self._num_lanes)
        if index >= 0:
            try:
                tensor = self._tables[index].get((torch.Tensor, key))
            except TypeError:
                tensor = None
            if (
                type(tensor) is torch.Tensor
                and tensor.dtype is dtype
                and type(shape) is tuple
                and tensor.shape == shape
                and plain_shape(shape)
            ):
                return tensor
        shape = canonical_shape(shape)
        check_torch_dtypes(((shape, dtype),), "dtype")
        spec = ViewSpec.of(shape, dtype, "persistent")
        factory = tensor_factory(spec, self._device, zero_init)
        resource = self.get_persistent_resource((torch.Tensor, key), factory)
        return check_persistent_tensor(key, resource, spec.shape, dtype)
