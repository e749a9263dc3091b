"""The original ``WorkspaceManager``'s algorithm, step by step: the baseline of every benchmark.

:class:`ReferenceWorkspaceManager` takes the steps of vLLM's ``WorkspaceManager`` (the seed,
which is vLLM 0.34.0's ``vllm/v1/worker/workspace.py``) call for call, so that what it costs
is what the original costs and what it returns is what the original returned; it adds the
``reserve`` and ``try_get_simultaneous`` that vLLM PR #42551 proposed (commit bf94fe2,
closed without merging: no release has them), as that commit wrote them. It is what our
façade is measured against and what the kit's tests treat as the original. It is not a
manager to use: it keeps the original's faults (relative alignment only; a zero-byte request
to a slot that never grew raises ``TypeError`` from ``get_simultaneous`` and
``AttributeError`` from ``get_retained``).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from itertools import accumulate
from math import prod
from typing import Any, TypeVar, cast

import torch

T = TypeVar("T")
Spec = tuple[tuple[int, ...], torch.dtype]

logger = logging.getLogger(__name__)

_MB = 1024**2
_VIEW_ALIGNMENT = 256

#: The lane of the current execution context (the original's ``_workspace_lane``).
_workspace_lane: ContextVar[int] = ContextVar("reference_workspace_lane", default=0)
#: The ubatch of the current execution context (the original asks vLLM's dual-batch overlap).
_workspace_ubatch: ContextVar[int] = ContextVar("reference_workspace_ubatch", default=0)
#: Whether ``torch.accelerator`` can empty a cache here; ``None`` until the first growth.
_accelerator_present: bool | None = None


def _compute_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return prod(shape) * dtype.itemsize


def round_up(x: int, y: int) -> int:
    """``x`` rounded up to a multiple of ``y`` (vLLM's ``vllm.utils.math_utils.round_up``)."""
    return ((x + y - 1) // y) * y


def round_down(x: int, y: int) -> int:
    """``x`` rounded down to a multiple of ``y`` (vLLM's ``round_down``)."""
    return (x // y) * y


def dbo_current_ubatch_id() -> int:
    """The current ubatch: a context-variable read where vLLM reads its thread map."""
    return _workspace_ubatch.get()


def _debug_workspace() -> bool:
    """``envs.VLLM_DEBUG_WORKSPACE`` as vLLM reads it: the environment, at every use."""
    return bool(int(os.getenv("VLLM_DEBUG_WORKSPACE", "0")))


def _empty_accelerator_cache() -> None:
    """``torch.accelerator.empty_cache()`` where an accelerator exists (it raises otherwise)."""
    global _accelerator_present
    if _accelerator_present is None:
        accelerator = getattr(torch, "accelerator", None)
        _accelerator_present = accelerator is not None and accelerator.is_available()
    if _accelerator_present:
        torch.accelerator.empty_cache()


@contextlib.contextmanager
def _use_lane(lane: int) -> Iterator[None]:
    if lane < 0:
        raise ValueError(f"Workspace lane must be non-negative, got {lane}.")
    token = _workspace_lane.set(lane)
    try:
        yield
    finally:
        _workspace_lane.reset(token)


@contextlib.contextmanager
def _use_ubatch(ubatch: int) -> Iterator[None]:
    if ubatch < 0:
        raise ValueError(f"Workspace ubatch must be non-negative, got {ubatch}.")
    token = _workspace_ubatch.set(ubatch)
    try:
        yield
    finally:
        _workspace_ubatch.reset(token)


class ReferenceWorkspaceManager:
    """vLLM's ``WorkspaceManager`` algorithm, call for call: the baseline to measure against.

    Scratch memory and keyed persistent resources per ``(ubatch, lane)`` slot, as the seed
    has them: views sliced back to back from a plain ``torch.empty`` ``uint8`` buffer at
    offsets rounded up to 256 bytes relative to the buffer start; each call computes
    ``_compute_bytes``, ``round_up``, ``accumulate``, reads the slot from context variables
    (twice per request, as the original), checks the size, forgets a retained span the
    request reaches into, and carves each view with a slice, ``.view(dtype)`` and
    ``.reshape(shape)``. Growth replaces only the requesting slot's buffer, to exactly the
    bytes needed, in the original's order: drop the old buffer (and the slot's retained
    span), empty the accelerator cache, allocate inside ``alloc_context()``. Locked, growth
    and new persistent keys raise ``AssertionError`` with the original's messages.
    ``reserve`` and ``try_get_simultaneous`` are PR #42551's (commit bf94fe2, not merged).
    The slot buffers are ``_current_workspaces``, as in the original (vLLM's tests read it),
    ``None`` where a slot never grew.

    Deliberate differences from the seed and from that PR's commit:

    - ``torch.accelerator.empty_cache()`` is called only where an accelerator exists (it
      raises on CPU-only torch, so the original cannot grow a CPU workspace there); whether
      one exists is asked once, at the first growth.
    - The slot comes from this module's context variables: the lane as the seed reads it
      (selected with :meth:`use_lane`, the seed's ``use_workspace_lane``), the ubatch
      through ``dbo_current_ubatch_id()``, which reads a context variable selected with
      :meth:`use_ubatch` where vLLM reads its dual-batch-overlap thread map (one read each
      way). A negative ubatch is refused like a negative lane.
    - The refusal's ``file:line:function`` skips this class's frames by ``self``, as
      that commit does, instead of by the qualified name ``WorkspaceManager.``;
      the debug log (``VLLM_DEBUG_WORKSPACE=1``) goes to this module's logger.
    - With lanes, which that commit predates: :meth:`reserve` sizes every ubatch slot of the
      current lane, and :meth:`try_get_simultaneous` forgets a retained span its views reach
      into, as :meth:`get_simultaneous` does (the commit has no retained span).

    Args:
        device: where buffers and persistent tensors live.
        num_ubatches: ubatch slots; ``None`` means 1.
        num_lanes: lanes per ubatch, at least one.
        alloc_context: factory of the context each buffer is allocated in.

    Raises:
        ValueError: ``num_lanes`` is below one.

    Example:
        >>> import torch
        >>> ws = ReferenceWorkspaceManager(torch.device("cpu"))
        >>> a, b = ws.get_simultaneous(((2, 3), torch.float32), ((5,), torch.int8))
        >>> a.shape, b.dtype, b.data_ptr() - a.data_ptr()
        (torch.Size([2, 3]), torch.int8, 256)
        >>> ws.lock()
        >>> ws.try_get_simultaneous(((4096,), torch.float32)) is None
        True
    """

    #: ``with ReferenceWorkspaceManager.use_lane(1):`` selects lane 1 (``ValueError`` if < 0).
    use_lane = staticmethod(_use_lane)
    #: ``with ReferenceWorkspaceManager.use_ubatch(1):`` selects ubatch 1.
    use_ubatch = staticmethod(_use_ubatch)

    def __init__(
        self,
        device: torch.device,
        num_ubatches: int | None = None,
        num_lanes: int = 1,
        alloc_context: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        self._device = device
        self._alloc_context = alloc_context
        self._num_ubatches = num_ubatches if num_ubatches is not None else 1
        if num_lanes < 1:
            raise ValueError(f"num_lanes must be at least one, got {num_lanes}.")
        self._num_lanes = num_lanes
        self._current_workspaces: list[torch.Tensor | None] = [None] * (
            self._num_ubatches * self._num_lanes
        )
        self._persistent_resources: list[dict[Hashable, object]] = [
            {} for _ in self._current_workspaces
        ]
        # Per slot, (key, start) of the tail span get_retained last handed out;
        # cleared when a scratch request reaches into it or on reallocation.
        self._retained: list[tuple[Hashable, int] | None] = [None for _ in self._current_workspaces]
        self._locked: bool = False

    @staticmethod
    def _workspace_size_bytes(workspace: torch.Tensor | None) -> int:
        if workspace is None:
            return 0
        return workspace.numel() * workspace.element_size()

    def lock(self) -> None:
        """Lock the workspace to prevent growth or new persistent resources."""
        self._locked = True
        if _debug_workspace():
            logger.info(
                "[WORKSPACE DEBUG] Workspace locked. Current sizes: %s",
                [
                    self._workspace_size_bytes(ws) / _MB
                    for ws in self._current_workspaces
                    if ws is not None
                ],
            )

    def unlock(self) -> None:
        """Unlock the workspace to allow growth."""
        self._locked = False
        if _debug_workspace():
            logger.info(
                "[WORKSPACE DEBUG] Workspace unlocked. Current sizes: %s",
                [
                    self._workspace_size_bytes(ws) / _MB
                    for ws in self._current_workspaces
                    if ws is not None
                ],
            )

    def is_locked(self) -> bool:
        """Check if workspace is locked."""
        return self._locked

    def _get_workspace_id(self) -> int:
        lane = _workspace_lane.get()
        if lane >= self._num_lanes:
            raise RuntimeError(
                f"Workspace lane {lane} is not configured; manager has {self._num_lanes} lane(s)."
            )
        return dbo_current_ubatch_id() * self._num_lanes + lane

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        """Return the resource cached for ``key`` in the current ubatch and lane.

        Args:
            key: identifies the resource within the slot.
            factory: makes it on the first request.

        Returns:
            The slot's resource for ``key``.

        Raises:
            AssertionError: locked, and ``key`` was not made during warmup in this slot.
        """
        resources = self._persistent_resources[self._get_workspace_id()]
        if key not in resources:
            if self._locked:
                raise AssertionError(
                    f"Workspace is locked but {key!r} was not allocated during "
                    "warmup for the current ubatch and lane."
                )
            resources[key] = factory()
        return cast(T, resources[key])

    def get_persistent(
        self,
        key: Hashable,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        *,
        zero_init: bool = False,
    ) -> torch.Tensor:
        """Get a fixed-shape tensor, optionally zeroed on first allocation only.

        Raises:
            ValueError: ``key`` holds a tensor of another shape or dtype.
            AssertionError: locked, and ``key`` is new in this slot.
        """
        factory = torch.zeros if zero_init else torch.empty
        workspace = self.get_persistent_resource(
            (torch.Tensor, key),
            lambda: factory(shape, dtype=dtype, device=self._device),
        )
        if workspace.shape != shape or workspace.dtype != dtype:
            raise ValueError(
                f"Persistent workspace {key!r} has shape={workspace.shape}, "
                f"dtype={workspace.dtype}; requested shape={shape}, dtype={dtype}."
            )
        return workspace

    def get_simultaneous(self, *shapes_and_dtypes: Spec) -> list[torch.Tensor]:
        """Get multiple workspace tensors simultaneously from a single allocation.

        Args:
            *shapes_and_dtypes: One or more (shape, dtype) tuples.

        Returns:
            List of tensor views into the workspace buffer, one per shape/dtype pair.

        Raises:
            AssertionError: locked, and the slot would have to grow.
        """
        actual_bytes = [_compute_bytes(s, d) for s, d in shapes_and_dtypes]
        aligned_bytes = [round_up(actual, _VIEW_ALIGNMENT) for actual in actual_bytes]
        total_bytes = sum(aligned_bytes)

        # Calculate cumulative offsets using itertools.accumulate
        offsets = list(accumulate([0] + aligned_bytes[:-1]))  # noqa: RUF005 (the original's)

        current_workspace = self._ensure_workspace_size(total_bytes)
        workspace_id = self._get_workspace_id()
        retained = self._retained[workspace_id]
        if retained is not None and total_bytes > retained[1]:
            self._retained[workspace_id] = None

        return [
            current_workspace[offsets[i] : offsets[i] + actual_bytes[i]]
            .view(shapes_and_dtypes[i][1])
            .reshape(shapes_and_dtypes[i][0])
            for i in range(len(shapes_and_dtypes))
        ]

    def try_get_simultaneous(self, *shapes_and_dtypes: Spec) -> list[torch.Tensor] | None:
        """Like :meth:`get_simultaneous`, but ``None`` where locked and too small (PR #42551's).

        Returns:
            The views, or ``None`` when the workspace is locked and the current slot is
            smaller than the request; unlocked, the slot grows as in ``get_simultaneous``.
        """
        actual_bytes, offsets, total_bytes = self._compute_layout(shapes_and_dtypes)
        if self._locked:
            workspace_id = self._get_workspace_id()
            workspace = self._current_workspaces[workspace_id]
            if self._workspace_size_bytes(workspace) < total_bytes:
                return None
        else:
            workspace = self._ensure_workspace_size(total_bytes)
            workspace_id = self._get_workspace_id()
        retained = self._retained[workspace_id]
        if retained is not None and total_bytes > retained[1]:
            self._retained[workspace_id] = None
        return self._slice(workspace, shapes_and_dtypes, actual_bytes, offsets)

    def reserve(self, *shapes_and_dtypes: Spec) -> None:
        """Size every ubatch slot of the current lane for ONE layout of all the pairs (PR
        #42551's).

        The pairs are laid out as one :meth:`get_simultaneous` call would lay them out (each
        rounded up to 256 bytes, back to back); idempotent; meant for before :meth:`lock`.

        Raises:
            AssertionError: locked, and a slot would have to grow.

        Example:
            >>> import torch
            >>> ws = ReferenceWorkspaceManager(torch.device("cpu"), num_ubatches=2)
            >>> ws.reserve(((24, 4, 8, 257), torch.float32), ((24, 4), torch.float32))
            >>> [w.numel() for w in ws._current_workspaces]
            [790016, 790016]
        """
        total_bytes = self._compute_layout(shapes_and_dtypes)[2]
        lane = self._get_workspace_id() % self._num_lanes
        for ubatch_id in range(self._num_ubatches):
            self._ensure_workspace_size(total_bytes, ubatch_id * self._num_lanes + lane)

    @staticmethod
    def _compute_layout(
        shapes_and_dtypes: tuple[Spec, ...],
    ) -> tuple[list[int], list[int], int]:
        actual_bytes = [_compute_bytes(s, d) for s, d in shapes_and_dtypes]
        aligned_bytes = [round_up(actual, _VIEW_ALIGNMENT) for actual in actual_bytes]
        offsets = list(accumulate([0] + aligned_bytes[:-1]))  # noqa: RUF005 (upstream's)
        total_bytes = sum(aligned_bytes)
        return actual_bytes, offsets, total_bytes

    @staticmethod
    def _slice(
        workspace: Any,
        shapes_and_dtypes: tuple[Spec, ...],
        actual_bytes: list[int],
        offsets: list[int],
    ) -> list[torch.Tensor]:
        return [
            workspace[offsets[i] : offsets[i] + actual_bytes[i]]
            .view(shapes_and_dtypes[i][1])
            .reshape(shapes_and_dtypes[i][0])
            for i in range(len(shapes_and_dtypes))
        ]

    def get_retained(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        """Get a scratch view at the end of the workspace that can outlive requests.

        Args:
            key: Identifies the caller; another key's call takes the span over.
            shape: Shape of the view.
            dtype: Dtype of the view.

        Returns:
            The view and whether its contents are intact.

        Raises:
            AssertionError: locked, and the slot would have to grow.
        """
        num_bytes = _compute_bytes(shape, dtype)
        workspace_id = self._get_workspace_id()
        current_workspace = self._ensure_workspace_size(num_bytes)
        start = round_down(current_workspace.numel() - num_bytes, _VIEW_ALIGNMENT)
        intact = self._retained[workspace_id] == (key, start)
        self._retained[workspace_id] = (key, start)
        view = current_workspace[start : start + num_bytes].view(dtype).reshape(shape)
        return view, intact

    def _ensure_workspace_size(
        self, required_bytes: int, workspace_id: int | None = None
    ) -> torch.Tensor:
        """The slot's buffer, grown first to ``required_bytes`` if it is smaller.

        ``workspace_id`` defaults to the current slot (``reserve`` names siblings). A slot
        that never grew and is asked for zero bytes returns ``None``, as the original.
        """
        if workspace_id is None:
            workspace_id = self._get_workspace_id()
        current_workspace = self._current_workspaces[workspace_id]
        current_size = self._workspace_size_bytes(current_workspace)

        if current_size < required_bytes:

            def get_caller_info() -> str:
                """Find first frame outside the manager."""
                curr_frame = inspect.currentframe()
                if curr_frame is None:
                    return "unknown"
                curr_frame = curr_frame.f_back
                while curr_frame is not None:
                    if isinstance(curr_frame.f_locals.get("self"), ReferenceWorkspaceManager):
                        curr_frame = curr_frame.f_back
                        continue
                    filename = os.path.basename(curr_frame.f_code.co_filename)
                    return f"{filename}:{curr_frame.f_lineno}:{curr_frame.f_code.co_name}"
                return "unknown"

            if self._locked:
                raise AssertionError(
                    f"Workspace is locked but allocation from '{get_caller_info()}' "
                    f"requires {required_bytes / _MB:.2f} MB, current size is "
                    f"{current_size / _MB:.2f} MB. "
                    "Workspace growth is not allowed after locking."
                )

            # Only the requesting slot is resized; the old buffer goes before the new one
            # is allocated, so that the growth's peak is the new size.
            self._current_workspaces[workspace_id] = None
            self._retained[workspace_id] = None
            del current_workspace
            _empty_accelerator_cache()
            with self._alloc_context():
                self._current_workspaces[workspace_id] = torch.empty(
                    (required_bytes,), dtype=torch.uint8, device=self._device
                )
            current_workspace = self._current_workspaces[workspace_id]

            if _debug_workspace():
                logger.info(
                    "[WORKSPACE DEBUG] Resized workspace from '%s': %.2f MB -> "
                    "%.2f MB (ubatch %d, lane %d)",
                    get_caller_info(),
                    current_size / _MB,
                    required_bytes / _MB,
                    workspace_id // self._num_lanes,
                    workspace_id % self._num_lanes,
                )

        return current_workspace  # type: ignore[return-value]  # None: see the docstring
