"""Keyed persistent resources per slot: the original's ``get_persistent*`` methods.

A mixin of :class:`interop.WorkspaceManager`. The core records which keys each slot has
claimed (so a locked manager refuses new ones); the objects themselves live here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

import functional_ws as fws
from functional_ws import PersistentMismatchError, WorkspaceState

from ._checks import check_torch_dtype, plain_shape
from ._context import current_index, current_slot

T = TypeVar("T")


class PersistentResources:
    """Persistent resources, one cache per ``(ubatch, lane)`` slot."""

    _state: WorkspaceState
    _mutex: threading.RLock
    _device: torch.device
    _num_ubatches: int
    _num_lanes: int
    _resources: list[dict[Hashable, Any]]

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        """Return the resource cached for ``key`` in the current ubatch and lane.

        The first request calls ``factory`` and keeps its result for the manager's
        lifetime; later requests return the same object without calling it. Each slot has
        its own cache. While locked, a key missing from the slot's cache raises. A factory
        that raises leaves nothing behind.

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
        index = current_index(self._num_ubatches, self._num_lanes)
        if index >= 0:
            try:
                return self._resources[index][key]  # type: ignore[no-any-return]
            except (KeyError, TypeError):
                pass
        return self._create_resource(key, factory)

    def _create_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        with self._mutex:
            slot = current_slot()
            fws.claim(self._state, slot, key)  # refuses a new key while locked, before creating
            resources = self._resources[self._state.index(slot)]
            if key in resources:
                return resources[key]  # type: ignore[no-any-return]
            if not callable(factory):
                raise TypeError(
                    f"factory must be a callable returning the resource, got {factory!r}."
                )
            resource = factory()
            # Claim only now: a factory that raised leaves no key behind. The factory may
            # itself have used the manager, so claim on the state as it is now.
            self._state, _ = fws.claim(self._state, slot, key)
            resources[key] = resource
            return resource

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
            dtype: its dtype; the same on every request.
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
        index = current_index(self._num_ubatches, self._num_lanes)
        if index >= 0:
            try:
                tensor = self._resources[index].get((torch.Tensor, key))
            except TypeError:
                tensor = None
            if (
                type(tensor) is torch.Tensor
                and tensor.dtype is dtype
                and isinstance(shape, tuple)
                and tensor.shape == shape
                and plain_shape(shape)
            ):
                return tensor
        return self._persistent(key, shape, dtype, zero_init)

    def _persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, zero_init: bool
    ) -> torch.Tensor:
        spec = fws.make_spec(shape, dtype, "persistent")
        check_torch_dtype(spec, "dtype")
        factory = torch.zeros if zero_init else torch.empty
        tensor = self.get_persistent_resource(
            (torch.Tensor, key), lambda: factory(spec.shape, dtype=dtype, device=self._device)
        )
        if (
            not isinstance(tensor, torch.Tensor)
            or tensor.shape != spec.shape
            or tensor.dtype != dtype
        ):
            raise PersistentMismatchError(
                f"Persistent workspace {key!r} has shape={getattr(tensor, 'shape', None)}, "
                f"dtype={getattr(tensor, 'dtype', None)}; requested shape={shape}, dtype={dtype}."
            )
        return tensor
