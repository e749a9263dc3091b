"""Managers for the kit's tests: the original's algorithm, and one planted bug per family.

:class:`OriginalAlgorithmManager` takes the original ``WorkspaceManager``'s steps (seeds/000):
views sliced back to back from a plain ``torch.empty`` uint8 buffer at offsets rounded up to
256 *relative to the buffer*, exact growth of the requesting slot only, the retained span at
the end, per-slot persistent resources. Two deliberate differences, both outside what the kit
checks: it does not call ``torch.accelerator.empty_cache()`` (it raises on CPU-only torch,
FACTS.md), and a zero-byte request to a slot that never grew gets an empty view (the original
slices ``None`` and raises ``TypeError``). It selects slots its own way: :func:`use_lane` and
:func:`use_ubatch`, two context variables.

Each subclass below changes one step, the way such bugs are written.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar
from itertools import accumulate
from typing import Any

import torch

_lane: ContextVar[int] = ContextVar("reference_lane", default=0)
_ubatch: ContextVar[int] = ContextVar("reference_ubatch", default=0)


def _selector(var: ContextVar[int]) -> Callable[[int], contextlib.AbstractContextManager[None]]:
    @contextlib.contextmanager
    def use(index: int) -> Iterator[None]:
        token = var.set(index)
        try:
            yield
        finally:
            var.reset(token)

    return use


use_lane = _selector(_lane)
use_ubatch = _selector(_ubatch)


def _round_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


class OriginalAlgorithmManager:
    """The original's algorithm on a plain ``torch.empty`` buffer per slot (CPU)."""

    ALIGNMENT = 256

    def __init__(self, num_ubatches: int = 1, num_lanes: int = 1) -> None:
        self._num_lanes = num_lanes
        count = num_ubatches * num_lanes
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._retained: list[tuple[Hashable, int] | None] = [None] * count
        self._resources: list[dict[Hashable, Any]] = [{} for _ in range(count)]
        self._locked = False

    def lock(self) -> None:
        self._locked = True

    def unlock(self) -> None:
        self._locked = False

    def is_locked(self) -> bool:
        return self._locked

    def _slot(self) -> int:
        return _ubatch.get() * self._num_lanes + _lane.get()

    def _ensure(self, required: int) -> torch.Tensor:
        slot = self._slot()
        buffer = self._buffers[slot]
        size = 0 if buffer is None else buffer.numel()
        if size < required:
            if self._locked:
                raise AssertionError(
                    f"Workspace is locked but allocation requires {required} bytes, current "
                    f"size is {size} bytes. Workspace growth is not allowed after locking."
                )
            self._buffers[slot] = self._retained[slot] = None
            del buffer
            self._buffers[slot] = buffer = torch.empty((required,), dtype=torch.uint8)
        return torch.empty((0,), dtype=torch.uint8) if buffer is None else buffer

    def _offsets(self, actual: list[int]) -> list[int]:
        return list(accumulate([0, *[_round_up(n, self.ALIGNMENT) for n in actual[:-1]]]))

    def _forget_reached(self, slot: int, total: int) -> None:
        retained = self._retained[slot]
        if retained is not None and total > retained[1]:
            self._retained[slot] = None

    def _carve(self, buffer: torch.Tensor, offset: int, nbytes: int, spec: Any) -> torch.Tensor:
        shape, dtype = spec
        return buffer[offset : offset + nbytes].view(dtype).reshape(shape)

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        actual = [math.prod(s) * d.itemsize for s, d in shapes_and_dtypes]
        aligned = [_round_up(n, self.ALIGNMENT) for n in actual]
        offsets = self._offsets(actual)
        buffer = self._ensure(sum(aligned))
        self._forget_reached(self._slot(), sum(aligned))
        return [
            self._carve(buffer, off, n, spec)
            for off, n, spec in zip(offsets, actual, shapes_and_dtypes, strict=True)
        ]

    def _intact(self, slot: int, key: Hashable, start: int) -> bool:
        return self._retained[slot] == (key, start)

    def get_retained(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        nbytes = math.prod(shape) * dtype.itemsize
        slot = self._slot()
        buffer = self._ensure(nbytes)
        start = (buffer.numel() - nbytes) // self.ALIGNMENT * self.ALIGNMENT
        intact = self._intact(slot, key, start)
        self._retained[slot] = (key, start)
        return self._carve(buffer, start, nbytes, (shape, dtype)), intact

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        resources = self._resources[self._slot()]
        if key not in resources:
            if self._locked:
                raise AssertionError(f"Workspace is locked but {key!r} was not allocated")
            resources[key] = factory()
        return resources[key]

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        make = torch.zeros if zero_init else torch.empty
        tensor = self.get_persistent_resource((torch.Tensor, key), lambda: make(shape, dtype=dtype))
        if tensor.shape != shape or tensor.dtype != dtype:
            raise ValueError(f"Persistent workspace {key!r}: requested shape={shape}")
        return tensor  # type: ignore[no-any-return]


class WrongShape(OriginalAlgorithmManager):
    """Forgets the reshape: every view comes back flat."""

    def _carve(self, buffer: torch.Tensor, offset: int, nbytes: int, spec: Any) -> torch.Tensor:
        return buffer[offset : offset + nbytes].view(spec[1])


class StrayView(OriginalAlgorithmManager):
    """Serves every view after the first from a fresh ``torch.empty``: not inside the buffer."""

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        views = super().get_simultaneous(*shapes_and_dtypes)
        return views[:1] + [torch.empty(v.shape, dtype=v.dtype) for v in views[1:]]


class OverlappingViews(OriginalAlgorithmManager):
    """Forgets the offsets: every view of a call starts at the beginning of the buffer."""

    def _offsets(self, actual: list[int]) -> list[int]:
        return [0] * len(actual)


class LanesShareBuffer(OriginalAlgorithmManager):
    """Ignores the lane: every lane of a ubatch uses lane 0's buffer."""

    def _slot(self) -> int:
        return _ubatch.get() * self._num_lanes


class WrongOffset(OriginalAlgorithmManager):
    """Rounds the offsets to 64 bytes instead of 256."""

    def _offsets(self, actual: list[int]) -> list[int]:
        return list(accumulate([0, *[_round_up(n, 64) for n in actual[:-1]]]))


class IntactLie(OriginalAlgorithmManager):
    """Never forgets the retained span: not when a request reaches into it, nor on growth."""

    def _forget_reached(self, slot: int, total: int) -> None:
        pass

    def _ensure(self, required: int) -> torch.Tensor:
        slot = self._slot()
        retained = self._retained[slot]
        buffer = super()._ensure(required)
        self._retained[slot] = retained
        return buffer


class GrowsWhileLocked(OriginalAlgorithmManager):
    """Grows whatever the lock says."""

    def _ensure(self, required: int) -> torch.Tensor:
        locked, self._locked = self._locked, False
        try:
            return super()._ensure(required)
        finally:
            self._locked = locked


class ClearsBeforeRefusing(OriginalAlgorithmManager):
    """Zeroes the buffer it is about to outgrow before checking the lock: a refusal loses it."""

    def _ensure(self, required: int) -> torch.Tensor:
        buffer = self._buffers[self._slot()]
        if buffer is not None and buffer.numel() < required:
            buffer.zero_()
        return super()._ensure(required)


class NewKeyWhileLocked(OriginalAlgorithmManager):
    """Creates persistent resources whatever the lock says."""

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        resources = self._resources[self._slot()]
        if key not in resources:
            resources[key] = factory()
        return resources[key]


class FactoryTwice(OriginalAlgorithmManager):
    """Calls the factory on every request (and keeps the first result)."""

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        made = factory()
        if self._locked and key not in self._resources[self._slot()]:
            raise AssertionError(f"Workspace is locked but {key!r} was not allocated")
        return self._resources[self._slot()].setdefault(key, made)


class ZeroesEveryTime(OriginalAlgorithmManager):
    """``zero_init`` zeroes the tensor on every request, not only on creation."""

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        tensor = super().get_persistent(key, shape, dtype, zero_init=zero_init)
        return tensor.zero_() if zero_init else tensor


class LiteralOriginal(OriginalAlgorithmManager):
    """The original exactly where the reference differs: a never-grown slot has no buffer."""

    def _ensure(self, required: int) -> torch.Tensor:
        buffer = super()._ensure(required)
        return self._buffers[self._slot()] if buffer.numel() == 0 else buffer  # type: ignore[return-value]


class RefusesWhatFits(OriginalAlgorithmManager):
    """Refuses every scratch request while locked, even one its buffer holds."""

    def _ensure(self, required: int) -> torch.Tensor:
        if self._locked:
            raise AssertionError("Workspace is locked")
        return super()._ensure(required)


class RefusesWithRuntimeError(OriginalAlgorithmManager):
    """Refuses growth while locked with a ``RuntimeError`` instead of an ``AssertionError``."""

    def _ensure(self, required: int) -> torch.Tensor:
        try:
            return super()._ensure(required)
        except AssertionError as err:
            raise RuntimeError(str(err)) from None


class PersistentInScratch(OriginalAlgorithmManager):
    """Carves persistent tensors from the start of the scratch buffer instead of allocating."""

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize

        def carve() -> torch.Tensor:
            view = self._carve(self._ensure(nbytes), 0, nbytes, (shape, dtype))
            return view.zero_() if zero_init else view

        return self.get_persistent_resource((torch.Tensor, key), carve)  # type: ignore[no-any-return]
