"""What the kit is told about a manager: how to make one, its slots, how to select a slot."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import torch

from functional_ws import WorkspaceState
from functional_ws._checks import check_int, is_int

from ._properties import select_properties

T = TypeVar("T")
Spec = tuple[tuple[int, ...], torch.dtype]
#: The alignment the original promises (vLLM's ``WorkspaceManager``: 256 bytes); the kit's
#: default (``check_workspace(alignment=...)`` for a manager that promises another).
ALIGNMENT = 256
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
StateReader = Callable[[Any], WorkspaceState]


@dataclasses.dataclass(frozen=True)
class MachineConfig:
    """How :class:`interop.testing.WorkspaceAPIMachine` makes and drives a manager, validated.

    Attributes:
        factory: ``factory(num_ubatches, num_lanes)`` returns a fresh manager that holds
            no buffer yet (as vLLM's constructor makes it; not warmed up: a buffer made
            before the machine's first call is one it cannot see, and the ``locked`` family
            takes a first buffer met while locked for growth).
        num_ubatches: ubatch slots to use (each needs ``use_ubatch`` when more than one).
        num_lanes: lanes to use (each needs ``use_lane`` when more than one).
        use_lane: ``use_lane(i)`` returns a context manager selecting lane ``i``.
        use_ubatch: ``use_ubatch(i)`` likewise for ubatches.
        properties: the property families to check (:data:`interop.testing.PROPERTIES`);
            any iterable of names, or ``None`` for all, is accepted and stored as a frozenset.
        core_state: for a manager built on :mod:`functional_ws` (``interop.WorkspaceManager``:
            ``lambda ws: ws.state``), reads its :class:`functional_ws.WorkspaceState`. The
            machine then also applies the core's transitions to the same calls (what
            :func:`functional_ws.acquire`, ``retain``, ``claim``, ``lock`` and ``unlock``
            decide; ``get_persistent(key, ...)`` claims ``(torch.Tensor, key)``) and checks
            that the manager carries them out: the same state after every call, every view
            at the offset the core planned from one base per buffer, the same ``intact``,
            and the core's own error class for every refusal.
        alignment: the byte alignment the manager promises every view (vLLM's: 256), a
            power of two from 8 (the largest itemsize the kit asks for) up: what the
            alignment families check, and the block the requests aimed at a retained span
            are padded to (``intact`` and ``locked`` count in it).
        empty_requests: whether ``get_simultaneous`` is asked for zero bytes in all (the
            original crashes on one to a slot that never grew: a real bug, found by
            default; ``False`` makes no such request, to look past it).

    Raises:
        TypeError: ``factory``, ``core_state``, ``use_lane`` or ``use_ubatch`` is not
            callable, a count or ``alignment`` is not an int, ``empty_requests`` not a bool,
            or ``properties`` not an iterable of strings.
        ValueError: an unknown property, a count below one, an ``alignment`` that is not a
            power of two from 8 up, or more than one ubatch (lane) without ``use_ubatch``
            (``use_lane``).

    Example:
        >>> import interop
        >>> config = MachineConfig(
        ...     lambda u, l: interop.WorkspaceManager("cpu", u, l), properties=["intact"]
        ... )
        >>> sorted(config.properties), config.slots
        (['intact'], [(0, 0)])
    """

    factory: ManagerFactory
    num_ubatches: int = 1
    num_lanes: int = 1
    use_lane: SlotSelector | None = None
    use_ubatch: SlotSelector | None = None
    properties: frozenset[str] = dataclasses.field(default_factory=lambda: select_properties(None))
    core_state: StateReader | None = None
    empty_requests: bool = True
    alignment: int = ALIGNMENT

    def __post_init__(self) -> None:
        if not callable(self.factory):
            raise TypeError(
                f"factory must be callable as factory(num_ubatches, num_lanes), got "
                f"{self.factory!r}."
            )
        for name in ("use_lane", "use_ubatch"):
            selector = getattr(self, name)
            if selector is not None and not callable(selector):
                raise TypeError(
                    f"{name} must be None or callable as {name}(i), returning a context "
                    f"manager that selects it, got {selector!r}."
                )
        if not isinstance(self.empty_requests, bool):
            raise TypeError(f"empty_requests must be True or False, got {self.empty_requests!r}.")
        if self.core_state is not None and not callable(self.core_state):
            raise TypeError(
                f"core_state must be callable as core_state(manager), returning its "
                f"functional_ws.WorkspaceState (e.g. lambda ws: ws.state), got "
                f"{self.core_state!r}."
            )
        if not is_int(self.alignment):
            raise TypeError(f"alignment must be an int, got {self.alignment!r}.")
        # at least the largest itemsize the kit asks for (8): a padded request adds up
        check_int(self.alignment, "alignment", minimum=8, maximum=2**30)
        if self.alignment & (self.alignment - 1):
            raise ValueError(
                f"alignment must be a positive power of two (the byte alignment the manager "
                f"promises every view; vLLM's is 256), got {self.alignment!r}."
            )
        # Frozen: store the validated selection the way dataclasses themselves set fields.
        object.__setattr__(self, "properties", select_properties(self.properties))
        for name, selector in (("num_ubatches", "use_ubatch"), ("num_lanes", "use_lane")):
            count = getattr(self, name)
            if not is_int(count):
                raise TypeError(f"{name} must be an int, got {count!r}.")
            check_int(count, name, minimum=1)
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
