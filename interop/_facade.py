"""The torch façade: vLLM's ``WorkspaceManager`` API over the pure core.

:class:`WorkspaceManager` holds the rooms of the shell (``interop/README.md`` draws them)
and its public methods, each of which normalises its arguments at the request boundary
(``_requests.py``) and hands the rest on: the hot paths look a request up in the slot's
memo (``_memo.py``) and, where the state is the one the memoised plan left, hand out fresh
views at once; everything else goes to the engine (``_engine.py``), which runs the core's
transition, carries out its growth and installs the new state.

The hot path of :meth:`WorkspaceManager.get_simultaneous` and
:meth:`WorkspaceManager.get_retained` is written out inline (each function call costs a
tenth of a microsecond there): find the slot's memo, look the request up, check that its
dims are plain ints (a memoised ``((1,), dtype)`` equals ``((True,), dtype)`` and
``((1.0,), dtype)``, which must still be refused), and serve the memoised views if the
state is the one their plan left; a state that moved goes to
:func:`interop._memo.replay_and_swap`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal, TypeVar

import torch

import functional_ws as fws
from functional_ws import Growth, InvalidSpecError, ViewSpec, WorkspaceState

from . import _context, _plans
from ._allocators import AllocatorArg, allocator_stack
from ._buffers import SlotBuffers
from ._carving import fresh
from ._compile import run_eagerly_under_compile
from ._context import SLOT, current_slot, provided_ubatch
from ._device import device_memory, normalize_device
from ._diagnostics import debug_enabled, logger
from ._display import manager_html, manager_plot, manager_repr
from ._engine import Engine
from ._history import History
from ._jax_config import warn_if_jax_preallocates
from ._memo import Memos, last_plans, memoise, memoise_retained, replay_and_swap
from ._persistent import PersistentTables, check_persistent_tensor, tensor_factory
from ._recording import Recorder
from ._requests import (
    NUMPY_INTS,
    canonical,
    canonical_shape,
    check_alignment,
    check_torch_dtypes,
    plain_nbytes,
    plain_shape,
    torch_specs,
)
from ._stats import WorkspaceStats, collect

_MB = 1024 * 1024
T = TypeVar("T")


@run_eagerly_under_compile
class WorkspaceManager:
    """Shared scratch memory and keyed persistent resources per ``(ubatch, lane)`` slot.

    A drop-in for vLLM's ``WorkspaceManager``: same methods, semantics, error types and
    message fragments, plus upstream's newer :meth:`reserve` and
    :meth:`try_get_simultaneous`. Views are carved back to back at offsets rounded up to
    256 bytes; only the requesting slot grows (by default), to exactly the bytes needed,
    never shrinking; the old buffer is released before the new one is allocated (the
    accelerator cache emptied in between) and allocation runs inside ``alloc_context()``.

    The current slot. Each call works in the slot of the calling context: the lane set by
    :func:`interop.use_workspace_lane` (default 0) and the ubatch set by
    :func:`interop.use_workspace_ubatch`, or else returned by the provider installed with
    :func:`interop.set_ubatch_provider` (vLLM's ``dbo_current_ubatch_id``), else 0.

    Beyond the original: absolute 256-byte alignment on every device, CPU-only torch
    support, :meth:`reserve_many`, a growth policy, :meth:`stats`, plans, reports of
    retired buffers that views still pin, no growth during CUDA graph capture, and a failed
    growth that loses nothing it can keep (see :meth:`get_simultaneous`).

    Args:
        device: where the buffers live (a ``torch.device`` or a string such as ``"cuda:0"``).
        num_ubatches: ubatch slots; ``None`` means 1.
        num_lanes: independent lanes per ubatch, at least one.
        alloc_context: a factory of the context manager every growth allocates in (vLLM
            passes a sleep-mode memory pool). It is entered before the old buffer is
            released, so a context that fails to enter changes nothing.
        growth: ``"slot"`` (the original: only the requesting slot grows) or ``"ubatches"``
            (every ubatch slot of the requesting lane grows with it).
        alignment: byte alignment of every view, a power of two of at least 16 (the largest
            torch itemsize).
        allocator: who provides each slot's buffer. ``"torch"`` (torch's allocator, as the
            original); ``"jax"`` (a JAX ``uint8`` array on the matching JAX device, used by
            torch zero-copy through DLPack: on a GPU where JAX preallocated, the workspace
            lives in JAX's pool, not torch's); or a callable ``allocator(nbytes, device)``
            returning a 1-D contiguous ``uint8`` tensor of at least ``nbytes`` on ``device``
            (a pool you already have), validated on every growth. The built-ins release a
            slot's old buffer before allocating the new one; a callable's new buffers are
            allocated first, so a refused result changes nothing, and a growth peaks at old
            plus new. Ordering with ``"jax"``: the buffer is memory JAX computations may
            read through :func:`interop.to_jax`; hand views to JAX with
            :func:`interop.jax_call` so that torch never writes a region a JAX computation
            is still reading.

    Raises:
        InvalidConfigError: (``ValueError``, "at least one") a count below one or too
            large, a bad alignment or an unknown growth policy.
        TypeError: ``alloc_context`` is not callable.
        UnknownAllocatorError: (``ValueError``) ``allocator`` is a string other than
            ``"torch"`` and ``"jax"``.
        AllocatorNotCallableError: (``TypeError``) ``allocator`` is neither.
        DeviceNotVisibleError: (``ValueError``) ``"jax"`` for a device JAX cannot see.
        UnknownDeviceError: (``RuntimeError``) ``device`` is not a device torch knows.
        DeviceUnavailableError: (``RuntimeError``) a device this process cannot use
            (``"cuda"`` on a torch built without CUDA, no GPU visible, an index too large).
        TypeError: ``device`` is neither a ``torch.device``, a string nor an index.

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
        functional_ws.WorkspaceLockedError: Workspace is locked but allocation from ...
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
        self._device = normalize_device(device)
        state = fws.initial_state(
            1 if num_ubatches is None else num_ubatches,
            num_lanes,
            alignment=alignment,
            growth=growth,
            max_capacity=device_memory(self._device),
        )
        check_alignment(state.alignment)  # a torch view must be able to start at each offset
        self._num_ubatches = state.num_ubatches
        self._num_lanes = state.num_lanes
        count = len(state.slots)
        self._allocator = allocator_stack(allocator, self._device)
        self._memos = Memos(count, self._num_lanes)
        buffers = SlotBuffers(self._device, count, state.alignment, self._allocator)
        self._engine = Engine(state, buffers, self._memos, alloc_context)
        # What the hot paths look up, bound once: memos by [ubatch][lane], resource tables.
        self._acquired_at = self._memos.acquired_at
        self._retained_at = self._memos.retained_at
        self._persistent = PersistentTables(count)
        self._tables = self._persistent.tables
        self._recorder = Recorder(current_slot)
        if self._device.type == "cuda" and self._allocator.name != "jax":
            warn_if_jax_preallocates(self._device, stacklevel=3)  # the workspace is torch's

    # ----- reading -----

    @property
    def state(self) -> WorkspaceState:
        """The current immutable :class:`functional_ws.WorkspaceState` (read-only)."""
        return self._engine.state

    @property
    def device(self) -> torch.device:
        """The device the buffers live on."""
        return self._device

    @property
    def allocator(self) -> str:
        """Who provides the buffers: ``"torch"``, ``"jax"`` or the callable's name."""
        return self._allocator.name

    @property
    def _current_workspaces(self) -> list[torch.Tensor | None]:
        """Each slot's buffer in slot order (``ubatch * num_lanes + lane``), ``None`` where a
        slot has none: upstream vLLM's attribute, which its tests read. A new list on every
        read; changing it changes nothing here."""
        return self._engine.buffers.buffers()

    def _get_workspace_id(self) -> int:
        """The current slot's position, ``ubatch * num_lanes + lane`` (upstream's private
        method, which vLLM's tests call; PR #58161's tests call it ``_resolve_workspace_id``
        too)."""
        return self._engine.state.index(current_slot())

    _resolve_workspace_id = _get_workspace_id

    def is_locked(self) -> bool:
        """Check if workspace is locked."""
        return self._engine.state.locked

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
        return collect(self._engine.state, self._allocator.retired.pinned(), self.allocator)

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
        state, device, allocator = self._engine.state, self._device, self.allocator
        return manager_plot(state, self.last_layouts, self.last_spans, device, allocator, ax)

    def _repr_html_(self) -> str:
        state, device, allocator = self._engine.state, self._device, self.allocator
        return manager_html(state, self.last_layouts, self.last_spans, device, allocator)

    def __repr__(self) -> str:
        return manager_repr(self._engine.state, self._device, self.allocator)

    # ----- lock -----

    def lock(self) -> None:
        """Lock the workspace to prevent growth or new persistent resources.

        Larger scratch requests and new persistent keys then raise an ``AssertionError``;
        existing buffers and resources keep their storage.
        """
        self._set_lock(True)

    def unlock(self) -> None:
        """Unlock the workspace to allow growth (e.g. during elastic EP scaling).

        Does nothing when the workspace is not locked.
        """
        self._set_lock(False)

    def _set_lock(self, locked: bool) -> None:
        state = self._engine.update(fws.lock if locked else fws.unlock)
        if debug_enabled():
            logger.info(
                "[WORKSPACE DEBUG] Workspace %s. Current sizes: %s",
                "locked" if locked else "unlocked",
                [s.capacity / _MB for s in state.slots if s.capacity],
            )

    # ----- scratch -----

    def get_simultaneous(
        self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]
    ) -> list[torch.Tensor]:
        """Get multiple workspace tensors simultaneously from a single allocation.

        The views lie back to back from the start of the current slot's buffer (see the
        class docstring for how the slot is chosen), each starting at a multiple of 256
        bytes; the buffer grows to exactly the bytes needed when it is too small (refused
        while locked).

        A growth releases the old buffer first, then allocates (the original's order). A
        request that can never fit (above the device's total memory) is refused before
        anything is released. If the allocation itself fails (a real out-of-memory), the
        slot's old capacity is allocated again where possible: the slot keeps working at
        its old size, but its bytes are new, so its retained span is dropped; the error
        raised is the allocator's own, with a note saying what happened to the slot.

        Args:
            *shapes_and_dtypes: one or more ``(shape, dtype)`` pairs; a shape is a tuple of
                non-negative ints, a dtype a ``torch.dtype`` such as ``torch.float32``.

        Returns:
            One fresh view per pair, valid until the slot grows.

        Raises:
            WorkspaceLockedError: (``AssertionError``, "Workspace is locked") the slot would
                have to grow; the message names the caller's ``file:line:function``.
            InvalidSpecError: (``ValueError``) a malformed pair, naming it.
            LaneNotConfiguredError: (``RuntimeError``, "is not configured") the current lane
                is past ``num_lanes``.
            UbatchNotConfiguredError: (``RuntimeError`` and ``IndexError``) the current
                ubatch is past ``num_ubatches``.
            CapacityLimitError: (``RuntimeError``) more bytes than the device has.
            GrowthDuringCaptureError: (``RuntimeError``) growth during CUDA graph capture.
        """
        ubatch, lane = SLOT.get()
        if ubatch is None:
            ubatch = 0 if _context.provider is None else provided_ubatch()
        memo: Any  # a Memo, None once dropped (no annotation is evaluated at run time)
        try:  # lane and ubatch are non-negative ints: too large raises IndexError
            memo = self._acquired_at[ubatch][lane]
            entry = memo.get(shapes_and_dtypes)  # None when absent (then the old generation)
        except (IndexError, TypeError):  # a slot not configured, an unhashable request
            entry = memo = None
        if entry is not None:
            for shape, _ in shapes_and_dtypes:
                for dim in shape:  # a NumPy int is served as the int it equals
                    if type(dim) is not int and type(dim) not in NUMPY_INTS:
                        entry = memo = None  # equal to a memoised request, not plain
                        return self._acquire(shapes_and_dtypes, (ubatch, lane), None)
            engine = self._engine
            state = engine.state
            if entry.state is state:
                memo.last = entry.plan  # what the pictures draw
                return entry.fresh()  # type: ignore[no-any-return]
            if replay_and_swap(engine, memo, entry, state) is not None:
                return entry.fresh()  # type: ignore[no-any-return]
        # The slow path may replace this slot's buffer; a memo holds no views once it is
        # dead (a growth clears it), so keeping it pins nothing.
        entry = None
        return self._acquire(shapes_and_dtypes, (ubatch, lane), memo)

    def try_get_simultaneous(
        self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]
    ) -> list[torch.Tensor] | None:
        """:meth:`get_simultaneous`, but ``None`` where the workspace is locked and the
        current slot is too small (upstream vLLM's method).

        Unlocked, it grows as :meth:`get_simultaneous` does; locked and large enough, it
        returns the same views. Nothing changes when it returns ``None``. Other errors are
        raised as usual.

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
        except fws.WorkspaceLockedError:
            return None

    def _acquire(
        self, specs: tuple[Any, ...], slot: tuple[int, int], memo: Any
    ) -> list[torch.Tensor]:
        """The slow path of :meth:`get_simultaneous`: plan, grow, carve, memoise.

        A request seen for the first time (such as a new ``num_tokens``) takes the short
        way: the engine's :meth:`interop._engine.Engine.fit_and_carve` (growing the slot if
        it must), nothing memoised. A request seen before is memoised
        (:meth:`_acquire_planned`). ``memo``: the slot's memo, where the hot path found it.
        """
        nbytes = None if memo is None else plain_nbytes(specs)  # no memo: unhashable
        if nbytes is None:  # spelled otherwise: made canonical (lists, torch.Size, NumPy)
            canon = canonical(specs)
            if canon is not specs:
                return self.get_simultaneous(*canon)
            return self._acquire_planned(specs, slot, admitted=False)  # the core explains
        if memo is not None:
            if memo.old and memo.promote(specs) is not None:  # kept in the old generation
                return self.get_simultaneous(*specs)
            if memo.admits(specs):  # seen before: worth memoising
                return self._acquire_planned(specs, slot, admitted=True)
        else:  # the hot path found none: the slot is looked up (or explained)
            memo = self._memos.acquired[self._engine.state.index(slot)]
        views = self._engine.fit_and_carve(memo.index, nbytes, specs)
        if memo.dead:  # this call grew the slot: its memo was replaced
            memo = self._memos.acquired[memo.index]
        memo.last = (slot, specs)  # what the pictures draw
        if len(views) == 1:  # fresh(views), unrolled for the usual single view
            (view,) = views
            return [view.view(view.dtype)]
        return fresh(views)

    def _acquire_planned(
        self, specs: tuple[Any, ...], slot: tuple[int, int], admitted: bool | None
    ) -> list[torch.Tensor]:
        """A request the core's :func:`functional_ws.acquire` plans: one seen before (it is
        memoised), or one that is not plain. ``admitted``: whether it was seen before,
        ``None`` when not asked yet."""
        check_torch_dtypes(specs)  # the façade's word on a dtype that is not torch's
        engine = self._engine

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, fws.Layout]:
            new, layout = fws.acquire(state, slot, *specs)
            return new, layout.growth, layout

        def finish(layout: fws.Layout) -> tuple[Any, ...]:
            # Under the engine's mutex: carved from the buffers the new state describes.
            pairs = [(spec.shape, spec.dtype) for spec in layout.specs]
            carved = engine.buffers.carvers[layout.index].carve(layout.offsets, pairs)
            return layout, carved, self._memos.acquired[layout.index], engine.state

        layout, carved, memo, state = engine.run(transition, finish)
        views = memoise(memo, specs, layout, carved, state, admitted)
        if memo.dead:  # the slot grew since the views were carved: serve it again
            return self.get_simultaneous(*specs)
        return views

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
            dtype: dtype of the view (a ``torch.dtype``).

        Returns:
            ``(view, intact)``.

        Raises:
            WorkspaceLockedError: (``AssertionError``) the slot would have to grow.
            InvalidSpecError: (``ValueError``) a bad shape or dtype, or an unhashable key.
            CapacityLimitError: (``RuntimeError``) more bytes than the device has.

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
        memo: Any  # a Memo, None once dropped
        try:
            memo = self._retained_at[ubatch][lane]
            entry = memo[key, shape, dtype]  # None when absent (Memo.__missing__)
        except (IndexError, TypeError):  # a slot not configured, an unhashable key
            entry = memo = None
        if entry is not None and isinstance(shape, tuple):  # torch.Size too
            for dim in shape:  # a memoised (1,) equals (True,) and (1.0,): check
                if type(dim) is not int and type(dim) not in NUMPY_INTS:
                    entry = memo = None
                    return self._retain(key, shape, dtype)
            engine = self._engine
            state = engine.state
            if entry.state is state:  # the replay left this state unchanged: intact
                memo.last = entry.plan  # what the pictures draw
                return entry.view.view(dtype), True
            intact = replay_and_swap(engine, memo, entry, state)
            if intact is not None:
                return entry.view.view(dtype), intact
        # The slow path may replace this slot's buffer: hold nothing that pins the old one.
        entry = memo = None
        return self._retain(key, shape, dtype)

    def _retain(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        canon = canonical_shape(shape)
        if canon is not shape:  # spelled otherwise: served as its canonical spelling
            return self.get_retained(key, canon, dtype)
        check_torch_dtypes(((shape, dtype),), "dtype")
        spec = ViewSpec.of(shape, dtype, "spec")  # the caller's shape and dtype read once
        slot = current_slot()
        engine = self._engine

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, Any]:
            new, span, intact = fws.retain(state, slot, key, spec)
            return new, span.growth, (span, intact)

        def finish(planned: tuple[fws.Span, bool]) -> tuple[Any, ...]:
            # Under the engine's mutex: carved from the buffer the new state describes.
            span = planned[0].without_growth()
            (view,) = engine.buffers.carvers[span.index].carve((span.offset,), ((shape, dtype),))
            return span, planned[1], view, self._memos.retained[span.index], engine.state

        span, intact, view, memo, state = engine.run(transition, finish)
        memoise_retained(memo, (key, shape, dtype), span, view, state)  # hashes the key
        if memo.dead:  # the key's code grew the slot since the view was carved: again
            return self._retain(key, shape, dtype)
        return view.view(dtype), intact

    # ----- reservations and plans -----

    def reserve(
        self,
        *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype],
        slots: Iterable[tuple[int, int]] | Literal["all"] | None = None,
    ) -> None:
        """Pre-allocate room for these views, taken together, in every ubatch slot
        (upstream vLLM's method).

        Sizes ONE simultaneous layout of all the pairs (each rounded up to 256 bytes, back
        to back, exactly as :meth:`get_simultaneous` lays them out) and grows each slot
        that is smaller. Idempotent; call it before :meth:`lock` so that the lock snapshots
        a workspace large enough on every ubatch, not only the one that happened to run.

        Which slots: by default every ubatch slot of the current lane (upstream has no
        lanes); ``slots="all"`` for every slot of every lane, or a list of
        ``(ubatch, lane)`` pairs. The growth policy applies as usual.

        Args:
            *shapes_and_dtypes: ``(shape, dtype)`` pairs, one :meth:`get_simultaneous`
                call's worth.
            slots: ``None`` (the current lane's ubatch slots), ``"all"`` or a list of slots.

        Raises:
            WorkspaceLockedError: (``AssertionError``) locked and a slot would have to grow.
            InvalidSpecError: (``ValueError``) a malformed pair or slot list.
            CapacityLimitError: (``RuntimeError``) more bytes than the device has.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu", num_ubatches=2)
            >>> ws.reserve(((1024,), torch.float16), ((10,), torch.int32))
            >>> [s.capacity for s in ws.stats().slots]
            [2304, 2304]
        """
        pairs = canonical(shapes_and_dtypes, "shapes_and_dtypes")
        self._reserve_requests([torch_specs(pairs, "shapes_and_dtypes")], slots)

    def reserve_many(
        self,
        requests: Iterable[Iterable[tuple[tuple[int, ...], torch.dtype]]],
        *,
        slots: Iterable[tuple[int, int]] | Literal["all"] | None = None,
    ) -> None:
        """Reserve several requests at once: each slot grows to the largest of them.

        Args:
            requests: each a list of ``(shape, dtype)`` pairs, one :meth:`get_simultaneous`
                call (a one-pair list also covers a :meth:`get_retained` of that pair).
            slots: as for :meth:`reserve`.

        Raises:
            WorkspaceLockedError: (``AssertionError``) locked and a slot would have to grow.
            InvalidSpecError: (``ValueError``) a malformed request or slot list.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu", num_lanes=2)
            >>> ws.reserve_many([[((300,), torch.uint8)], [((10,), torch.float32)] * 3],
            ...                 slots="all")
            >>> [s.capacity for s in ws.stats().slots]
            [768, 768]
        """
        if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
            raise InvalidSpecError(f"requests must be a list of requests, got {requests!r}.")
        checked = []
        for i, request in enumerate(requests):
            if isinstance(request, (str, bytes)) or not isinstance(request, Iterable):
                raise InvalidSpecError(
                    f"requests[{i}] must be a list of (shape, dtype) pairs, got {request!r}."
                )
            pairs = canonical(tuple(request), f"requests[{i}]")
            checked.append(torch_specs(pairs, f"requests[{i}]"))
        self._reserve_requests(checked, slots)

    def _reserve_requests(
        self, requests: list[list[ViewSpec]], slots: Iterable[tuple[int, int]] | str | None
    ) -> None:
        if slots is None:
            lane = current_slot()[1]
            self._engine.state.index((0, lane))  # the current lane must exist
            chosen: Iterable[tuple[int, int]] | None = [
                (u, lane) for u in range(self._num_ubatches)
            ]
        elif isinstance(slots, str):
            if slots != "all":
                raise InvalidSpecError(
                    f"slots must be None, 'all' or a list of slots, got {slots!r}."
                )
            chosen = None
        else:  # read once: a transition may run again (another thread moved the state)
            chosen = tuple(slots) if isinstance(slots, Iterable) else slots

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, None]:
            new, growth = fws.reserve(state, requests, chosen)
            return new, growth, None

        self._engine.run(transition, _nothing)

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the current sizes to ``path`` as JSON (:func:`functional_ws.to_dict`).

        The file is replaced atomically: a write that fails leaves the previous plan intact.
        Load it at the next start with :meth:`load_plan` to reserve those sizes at once.
        """
        _plans.save_plan(self._engine.state, path)

    def load_plan(self, path: str | os.PathLike[str]) -> None:
        """Reserve the capacities a saved plan lists, and lock if the plan was locked.

        The whole plan is checked before anything grows, and a plan that needs a slot to
        grow above the device's memory is refused before anything is released.

        Args:
            path: a file written by :meth:`save_plan`.

        Raises:
            InvalidPlanError: (``ValueError``) the file is not a plan (naming the file and
                the field), or it was made for another number of ubatches or lanes or
                another alignment.
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
        plan = _plans.load_plan(path)

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, None]:
            try:
                new, growth = fws.apply_plan(state, plan)
            except fws.InvalidPlanError as err:
                raise fws.InvalidPlanError(f"plan file {os.fspath(path)!r}: {err}") from None
            return new, growth, None

        self._engine.run(transition, _nothing)

    # ----- persistent resources -----

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
        slot = current_slot()
        state = self._engine.state
        index = state.index(slot)
        fws.claim(state, slot, key)  # refuses a new key while locked, before creating
        table = self._tables[index]
        if key in table:
            return table[key]  # type: ignore[no-any-return]
        if not callable(factory):
            raise TypeError(f"factory must be a callable returning the resource, got {factory!r}.")
        resource = factory()  # no lock held: the factory may use the manager, or wait
        # Claimed only once it exists: a factory that raised leaves no key.
        self._engine.update(lambda state: fws.claim(state, slot, key)[0])
        return self._persistent.keep(index, key, resource)  # type: ignore[no-any-return]

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

    def _slot_buffer(self, slot: tuple[int, int]) -> torch.Tensor | None:
        """The aligned ``uint8`` buffer of ``slot`` (for tests and debugging)."""
        return self._engine.buffers.buffer(self._engine.state.index(slot))


def _nothing(result: object) -> None:
    return None
