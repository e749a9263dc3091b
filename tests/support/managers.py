"""Managers for the kit's tests: the original's algorithm, and one planted bug per family.

All of them are :class:`interop.testing.ReferenceWorkspaceManager` (the original's algorithm,
call for call) on the CPU, made as the kit makes managers: ``factory(num_ubatches,
num_lanes)``. :class:`LiteralOriginal` is the reference exactly. :class:`OriginalAlgorithmManager`
differs in one place, outside what the kit checks: a zero-byte request to a slot that never
grew gets an empty view (the original slices ``None`` and raises ``TypeError``, which stops
every run of the kit at its first empty request unless ``empty_requests=False``). Slots are
selected with :func:`use_lane` and :func:`use_ubatch`, the reference's context variables.

Each planted bug below changes one step of :class:`OriginalAlgorithmManager`, the way such
bugs are written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from itertools import accumulate
from typing import Any

import torch

from interop.testing._reference import ReferenceWorkspaceManager, round_up

CPU = torch.device("cpu")
use_lane = ReferenceWorkspaceManager.use_lane
use_ubatch = ReferenceWorkspaceManager.use_ubatch


class LiteralOriginal(ReferenceWorkspaceManager):
    """The reference exactly, on the CPU: a never-grown slot has no buffer to slice."""

    def __init__(self, num_ubatches: int = 1, num_lanes: int = 1) -> None:
        super().__init__(CPU, num_ubatches, num_lanes)


class OriginalAlgorithmManager(LiteralOriginal):
    """The reference, except that a zero-byte request to a slot that never grew is served."""

    _EMPTY = torch.empty((0,), dtype=torch.uint8)

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        buffer = super()._ensure_workspace_size(required_bytes, workspace_id)
        return self._EMPTY if buffer is None else buffer

    def _buffer(self) -> torch.Tensor:
        """The current slot's buffer (after a request, so it exists)."""
        return self._ensure_workspace_size(0)


def _carve_at(buffer: torch.Tensor, offsets: list[int], views: list[torch.Tensor]) -> list[Any]:
    """``views`` carved again from ``buffer`` at ``offsets``, each with its shape and dtype."""
    return [
        buffer[offset : offset + v.nbytes].view(v.dtype).reshape(v.shape)
        for offset, v in zip(offsets, views, strict=True)
    ]


class WrongShape(OriginalAlgorithmManager):
    """Forgets the reshape: every view comes back flat."""

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        return [v.reshape(-1) for v in super().get_simultaneous(*shapes_and_dtypes)]


class StrayView(OriginalAlgorithmManager):
    """Serves every view after the first from a fresh ``torch.empty``: not inside the buffer."""

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        views = super().get_simultaneous(*shapes_and_dtypes)
        return views[:1] + [torch.empty(v.shape, dtype=v.dtype) for v in views[1:]]


class OverlappingViews(OriginalAlgorithmManager):
    """Forgets the offsets: every view of a call starts at the beginning of the buffer."""

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        views = super().get_simultaneous(*shapes_and_dtypes)
        return _carve_at(self._buffer(), [0] * len(views), views)


class ThirdViewOverFirst(OriginalAlgorithmManager):
    """Places every third view of a call over the first (view 1 stays apart from both)."""

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        views = super().get_simultaneous(*shapes_and_dtypes)
        offsets = [v.data_ptr() - self._buffer().data_ptr() for v in views]
        return _carve_at(self._buffer(), [offsets[i % 2] for i in range(len(views))], views)


class LanesShareBuffer(OriginalAlgorithmManager):
    """Ignores the lane: every lane of a ubatch uses lane 0's buffer."""

    def _get_workspace_id(self) -> int:
        return super()._get_workspace_id() // self._num_lanes * self._num_lanes


class StaleMemo(OriginalAlgorithmManager):
    """Memoises the views of each request per slot and never forgets them when the slot
    grows: a repeat gets views of the retired buffer."""

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        memo = self.__dict__.setdefault("_memo", {})
        key = (self._get_workspace_id(), shapes_and_dtypes)
        if key not in memo:
            memo[key] = super().get_simultaneous(*shapes_and_dtypes)
        return memo[key]  # type: ignore[no-any-return]


class WrongOffset(OriginalAlgorithmManager):
    """Rounds the offsets to 64 bytes instead of 256."""

    rounding = 64

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        views = super().get_simultaneous(*shapes_and_dtypes)
        sizes = [round_up(v.nbytes, self.rounding) for v in views[:-1]]
        return _carve_at(self._buffer(), list(accumulate([0, *sizes])), views)


class WrongOffsetBy128(WrongOffset):
    """Rounds the offsets to 128 bytes: half the alignment."""

    rounding = 128


class IntactLie(OriginalAlgorithmManager):
    """Never forgets the retained span: not when a request reaches into it, nor on growth."""

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        slot = self._get_workspace_id()
        retained = self._retained[slot]
        views = super().get_simultaneous(*shapes_and_dtypes)
        self._retained[slot] = retained
        return views

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        slot = self._get_workspace_id() if workspace_id is None else workspace_id
        retained = self._retained[slot]
        buffer = super()._ensure_workspace_size(required_bytes, workspace_id)
        self._retained[slot] = retained
        return buffer


class GrowsWhileLocked(OriginalAlgorithmManager):
    """Grows whatever the lock says."""

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        locked, self._locked = self._locked, False
        try:
            return super()._ensure_workspace_size(required_bytes, workspace_id)
        finally:
            self._locked = locked


