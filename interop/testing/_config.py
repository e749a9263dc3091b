"""What the kit is told about a manager: how to make one, its slots, how to select a slot."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import torch

from ._properties import select_properties

T = TypeVar("T")
Spec = tuple[tuple[int, ...], torch.dtype]
SlotSelector = Callable[[int], AbstractContextManager[Any]]


class WorkspaceAPI(Protocol):
    """The original vLLM ``WorkspaceManager`` API, as the kit calls it."""

    def get_simultaneous(self, *shapes_and_dtypes: Spec) -> list[torch.Tensor]: ...

    def get_retained(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]: ...

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = ...
    ) -> torch.Tensor: ...

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], T]) -> T: ...

    def lock(self) -> None: ...

    def unlock(self) -> None: ...

    def is_locked(self) -> bool: ...


ManagerFactory = Callable[[int, int], WorkspaceAPI]


@dataclasses.dataclass(frozen=True)
class MachineConfig:
    """The arguments of :func:`interop.testing.make_machine`, validated."""

    factory: ManagerFactory
    num_ubatches: int = 1
    num_lanes: int = 1
    use_lane: SlotSelector | None = None
    use_ubatch: SlotSelector | None = None
    properties: frozenset[str] = dataclasses.field(default_factory=lambda: select_properties(None))

    def __post_init__(self) -> None:
        if not callable(self.factory):
            raise TypeError(
                f"factory must be callable as factory(num_ubatches, num_lanes), got "
                f"{self.factory!r}."
            )
        for name, selector in (("num_ubatches", "use_ubatch"), ("num_lanes", "use_lane")):
            count = getattr(self, name)
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError(f"{name} must be an int of at least one, got {count!r}.")
            if count > 1 and getattr(self, selector) is None:
                raise ValueError(
                    f"{name}={count} needs {selector}: a function of the index returning a "
                    "context manager that selects it (None means a single one)."
                )

    @property
    def slots(self) -> list[tuple[int, int]]:
        """Every ``(ubatch, lane)`` pair, ubatch-major."""
        return [(u, lane) for u in range(self.num_ubatches) for lane in range(self.num_lanes)]

    @contextlib.contextmanager
    def select(self, slot: tuple[int, int]) -> Iterator[None]:
        """Run the body in ``slot`` (through ``use_ubatch`` and ``use_lane``)."""
        ubatch, lane = slot
        with contextlib.ExitStack() as stack:
            if self.use_ubatch is not None:
                stack.enter_context(self.use_ubatch(ubatch))
            if self.use_lane is not None:
                stack.enter_context(self.use_lane(lane))
            yield

    def where(self, slot: tuple[int, int]) -> str:
        """`` in lane 1``, `` in ubatch 1``, `` in ubatch 1, lane 0``, or nothing."""
        ubatch, lane = slot
        if self.num_ubatches > 1 and self.num_lanes > 1:
            return f" in ubatch {ubatch}, lane {lane}"
        if self.num_ubatches > 1:
            return f" in ubatch {ubatch}"
        if self.num_lanes > 1:
            return f" in lane {lane}"
        return ""


def format_spec(spec: Spec) -> str:
    """``((3,), torch.int8)``."""
    return f"({spec[0]!r}, {spec[1]})"
