"""The torch façade: vLLM's ``WorkspaceManager`` API over the pure core.

The manager holds one immutable :class:`functional_ws.WorkspaceState` and one ``uint8``
buffer per ``(ubatch, lane)`` slot. Every call asks the core what to do (offsets, growth,
the retained span, the lock) and only carries it out: it reallocates the buffers the core
names, then carves typed views at the core's offsets.

The hot path. The core's plan is a pure function of (state, slot, request), so each slot
memoises, per raw request, the plan and one carved view per requested tensor. A repeated
request costs a dictionary lookup, a check that every dimension is a plain ``int`` (a cached
``((1,), dtype)`` compares equal to ``((True,), dtype)`` and ``((1.0,), dtype)``, which must
still be refused), the core's ``replay_acquire``/``replay_retain`` (skipped when the state
object is the one the replay last left unchanged) and one ``view(dtype)`` per tensor
(``_views.py``): fresh tensors on every call, as the original's, so what a caller does to
one never reaches the memoised view or another call's views. A slot's memo is dropped
whenever its buffer is replaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import torch

import functional_ws as fws
from functional_ws import (
    WorkspaceLockedError,
    WorkspaceState,
    replay_acquire,
    replay_retain,
)

from . import _context, _plans
from ._allocators import AllocatorArg, resolve_allocator
from ._buffers import SlotBuffers
from ._checks import check_torch_dtype, memoisable, plain_shape
from ._context import SLOT, current_slot, provided_ubatch
from ._diagnostics import caller_origin, debug_enabled, logger
from ._history import History, recording
from ._jax_config import warn_if_jax_preallocates
from ._persistent import PersistentResources
from ._stats import WorkspaceStats, collect
from ._views import view_maker

_MB = 1024 * 1024
#: Memoised requests per slot; a slot's memo is cleared when it reaches this many.
MAX_MEMOISED = 4096


def _remember(memo: dict[Any, list[Any]], key: Any, entry: list[Any]) -> None:
    if len(memo) >= MAX_MEMOISED:
        memo.clear()
    with contextlib.suppress(TypeError):  # an unhashable key is served, not memoised
        memo[key] = entry


class WorkspaceManager(PersistentResources):
    """Shared scratch memory and keyed persistent resources per ``(ubatch, lane)`` slot.

    A drop-in for vLLM's ``WorkspaceManager``: same methods, semantics, error types and
    message fragments. Views are carved back to back at offsets rounded up to 256 bytes;
    only the requesting slot grows (by default), to exactly the bytes needed, never
    shrinking; the old buffer is released before the new one is allocated (the accelerator
    cache emptied in between) and allocation runs inside ``alloc_context()``. Beyond the
    original: absolute 256-byte alignment on every device, CPU-only torch support,
    :meth:`reserve`, :meth:`try_get_simultaneous`, a growth policy, :meth:`stats`, plans,
    reports of retired buffers that views still pin, and no growth during CUDA graph
    capture.

    Args:
        device: where the buffers live (a ``torch.device`` or a string such as ``"cuda:0"``).
        num_ubatches: ubatch slots; ``None`` means 1.
        num_lanes: independent lanes per ubatch, at least one.
        alloc_context: a factory of the context manager every buffer is allocated in (vLLM
            passes a sleep-mode memory pool).
        growth: ``"slot"`` (the original: only the requesting slot grows) or ``"ubatches"``
            (every ubatch slot of the requesting lane grows with it).
        alignment: byte alignment of every view, a power of two.
        allocator: who provides each slot's buffer. ``"torch"`` (torch's allocator, as the
            original); ``"jax"`` (a JAX ``uint8`` array on the matching JAX device, used by
            torch zero-copy through DLPack: on a GPU where JAX preallocated, the workspace
            lives in JAX's pool, not torch's); or a callable ``allocator(nbytes, device)``
            returning a 1-D contiguous ``uint8`` tensor of at least ``nbytes`` on ``device``
            (a pool you already have), validated on every growth. Every allocation runs
            inside ``alloc_context()`` whichever the allocator (that context governs torch's
            allocations only: JAX's bytes come from JAX's pool). The built-ins release a
            slot's old buffer before allocating the new one; a callable's new buffers are
            allocated first, so a refused result changes nothing, and a growth peaks at old
            plus new. Ordering with ``"jax"``: the buffer is memory JAX computations may read
            through :func:`interop.to_jax`; hand views to JAX with :func:`interop.jax_call`
            (or order with ``to_jax``/``to_torch`` as the interop does) so that torch never
            writes a region a JAX computation is still reading. The retired-buffer report
            watches each buffer's torch storage: an allocator handing out slices of one
            long-lived tensor would always be reported pinned.

    Raises:
        InvalidSpecError: (``ValueError``, "at least one") a count below one, a bad alignment
            or an unknown growth policy.
        TypeError: ``alloc_context`` is not callable.
        UnknownAllocatorError: (``ValueError``) ``allocator`` is a string other than
            ``"torch"`` and ``"jax"``.
        AllocatorNotCallableError: (``TypeError``) ``allocator`` is neither.
        DeviceNotVisibleError: (``ValueError``) ``"jax"`` for a device JAX cannot see.
        RuntimeError: ``device`` is not a device torch knows.

    Example:
        >>> import torch
        >>> from interop import WorkspaceManager
        >>> ws = WorkspaceManager("cpu")
        >>> a, b = ws.get_simultaneous(((2, 3), torch.float32), ((5,), torch.int8))
        >>> a.shape, b.dtype, b.data_ptr() - a.data_ptr(), a.data_ptr() % 256
        (torch.Size([2, 3]), torch.int8, 256, 0)
        >>> ws.lock()
        >>> ws.get_simultaneous(((4096,), torch.float32))
        Traceback (most recent call last):
        ...
        functional_ws._errors.WorkspaceLockedError: Workspace is locked but allocation from ...
    """

    def __init__(
        self,
        device: torch.device | str,
        num_ubatches: int | None = None,
        num_lanes: int = 1,
        alloc_context: Callable[[], AbstractContextManager[Any]] = nullcontext,
        *,
        growth: fws.GrowthPolicy = "slot",
        alignment: int = 256,
        allocator: AllocatorArg = "torch",
    ) -> None:
        if not callable(alloc_context):
            raise TypeError(
                f"alloc_context must be a callable returning a context manager, got "
                f"{alloc_context!r}."
            )
        self._state = fws.initial_state(
            1 if num_ubatches is None else num_ubatches,
            num_lanes,
            alignment=alignment,
            growth=growth,
        )
        self._device = torch.device(device)
        self._alloc_context = alloc_context
        self._num_ubatches = self._state.num_ubatches
        self._num_lanes = self._state.num_lanes
        count = len(self._state.slots)
        self._buffers = SlotBuffers(
            self._device,
            count,
            self._state.alignment,
            alloc_context,
            resolve_allocator(allocator, self._device),
        )
        # Per slot: raw request -> [state the replay left unchanged, plan, carved views].
        self._acquired: list[_Memo] = [_Memo() for _ in range(count)]
        self._retained: list[_Memo] = [_Memo() for _ in range(count)]
        # The same memos indexed [ubatch][lane], as the hot paths look them up.
        self._acquired_at = _by_slot(self._acquired, self._num_lanes)
        self._retained_at = _by_slot(self._retained, self._num_lanes)
        self._resources: list[dict[Hashable, Any]] = [{} for _ in range(count)]
        self._mutex = threading.RLock()
        if self._device.type == "cuda" and self._buffers.allocator.name != "jax":
            warn_if_jax_preallocates(self._device, stacklevel=3)  # the workspace is torch's

    # ----- reading -----

    @property
    def state(self) -> WorkspaceState:
        """The current immutable :class:`functional_ws.WorkspaceState` (read-only)."""
        return self._state

    @property
    def device(self) -> torch.device:
        """The device the buffers live on."""
        return self._device

    @property
    def allocator(self) -> str:
        """Who provides the buffers: ``"torch"``, ``"jax"`` or the callable's name."""
        return self._buffers.allocator.name

    def is_locked(self) -> bool:
        """Check if workspace is locked."""
        return self._state.locked

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
        return collect(self._state, self._buffers.retired.pinned(), self.allocator)

    @property
    def last_layouts(self) -> dict[tuple[int, int], fws.Layout]:
        """Per slot, the layout of the last :meth:`get_simultaneous` (what pictures draw)."""
        return _last_plans(self._state, self._acquired)

    @property
    def last_spans(self) -> dict[tuple[int, int], fws.Span]:
        """Per slot, the span of the last :meth:`get_retained` (drawn intact or clobbered)."""
        return _last_plans(self._state, self._retained)

    def recording(self) -> AbstractContextManager[History]:
        """Record every public call and the state after it, until the block ends.

        Returns:
            A context manager yielding a :class:`History` (``history[0]`` is the state at
            the start); step through it, ``history.changes()`` or
            ``history.plot_capacity()``. Nothing is recorded, and nothing costs, outside.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> with ws.recording() as history:
            ...     _ = ws.get_simultaneous(((100,), torch.float32))
            ...     ws.lock()
            >>> print(history)
              0  start in slot (0, 0)
              1  get_simultaneous(((100,), float32)) in slot (0, 0)
              2  lock() in slot (0, 0)
            >>> history.capacities()
            {(0, 0): [0, 512, 512]}
        """
        return recording(self, current_slot)

    def _repr_html_(self) -> str:
        return fws.render_html(self)

    def __repr__(self) -> str:
        s = self._state
        allocator = "" if self.allocator == "torch" else f", allocator {self.allocator}"
        return (
            f"WorkspaceManager(device={self._device}, {s.num_ubatches} ubatch x "
            f"{s.num_lanes} lane, {fws.format_bytes(sum(x.capacity for x in s.slots))}, "
            f"{'locked' if s.locked else 'unlocked'}{allocator})"
        )

    # ----- lock -----

    def lock(self) -> None:
        """Lock the workspace to prevent growth or new persistent resources.

        Larger scratch requests and new persistent keys then raise an ``AssertionError``;
        existing buffers and resources keep their storage.
        """
        with self._mutex:
            self._state = fws.lock(self._state)
        self._log_sizes("locked")

    def unlock(self) -> None:
        """Unlock the workspace to allow growth (e.g. during elastic EP scaling)."""
        with self._mutex:
            self._state = fws.unlock(self._state)
        self._log_sizes("unlocked")

    def _log_sizes(self, what: str) -> None:
        if debug_enabled():
            logger.info(
                "[WORKSPACE DEBUG] Workspace %s. Current sizes (MB): %s",
                what,
                [s.capacity / _MB for s in self._state.slots if s.capacity],
            )

    # ----- scratch -----

    def get_simultaneous(
        self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]
    ) -> list[torch.Tensor]:
        """Get multiple workspace tensors simultaneously from a single allocation.

        The views lie back to back from the start of the current slot's buffer, each
        starting at a multiple of 256 bytes; the buffer grows to exactly the bytes needed
        when it is too small (refused while locked).

        Args:
            *shapes_and_dtypes: one or more ``(shape, dtype)`` pairs; a shape is a tuple of
                non-negative ints, a dtype a ``torch.dtype``.

        Returns:
            One fresh view per pair, valid until the slot grows.

        Raises:
            WorkspaceLockedError: (``AssertionError``, "Workspace is locked") the slot would
                have to grow; the message names the caller's ``file:line:function``.
            InvalidSpecError: (``ValueError``) a malformed pair, naming it.
            LaneNotConfiguredError: (``RuntimeError``, "is not configured") the current lane
                is past ``num_lanes``.
            GrowthDuringCaptureError: (``RuntimeError``) growth during CUDA graph capture.
        """
        # The hot path, inlined (each function call costs about a tenth of a microsecond):
        # find the slot's memo, look the request up, check the dims are plain ints, replay
        # the core's plan unless this state is known to leave it unchanged, make views.
        ubatch, lane = SLOT.get()
        if ubatch is None:
            ubatch = 0 if _context.provider is None else provided_ubatch()
        try:  # lane and ubatch are non-negative ints: too large raises IndexError
            memo = self._acquired_at[ubatch][lane]
            entry = memo[shapes_and_dtypes]
        except (IndexError, KeyError, TypeError):  # the slow path serves it or explains
            return self._acquire(shapes_and_dtypes)
        # A memoised ((1,), dtype) equals ((True,), dtype) and ((1.0,), dtype): check.
        for shape, _ in shapes_and_dtypes:
            for dim in shape:
                if type(dim) is not int:
                    return self._acquire(shapes_and_dtypes)
        state = self._state
        if entry[0] is not state:
            new, layout = replay_acquire(state, entry[1])
            if layout is not entry[1] or (new is not state and not self._commit(state, new)):
                return self._acquire(shapes_and_dtypes)
            if new is state:
                entry[0] = state
        memo.last = entry[1]  # what the pictures draw
        return entry[2]()  # type: ignore[no-any-return]

    def try_get_simultaneous(
        self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]
    ) -> list[torch.Tensor] | None:
        """:meth:`get_simultaneous`, but ``None`` where locked and short of space.

        Nothing changes when it returns ``None``. Other errors are raised as usual.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> ws.lock()
            >>> ws.try_get_simultaneous(((16,), torch.float32)) is None
            True
        """
        try:
            return self.get_simultaneous(*shapes_and_dtypes)
        except WorkspaceLockedError:
            return None

    def _commit(self, old: WorkspaceState, new: WorkspaceState) -> bool:
        """Install ``new`` if the state is still ``old`` (another thread may have moved it)."""
        with self._mutex:
            if self._state is not old:
                return False
            self._state = new
            return True

    def _acquire(self, specs: tuple[Any, ...]) -> list[torch.Tensor]:
        """The slow path of :meth:`get_simultaneous`: plan, grow, carve, memoise."""
        with self._mutex:
            slot = current_slot()
            old = self._state
            try:
                new, layout = fws.acquire(old, slot, *specs)
            except WorkspaceLockedError as err:
                raise _with_origin(err) from None
            for i, spec in enumerate(layout.specs):
                check_torch_dtype(spec, f"specs[{i}] dtype")
            self._install(old, new, layout.growth)
            fresh_views = view_maker(
                [
                    self._buffers.carve(layout.index, offset, spec)
                    for offset, spec in zip(layout.offsets, layout.specs, strict=True)
                ]
            )
            self._acquired[layout.index].last = layout.without_growth()
            if memoisable(specs):
                # [state the replay left unchanged, plan, maker of fresh views]
                entry = [None, layout.without_growth(), fresh_views]
                _remember(self._acquired[layout.index], specs, entry)
            return fresh_views()

    def get_retained(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        """Get a scratch view at the end of the workspace that can outlive requests.

        :meth:`get_simultaneous` hands out views from the start of the buffer, so requests
        smaller than the buffer leave its end alone. This view spans the buffer's last
        bytes (its start rounded down to 256), and the flag says whether they still hold
        what the previous ``get_retained`` left there: that call used the same key and
        size, no request since reached into the span, and the buffer was not reallocated.

        Args:
            key: identifies the caller; another key's call takes the span over.
            shape: shape of the view.
            dtype: dtype of the view.

        Returns:
            ``(view, intact)``.

        Raises:
            WorkspaceLockedError: (``AssertionError``) the slot would have to grow.
            InvalidSpecError: (``ValueError``) a bad shape or dtype, or an unhashable key.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> _ = ws.get_simultaneous(((1024,), torch.uint8))
            >>> view, intact = ws.get_retained("kv", (16,), torch.float32)
            >>> intact, ws.get_retained("kv", (16,), torch.float32)[1]
            (False, True)
        """
        ubatch, lane = SLOT.get()  # the slot lookup of get_simultaneous, inlined likewise
        if ubatch is None:
            ubatch = 0 if _context.provider is None else provided_ubatch()
        try:
            memo = self._retained_at[ubatch][lane]
            entry = memo[key, shape, dtype]
        except (IndexError, KeyError, TypeError):
            entry = None
        if entry is not None and plain_shape(shape):
            state = self._state
            if entry[0] is state:  # the replay left this state unchanged: intact
                memo.last = entry[1]  # what the pictures draw
                return entry[2].view(dtype), True
            new, span, intact = replay_retain(state, entry[1])
            if span is entry[1] and (new is state or self._commit(state, new)):
                if new is state:
                    entry[0] = state
                memo.last = span
                return entry[2].view(dtype), intact
        return self._retain(key, shape, dtype)

    def _retain(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        with self._mutex:
            slot = current_slot()
            old = self._state
            try:
                new, span, intact = fws.retain(old, slot, key, (shape, dtype))
            except WorkspaceLockedError as err:
                raise _with_origin(err) from None
            check_torch_dtype(span.spec, "dtype")
            self._install(old, new, span.growth)
            if span.growth:  # memoised as a later call will replay it
                span = dataclasses.replace(span, growth=())
            view = self._buffers.carve(span.index, span.offset, span.spec)
            self._retained[span.index].last = span
            if isinstance(shape, tuple) and plain_shape(shape):
                _remember(self._retained[span.index], (key, shape, dtype), [None, span, view])
            return view.view(dtype), intact

    # ----- growth -----

    def reserve(self, *specs: Any, slots: Iterable[tuple[int, int]] | None = None) -> None:
        """Grow ``slots`` (default: all) so that every request in ``specs`` fits without growth.

        The worst-case reservation to make before :meth:`lock` (vLLM #48179, #42275).

        Args:
            *specs: each a ``(shape, dtype)`` pair (one view or one retained span) or a list
                of pairs (one :meth:`get_simultaneous` call, padded the same way).
            slots: the ``(ubatch, lane)`` pairs to reserve in; ``None`` for all.

        Raises:
            WorkspaceLockedError: (``AssertionError``) locked and a slot would have to grow.
            InvalidSpecError: (``ValueError``) a malformed request or slot.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu", num_ubatches=2)
            >>> ws.reserve([((1024,), torch.float16), ((10,), torch.int32)])
            >>> [s.capacity for s in ws.stats().slots]
            [2304, 2304]
        """
        with self._mutex:
            old = self._state
            try:
                new = fws.reserve(old, specs, slots)
            except WorkspaceLockedError as err:
                raise _with_origin(err) from None
            self._install(old, new, fws.growth_between(old, new))

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the current sizes to ``path`` as JSON (:func:`functional_ws.to_dict`).

        Load it at the next start with :meth:`load_plan` to reserve those sizes at once.
        """
        _plans.save_plan(self._state, path)

    def load_plan(self, path: str | os.PathLike[str]) -> None:
        """Reserve the capacities a saved plan lists, and lock if the plan was locked.

        Args:
            path: a file written by :meth:`save_plan`.

        Raises:
            InvalidSpecError: (``ValueError``) a malformed plan, or one made for another
                number of ubatches or lanes or another alignment.
            WorkspaceLockedError: this manager is locked and would have to grow.

        Example:
            >>> import os, tempfile, torch
            >>> from interop import WorkspaceManager
            >>> warm = WorkspaceManager("cpu")
            >>> _ = warm.get_simultaneous(((1000,), torch.float32))
            >>> warm.lock()
            >>> path = os.path.join(tempfile.mkdtemp(), "plan.json")
            >>> warm.save_plan(path)
            >>> fresh = WorkspaceManager("cpu")
            >>> fresh.load_plan(path)
            >>> fresh.is_locked(), fresh.stats().slots[0].capacity
            (True, 4096)
        """
        with self._mutex:
            old = self._state
            try:
                new, locked = _plans.reserve_plan(old, path)
            except WorkspaceLockedError as err:
                raise _with_origin(err) from None
            self._install(old, new, fws.growth_between(old, new))
        if locked:
            self.lock()

    def _install(self, old: WorkspaceState, new: WorkspaceState, growth: fws.Growth) -> None:
        """Install ``new``, first reallocating the buffers ``growth`` names.

        ``growth`` is what the core planned going from ``old`` to ``new``. If an allocation
        fails, the state that describes the buffers as they now are is installed instead,
        and the error raised.
        """
        if not growth:
            self._state = new
            return
        state, error = self._buffers.grow(old, new, growth, self._forget_views)
        self._state = state
        if error is not None:
            raise error

    def _forget_views(self, index: int) -> None:
        """Drop slot ``index``'s memoised views: its buffer is being replaced."""
        self._acquired[index].clear()
        self._retained[index].clear()

    def _slot_buffer(self, slot: tuple[int, int]) -> torch.Tensor | None:
        """The aligned ``uint8`` buffer of ``slot`` (for tests and debugging)."""
        return self._buffers.buffer(self._state.index(slot))


_M = TypeVar("_M")


class _Memo(dict[Any, list[Any]]):
    """A slot's memo of requests, and the plan (a ``Layout`` or ``Span``) of its last one."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        super().__init__()
        self.last: Any = None


def _last_plans(state: WorkspaceState, memos: list[_Memo]) -> dict[tuple[int, int], Any]:
    """Per slot that served a request, the plan of its last one."""
    return {state.slot_of(i): m.last for i, m in enumerate(memos) if m.last is not None}


def _by_slot(memos: list[_M], num_lanes: int) -> list[list[_M]]:
    """``memos`` (stored ubatch-major) as ``[ubatch][lane]``."""
    return [memos[i : i + num_lanes] for i in range(0, len(memos), num_lanes)]


def _with_origin(err: WorkspaceLockedError) -> WorkspaceLockedError:
    """The core's refusal, worded with the caller's ``file:line:function`` as the original."""
    return WorkspaceLockedError.for_request(err.slot, err.required, err.current, caller_origin())