class ClearsBeforeRefusing(OriginalAlgorithmManager):
    """Zeroes the buffer it is about to outgrow before checking the lock: a refusal loses it."""

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        slot = self._get_workspace_id() if workspace_id is None else workspace_id
        buffer = self._current_workspaces[slot]
        if buffer is not None and buffer.numel() < required_bytes:
            buffer.zero_()
        return super()._ensure_workspace_size(required_bytes, workspace_id)


class NewKeyWhileLocked(OriginalAlgorithmManager):
    """Creates persistent resources whatever the lock says."""

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        resources = self._persistent_resources[self._get_workspace_id()]
        if key not in resources:
            resources[key] = factory()
        return resources[key]


class LockSeenLate(OriginalAlgorithmManager):
    """Checks the lock after resizing a buffer instead of before: the first growth of an
    existing buffer after each ``lock()`` goes through, and only the next one is refused
    (a slot's first buffer is refused as it must be)."""

    def __init__(self, num_ubatches: int = 1, num_lanes: int = 1) -> None:
        super().__init__(num_ubatches, num_lanes)
        self._grew_while_locked = False

    def lock(self) -> None:
        super().lock()
        self._grew_while_locked = False

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        slot = self._get_workspace_id() if workspace_id is None else workspace_id
        if not self._locked or self._grew_while_locked:
            return super()._ensure_workspace_size(required_bytes, workspace_id)
        current = self._current_workspaces[slot]
        if current is None or self._workspace_size_bytes(current) >= required_bytes:
            return super()._ensure_workspace_size(required_bytes, workspace_id)
        self._locked = False
        try:
            return super()._ensure_workspace_size(required_bytes, workspace_id)
        finally:
            self._locked, self._grew_while_locked = True, True


class FactoryTwice(OriginalAlgorithmManager):
    """Calls the factory on every request (and keeps the first result)."""

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        made = factory()
        resources = self._persistent_resources[self._get_workspace_id()]
        if self._locked and key not in resources:
            raise AssertionError(f"Workspace is locked but {key!r} was not allocated")
        return resources.setdefault(key, made)


class FactoryBeforeLockCheck(OriginalAlgorithmManager):
    """Calls the factory for a new key before it checks the lock (then refuses the key)."""

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        resources = self._persistent_resources[self._get_workspace_id()]
        if key in resources:
            return resources[key]
        made = factory()
        if self._locked:
            raise AssertionError(f"Workspace is locked but {key!r} was not allocated")
        resources[key] = made
        return made


class ZeroesRetainedSpan(OriginalAlgorithmManager):
    """Zero-fills a retained span it reports intact (its answer is right, its bytes not)."""

    def get_retained(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        view, intact = super().get_retained(key, shape, dtype)
        if intact:
            view.zero_()
        return view, intact


class ZeroesEveryTime(OriginalAlgorithmManager):
    """``zero_init`` zeroes the tensor on every request, not only on creation."""

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        tensor = super().get_persistent(key, shape, dtype, zero_init=zero_init)
        return tensor.zero_() if zero_init else tensor


class NeverZeroes(OriginalAlgorithmManager):
    """``zero_init`` is ignored: a new persistent tensor holds whatever its memory held
    (filled here, as reused memory would be: fresh pages read as zero by chance)."""

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        new = (torch.Tensor, key) not in self._persistent_resources[self._get_workspace_id()]
        tensor = super().get_persistent(key, shape, dtype, zero_init=False)
        if new:
            tensor.view(torch.uint8).fill_(0x5A)  # (persistent tensors are contiguous)
        return tensor


class RefusesWhatFits(OriginalAlgorithmManager):
    """Refuses every scratch request while locked, even one its buffer holds."""

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        if self._locked:
            raise AssertionError("Workspace is locked")
        return super()._ensure_workspace_size(required_bytes, workspace_id)


class RefusesWithRuntimeError(OriginalAlgorithmManager):
    """Refuses growth while locked with a ``RuntimeError`` instead of an ``AssertionError``."""

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        try:
            return super()._ensure_workspace_size(required_bytes, workspace_id)
        except AssertionError as err:
            raise RuntimeError(str(err)) from None


class PersistentInScratch(OriginalAlgorithmManager):
    """Carves persistent tensors from the start of the scratch buffer instead of allocating."""

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize
        slot = self._scratch_of()

        def carve() -> torch.Tensor:
            buffer = self._ensure_workspace_size(nbytes, slot)
            view = buffer[:nbytes].view(dtype).reshape(shape)
            return view.zero_() if zero_init else view

        tensor = self.get_persistent_resource((torch.Tensor, key), carve)
        if tensor.shape != shape or tensor.dtype != dtype:
            raise ValueError(f"Persistent workspace {key!r} has another shape or dtype.")
        return tensor  # type: ignore[no-any-return]

    def _scratch_of(self) -> int | None:
        """The slot whose scratch the tensors are carved from (``None``: the current one)."""
        return None


class PersistentInLaneZero(PersistentInScratch):
    """Carves the persistent tensors of every lane but the first from the start of lane 0's
    scratch buffer (the lane's own storage looked up with the default workspace id): lane
    0's requests then overwrite another lane's persistent tensor."""

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        if self._get_workspace_id() % self._num_lanes == 0:  # lane 0: as the original
            return OriginalAlgorithmManager.get_persistent(
                self, key, shape, dtype, zero_init=zero_init
            )
        return super().get_persistent(key, shape, dtype, zero_init=zero_init)

    def _scratch_of(self) -> int | None:
        slot = self._get_workspace_id()
        return slot - slot % self._num_lanes
