"""The torch façade: vLLM's ``WorkspaceManager`` API over the pure core.

The manager holds one immutable :class:`functional_ws.WorkspaceState` and one ``uint8``
buffer per ``(ubatch, lane)`` slot. Every call asks the core what to do (offsets, growth,
the retained span, the lock, what a failed growth leaves) and only carries it out: it
reallocates the buffers the core names, then carves typed views at the core's offsets.

The hot path. Each slot memoises, per raw request, the core's plan and the carved views
(``_memo.py``). A repeated request costs a dictionary lookup, a check that every dimension
is a plain ``int`` (a cached ``((1,), dtype)`` compares equal to ``((True,), dtype)`` and
``((1.0,), dtype)``, which must still be refused), the core's replay (skipped when the
state is the one the replay last left unchanged) and one ``view(dtype)`` per tensor: fresh
tensors on every call, as the original's, so what a caller does to one never reaches the
memoised view or another call's views.

Threads. The state changes only under ``_mutex``, by compare-and-swap against the state a
call planned from, and a slot's memo is replaced (the old one marked dead) before a growth
publishes its state; so no call returns views of a buffer the state no longer describes,
and ``intact=True`` always describes the bytes of the view returned. No user code (a
persistent factory, ``alloc_context()``, a callable allocator) runs under the mutex: user
code may call the manager, or wait for another thread that does, without deadlock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal, TypeVar

import torch

import functional_ws as fws
from functional_ws import Growth, InvalidSpecError, ViewSpec, WorkspaceLockedError, WorkspaceState
from functional_ws.replay import fit, replay_acquire, replay_retain

from . import _context, _plans
from ._allocators import AllocatorArg, resolve_allocator
from ._buffers import SlotBuffers, device_memory, fresh
from ._compile import run_eagerly_under_compile
from ._context import SLOT, current_slot, provided_ubatch
from ._device import normalize_device, refuse_growth_during_capture
from ._diagnostics import caller_origin, debug_enabled, logger
from ._display import manager_html, manager_plot, manager_repr
from ._history import History, Recorder
from ._jax_config import warn_if_jax_preallocates
from ._memo import AcquiredEntry, Memo, RetainedEntry
from ._persistent import PersistentTables, check_persistent_tensor, tensor_factory
from ._stats import WorkspaceStats, collect
from ._views import view_maker

_MB = 1024 * 1024
T = TypeVar("T")
R = TypeVar("R")
F = TypeVar("F")
_DTYPE = torch.dtype
#: A transition as the façade runs it: state -> (new state, growth to carry out, result).
Transition = Callable[[WorkspaceState], tuple[WorkspaceState, Growth, R]]


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
        alignment: byte alignment of every view, a power of two.
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
        self._state = fws.initial_state(
            1 if num_ubatches is None else num_ubatches,
            num_lanes,
            alignment=alignment,
            growth=growth,
            max_capacity=device_memory(self._device),
        )
        self._alloc_context = alloc_context
        self._num_ubatches = self._state.num_ubatches
        self._num_lanes = self._state.num_lanes
        count = len(self._state.slots)
        self._buffers = SlotBuffers(
            self._device, count, self._state.alignment, resolve_allocator(allocator, self._device)
        )
        self._acquired: list[Memo] = [Memo() for _ in range(count)]
        self._retained: list[Memo] = [Memo() for _ in range(count)]
        # The same memos indexed [ubatch][lane], as the hot paths look them up.
        self._acquired_at = _by_slot(self._acquired, self._num_lanes)
        self._retained_at = _by_slot(self._retained, self._num_lanes)
        self._persistent = PersistentTables(count)
        self._tables = self._persistent.tables
        self._recorder = Recorder(current_slot)
        self._recording = self._recorder.active  # non-empty while a recording is on
        self._mutex = threading.Lock()
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

    @property
    def _current_workspaces(self) -> list[torch.Tensor | None]:
        """Each slot's buffer in slot order (``ubatch * num_lanes + lane``), ``None`` where a
        slot has none: upstream vLLM's attribute, which its tests read. A new list on every
        read; changing it changes nothing here."""
        return self._buffers.buffers()

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
        state, device, allocator = self._state, self._device, self.allocator
        return manager_plot(state, self.last_layouts, self.last_spans, device, allocator, ax)

    def _repr_html_(self) -> str:
        state, device, allocator = self._state, self._device, self.allocator
        return manager_html(state, self.last_layouts, self.last_spans, device, allocator)

    def __repr__(self) -> str:
        return manager_repr(self._state, self._device, self.allocator)

    # ----- lock -----

    def lock(self) -> None:
        """Lock the workspace to prevent growth or new persistent resources.

        Larger scratch requests and new persistent keys then raise an ``AssertionError``;
        existing buffers and resources keep their storage.
        """
        if self._recording and self._recorder.outermost():
            return self._recorder.call(self, "lock", self.lock, (), {})  # type: ignore[no-any-return]
        self._set_lock(True)

    def unlock(self) -> None:
        """Unlock the workspace to allow growth (e.g. during elastic EP scaling).

        Does nothing when the workspace is not locked.
        """
        if self._recording and self._recorder.outermost():
            return self._recorder.call(self, "unlock", self.unlock, (), {})  # type: ignore[no-any-return]
        self._set_lock(False)

    def _set_lock(self, locked: bool) -> None:
        with self._mutex:
            self._state = (fws.lock if locked else fws.unlock)(self._state)
        if debug_enabled():
            logger.info(
                "[WORKSPACE DEBUG] Workspace %s. Current sizes (MB): %s",
                "locked" if locked else "unlocked",
                [s.capacity / _MB for s in self._state.slots if s.capacity],
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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(  # type: ignore[no-any-return]
                self, "get_simultaneous", self.get_simultaneous, shapes_and_dtypes, {}
            )
        # The hot path, inlined (each function call costs about a tenth of a microsecond):
        # find the slot's memo, look the request up, check the dims are plain ints, replay
        # the core's plan unless this state is known to leave it unchanged, make views.
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
            # A memoised ((1,), dtype) equals ((True,), dtype) and ((1.0,), dtype): check.
            for shape, _ in shapes_and_dtypes:
                for dim in shape:
                    if type(dim) is not int:
                        entry = memo = None
                        return self._acquire(shapes_and_dtypes, (ubatch, lane), None)
            state = self._state
            if entry.state is state:
                memo.last = entry.layout  # what the pictures draw
                return entry.fresh()  # type: ignore[no-any-return]
            views = self._replay_acquire(memo, entry, state)
            if views is not None:
                return views
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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(  # type: ignore[no-any-return]
                self, "try_get_simultaneous", self.try_get_simultaneous, shapes_and_dtypes, {}
            )
        try:
            return self.get_simultaneous(*shapes_and_dtypes)
        except WorkspaceLockedError:
            return None

    def _replay_acquire(
        self, memo: Memo, entry: AcquiredEntry, state: WorkspaceState
    ) -> list[torch.Tensor] | None:
        """A memoised request whose state moved: replay the plan, commit, reuse the views;
        ``None`` when the slow path must serve it."""
        if memo.dead:  # the slot's buffer was replaced after the memo was looked up
            return None
        moved = entry.moved
        if moved is not None and moved[0] is state:  # replayed from this state before
            new, layout = moved[1], entry.layout
        else:
            new, layout = replay_acquire(state, entry.layout, None if moved is None else moved[1])
            if layout is not entry.layout:  # it must grow: the slow path does that
                return None
            if new is not state:
                entry.moved = (state, new)
        if new is state:
            entry.state = state
        else:
            with self._mutex:  # compare and swap
                if self._state is not state:
                    return None
                self._state = new
        memo.last = layout
        return entry.fresh()

    def _acquire(
        self, specs: tuple[Any, ...], slot: tuple[int, int], memo: Memo | None
    ) -> list[torch.Tensor]:
        """The slow path of :meth:`get_simultaneous`: plan, grow, carve, memoise.

        The usual miss (a request seen for the first time that fits, such as a new
        ``num_tokens``) takes the short way: the core's :func:`functional_ws.replay.fit`, a
        compare-and-swap of the state, carving under the mutex, nothing memoised. A request
        seen before is memoised (:meth:`_acquire_planned`); one that needs growth grows.
        ``memo``: the slot's memo, where the hot path found it.
        """
        if memo is not None:
            if memo.old:  # maybe kept in the old generation: promoted, served from there
                entry = memo.promote(specs)
                if entry is not None:
                    return self.get_simultaneous(*specs)
            if memo.admits(specs):  # seen before: worth memoising
                return self._acquire_planned(specs, slot, admitted=True)
        while True:
            old = self._state
            try:
                planned = fit(old, slot, specs, _DTYPE)
            except WorkspaceLockedError as err:
                raise _worded(err) from None
            if planned is None:  # not plain: the core's acquire accepts or explains it
                asked = memo is not None  # then admits said no (and noted the request)
                return self._acquire_planned(specs, slot, admitted=False if asked else None)
            new, index, offsets, growth = planned
            if growth:
                return self._fit_growing(specs, slot, (old, new, growth, (index, offsets)))
            with self._mutex:
                if self._state is old:
                    self._state = new
                    views = self._buffers.carve(index, offsets, specs)
                    break
        (memo if memo is not None else self._acquired[index]).last = (slot, specs)  # pictures
        if len(views) == 1:  # fresh(views), unrolled for the usual single view
            (view,) = views
            return [view.view(view.dtype)]
        return fresh(views)

    def _fit_growing(
        self,
        specs: tuple[Any, ...],
        slot: tuple[int, int],
        planned: tuple[WorkspaceState, WorkspaceState, Growth, tuple[int, tuple[int, ...]]],
    ) -> list[torch.Tensor]:
        """A request seen for the first time that grows the slot: carried out as
        :func:`functional_ws.replay.fit` plans it (nothing memoised)."""

        def transition(
            state: WorkspaceState,
        ) -> tuple[WorkspaceState, Growth, tuple[int, tuple[int, ...]]]:
            again = fit(state, slot, specs, _DTYPE)
            assert again is not None  # the request is plain: fit answered before
            new, index, offsets, growth = again
            return new, growth, (index, offsets)

        def finish(placed: tuple[int, tuple[int, ...]]) -> list[torch.Tensor]:
            return self._buffers.carve(placed[0], placed[1], specs)  # under the mutex

        done, views = self._grow(transition, finish, planned)
        if not done:  # the state moved while the growth was prepared: plan it all again
            views = self._run(transition, finish)
        index = planned[3][0]
        self._acquired[index].last = (slot, specs)  # what the pictures draw (made on demand)
        return fresh(views)  # type: ignore[arg-type]

    def _acquire_planned(
        self, specs: tuple[Any, ...], slot: tuple[int, int], admitted: bool | None
    ) -> list[torch.Tensor]:
        """A request the core's :func:`functional_ws.acquire` plans: one seen before (it is
        memoised), one that grows the slot, or one that is not plain. ``admitted``: whether
        it was seen before, ``None`` when not asked yet."""
        _check_torch_dtypes(specs)  # the façade's word on a dtype that is not torch's
        while True:
            old = self._state
            try:
                new, layout = fws.acquire(old, slot, *specs)
            except WorkspaceLockedError as err:
                raise _worded(err) from None
            if layout.growth:
                return self._acquire_growing(specs, slot, (old, new, layout), admitted)
            with self._mutex:
                if self._state is old:
                    self._state = new
                    carved = self._carve_layout(layout)
                    memo = self._acquired[layout.index]
                    break
        return self._memoise(memo, specs, layout, carved, new, admitted)

    def _memoise(
        self,
        memo: Memo,
        specs: tuple[Any, ...],
        layout: fws.Layout,
        carved: list[torch.Tensor],
        state: WorkspaceState,
        admitted: bool | None,
    ) -> list[torch.Tensor]:
        """Keep ``carved`` for ``specs`` in ``memo`` if plain and seen before (``admitted``;
        ``None``: not asked yet, ask now); fresh views of them."""
        memo.last = layout
        if admitted is False or not _memoisable(specs) or not (admitted or memo.admits(specs)):
            return fresh(carved)
        layout = layout.without_growth()  # as a replay will see it (the identity protocol)
        memo.last = layout
        make = view_maker(carved)
        entry = AcquiredEntry(layout, make)
        entry.state = state  # a replay would leave this state unchanged
        memo.remember(specs, entry)  # if a growth killed this memo meanwhile: unused
        return make()

    def _carve_layout(self, layout: fws.Layout) -> list[torch.Tensor]:
        pairs = [(spec.shape, spec.dtype) for spec in layout.specs]
        return self._buffers.carve(layout.index, layout.offsets, pairs)

    def _acquire_growing(
        self,
        specs: tuple[Any, ...],
        slot: tuple[int, int],
        planned: tuple[WorkspaceState, WorkspaceState, fws.Layout],
        admitted: bool | None,
    ) -> list[torch.Tensor]:
        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, fws.Layout]:
            new, layout = fws.acquire(state, slot, *specs)
            return new, layout.growth, layout

        def finish(layout: fws.Layout) -> tuple[Any, ...]:
            # Under the mutex: carved from the buffers the new state describes.
            return layout, self._carve_layout(layout), self._acquired[layout.index], self._state

        old, new, layout = planned
        done, value = self._grow(transition, finish, (old, new, layout.growth, layout))
        if not done:  # the state moved while the growth was prepared: plan it all again
            value = self._run(transition, finish)
        layout, carved, memo, state = value  # type: ignore[misc]
        return self._memoise(memo, specs, layout, carved, state, admitted)

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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(  # type: ignore[no-any-return]
                self, "get_retained", self.get_retained, (key, shape, dtype), {}
            )
        ubatch, lane = SLOT.get()  # the slot lookup of get_simultaneous, inlined likewise
        if ubatch is None:
            ubatch = 0 if _context.provider is None else provided_ubatch()
        memo: Any  # a Memo, None once dropped
        try:
            memo = self._retained_at[ubatch][lane]
            entry = memo[key, shape, dtype]  # None when absent (Memo.__missing__)
        except (IndexError, TypeError):  # a slot not configured, an unhashable key
            entry = memo = None
        if entry is not None and type(shape) is tuple:
            for dim in shape:  # a memoised (1,) equals (True,) and (1.0,): check
                if type(dim) is not int:
                    entry = memo = None
                    return self._retain(key, shape, dtype)
            state = self._state
            if entry.state is state:  # the replay left this state unchanged: intact
                memo.last = entry.span  # what the pictures draw
                return entry.view.view(dtype), True
            if not memo.dead:  # else the slot's buffer was replaced after the lookup
                moved = entry.moved
                if moved is not None and moved[0] is state:  # replayed from here before
                    new, span, intact = moved[1], entry.span, moved[2]
                else:
                    hint = None if moved is None else moved[1]
                    new, span, intact = replay_retain(state, entry.span, hint)
                    if new is not state and span is entry.span:
                        entry.moved = (state, new, intact)
                if span is entry.span:
                    if new is state:
                        entry.state = state
                    else:
                        with self._mutex:  # compare and swap
                            swapped = self._state is state
                            if swapped:
                                self._state = new
                        if not swapped:
                            entry = memo = None
                            return self._retain(key, shape, dtype)
                    memo.last = span
                    return entry.view.view(dtype), intact
        # The slow path may replace this slot's buffer: hold nothing that pins the old one.
        entry = memo = None
        return self._retain(key, shape, dtype)

    def _retain(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        _check_torch_dtypes(((shape, dtype),), "dtype")
        spec = ViewSpec.of(shape, dtype, "spec")  # the caller's shape and dtype read once
        slot = current_slot()

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, Any]:
            new, span, intact = fws.retain(state, slot, key, spec)
            return new, span.growth, (span, intact)

        def finish(planned: tuple[fws.Span, bool]) -> tuple[Any, ...]:
            # Under the mutex: carved from the buffer the new state describes.
            span = planned[0].without_growth()
            (view,) = self._buffers.carve(span.index, (span.offset,), ((shape, dtype),))
            return span, planned[1], view, self._retained[span.index], self._state

        span, intact, view, memo, state = self._run(transition, finish)
        memo.last = span
        if type(shape) is tuple and _plain_shape(shape) and memo.admits((key, shape, dtype)):
            entry = RetainedEntry(span, view)
            entry.state = state  # a replay would leave this state unchanged
            memo.remember((key, shape, dtype), entry)
        return view.view(dtype), intact

    # ----- carrying out transitions -----

    def _run(
        self,
        transition: Transition[R],
        finish: Callable[[R], F],
        planned: tuple[WorkspaceState, WorkspaceState, Growth, R] | None = None,
    ) -> F:
        """Run ``transition`` on the current state and install its result, growing first
        when it says so; then ``finish(result)`` under the mutex (it carves views from the
        buffers the new state describes).

        Optimistic: the transition runs with no lock held (it may run the caller's code: a
        key's ``__eq__``), and its result is installed only if the state is still the one
        it planned from; otherwise it runs again. A growth is prepared with no lock held
        too: the capture check, ``alloc_context()`` entered and a callable allocator's
        buffers allocated (user code, which may use the manager or wait for threads that
        do). The mutex covers only the swap, the release and allocation of buffers with a
        built-in allocator, and carving. ``planned``: the transition's result on a state,
        when the caller has it already (``(old, new, growth, result)``).
        """
        while True:
            if planned is None:
                old = self._state
                new, growth, result = self._plan(transition, old)
            else:
                (old, new, growth, result), planned = planned, None
            if growth:
                done, value = self._grow(transition, finish, (old, new, growth, result))
                if done:
                    return value  # type: ignore[return-value]
                continue
            with self._mutex:
                if self._state is old:
                    self._state = new
                    return finish(result)

    def _plan(
        self, transition: Transition[R], state: WorkspaceState
    ) -> tuple[WorkspaceState, Growth, R]:
        try:
            return transition(state)
        except WorkspaceLockedError as err:
            raise _worded(err) from None

    def _grow(
        self,
        transition: Transition[R],
        finish: Callable[[R], F],
        planned: tuple[WorkspaceState, WorkspaceState, Growth, R],
    ) -> tuple[bool, F | None]:
        """Carry out the growth ``planned`` names (``(old, new, growth, result)``) if the
        transition still plans it: ``(True, finish(result))``; ``(False, None)`` when the
        state moved meanwhile (the caller runs it again)."""
        if self._device.type == "cuda":
            refuse_growth_during_capture(self._device, *planned[2][0])
        if self._alloc_context is nullcontext:  # the default: no context to enter
            done, value, error = self._grow_in_context(transition, finish, planned)
        else:
            with self._alloc_context():  # entered before anything is released
                done, value, error = self._grow_in_context(transition, finish, planned)
        self._buffers.report()  # logging runs handlers: never under the mutex
        if error is not None:
            raise error
        return done, value

    def _grow_in_context(
        self,
        transition: Transition[R],
        finish: Callable[[R], F],
        planned: tuple[WorkspaceState, WorkspaceState, Growth, R],
    ) -> tuple[bool, F | None, BaseException | None]:
        """:meth:`_grow` inside ``alloc_context()``: ``(done, finish(result), error)``."""
        old, new, growth, result = planned
        prepared = self._buffers.prepare(growth, new)  # a callable allocates here, unlocked
        if self._state is not old:  # user code ran: plan again on the state as it is
            old = self._state
            new, again, result = self._plan(transition, old)
            if again != growth:  # another thread changed the slots meanwhile
                return False, None, None
        with self._mutex:
            if self._state is not old:
                return False, None, None
            state, error = self._buffers.grow(old, new, growth, self._forget_views, prepared)
            self._state = state
            return True, (None if error is not None else finish(result)), error

    def _forget_views(self, index: int) -> None:
        """Slot ``index``'s buffer is being replaced: its memos die, fresh ones take over."""
        for memos, by_slot in (
            (self._acquired, self._acquired_at),
            (self._retained, self._retained_at),
        ):
            dead = memos[index]
            if not dead and not dead.old:  # no entry to outlive the buffer: keep it
                continue
            fresh = Memo()
            fresh.last, fresh.seen = dead.last, dead.seen
            dead.dead = True
            dead.clear()  # its views pin the old buffer
            dead.old.clear()
            memos[index] = fresh
            ubatch, lane = divmod(index, self._num_lanes)
            by_slot[ubatch][lane] = fresh

    # ----- growth -----

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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(  # type: ignore[no-any-return]
                self, "reserve", self.reserve, shapes_and_dtypes, {"slots": slots}
            )
        self._reserve_requests([_torch_specs(shapes_and_dtypes, "shapes_and_dtypes")], slots)

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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(  # type: ignore[no-any-return]
                self, "reserve_many", self.reserve_many, (requests,), {"slots": slots}
            )
        if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
            raise InvalidSpecError(f"requests must be a list of requests, got {requests!r}.")
        checked = []
        for i, request in enumerate(requests):
            if isinstance(request, (str, bytes)) or not isinstance(request, Iterable):
                raise InvalidSpecError(
                    f"requests[{i}] must be a list of (shape, dtype) pairs, got {request!r}."
                )
            checked.append(_torch_specs(tuple(request), f"requests[{i}]"))
        self._reserve_requests(checked, slots)

    def _reserve_requests(
        self, requests: list[list[ViewSpec]], slots: Iterable[tuple[int, int]] | str | None
    ) -> None:
        if slots is None:
            lane = current_slot()[1]
            self._state.index((0, lane))  # the current lane must exist
            chosen: Iterable[tuple[int, int]] | None = [
                (u, lane) for u in range(self._num_ubatches)
            ]
        elif isinstance(slots, str):
            if slots != "all":
                raise InvalidSpecError(
                    f"slots must be None, 'all' or a list of slots, got {slots!r}."
                )
            chosen = None
        else:
            chosen = slots

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, None]:
            new, growth = fws.reserve(state, requests, chosen)
            return new, growth, None

        self._run(transition, _nothing)

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the current sizes to ``path`` as JSON (:func:`functional_ws.to_dict`).

        The file is replaced atomically: a write that fails leaves the previous plan intact.
        Load it at the next start with :meth:`load_plan` to reserve those sizes at once.
        """
        _plans.save_plan(self._state, path)

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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(self, "load_plan", self.load_plan, (path,), {})  # type: ignore[no-any-return]
        plan = _plans.load_plan(path)

        def transition(state: WorkspaceState) -> tuple[WorkspaceState, Growth, None]:
            try:
                new, growth = fws.apply_plan(state, plan)
            except fws.InvalidPlanError as err:
                raise fws.InvalidPlanError(f"plan file {os.fspath(path)!r}: {err}") from None
            return new, growth, None

        self._run(transition, _nothing)

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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(  # type: ignore[no-any-return]
                self, "get_persistent_resource", self.get_persistent_resource, (key, factory), {}
            )
        index = _context.current_index(self._num_ubatches, self._num_lanes)
        if index >= 0:
            try:
                return self._tables[index][key]  # type: ignore[no-any-return]
            except (KeyError, TypeError):
                pass
        return self._create_resource(key, factory)

    def _create_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        slot = current_slot()
        index = self._state.index(slot)
        fws.claim(self._state, slot, key)  # refuses a new key while locked, before creating
        table = self._tables[index]
        if key in table:
            return table[key]  # type: ignore[no-any-return]
        if not callable(factory):
            raise TypeError(f"factory must be a callable returning the resource, got {factory!r}.")
        resource = factory()  # no lock held: the factory may use the manager, or wait
        while True:  # claimed only once it exists: a factory that raised leaves no key
            old = self._state
            new, _ = fws.claim(old, slot, key)
            with self._mutex:
                if self._state is old:
                    self._state = new
                    break
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
        if self._recording and self._recorder.outermost():
            return self._recorder.call(  # type: ignore[no-any-return]
                self, "get_persistent", self.get_persistent, (key, shape, dtype),
                {"zero_init": True} if zero_init else {},
            )  # fmt: skip
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
                and _plain_shape(shape)
            ):
                return tensor
        _check_torch_dtypes(((shape, dtype),), "dtype")
        spec = ViewSpec.of(shape, dtype, "persistent")
        factory = tensor_factory(spec, self._device, zero_init)
        resource = self.get_persistent_resource((torch.Tensor, key), factory)
        return check_persistent_tensor(key, resource, spec.shape, dtype)

    def _slot_buffer(self, slot: tuple[int, int]) -> torch.Tensor | None:
        """The aligned ``uint8`` buffer of ``slot`` (for tests and debugging)."""
        return self._buffers.buffer(self._state.index(slot))


def _plain_shape(shape: tuple[Any, ...]) -> bool:
    for dim in shape:  # noqa: SIM110 - a loop: hot paths call it
        if type(dim) is not int:
            return False
    return True


def _memoisable(specs: tuple[Any, ...]) -> bool:
    """Whether a request the core accepted may be memoised: pairs of plain int tuples.

    Any request equal to such a one is made of pairs of tuples too, so the hot path's
    dimension check cannot fail on it (a cached ``((1,), dtype)`` equals
    ``((True,), dtype)``, which that check sends to the core to refuse).
    """
    for spec in specs:
        if type(spec) is not tuple or type(spec[0]) is not tuple or not _plain_shape(spec[0]):
            return False
    return True


def _check_torch_dtypes(specs: tuple[Any, ...], name: str | None = None) -> None:
    """Refuse a pair whose dtype is not a ``torch.dtype``, before the core checks the rest.

    The core accepts any dtype with an itemsize; the façade makes torch tensors.
    """
    for i, spec in enumerate(specs):
        if type(spec) is tuple and len(spec) == 2 and type(spec[1]) is torch.dtype:
            continue  # the usual request
        if (
            isinstance(spec, (tuple, list))
            and len(spec) == 2
            and not isinstance(spec[1], torch.dtype)
        ):
            what = name or f"specs[{i}] dtype"
            raise InvalidSpecError(
                f"{what} must be a torch.dtype such as torch.float32 (the views are torch "
                f"tensors), got {spec[1]!r}."
            )


def _torch_specs(pairs: tuple[Any, ...], argname: str) -> list[ViewSpec]:
    """Each ``(shape, dtype)`` pair validated (a torch dtype), named ``argname[i]``."""
    specs = []
    for i, pair in enumerate(pairs):
        if isinstance(pair, tuple) and pair and all(type(d) is int for d in pair):
            raise InvalidSpecError(  # reserve((256, 1024), torch.bfloat16): a bare shape
                f"{argname}[{i}] must be a (shape, dtype) pair, got the shape {pair!r} alone. "
                f"Pass pairs: reserve((({', '.join(map(str, pair))},), dtype), ...)."
                if len(pair) == 1
                else f"{argname}[{i}] must be a (shape, dtype) pair, got the shape {pair!r} "
                f"alone. Pass pairs: reserve(({pair!r}, dtype), ...)."
            )
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidSpecError(f"{argname}[{i}] must be a (shape, dtype) pair, got {pair!r}.")
        _check_torch_dtypes((pair,), f"{argname}[{i}] dtype")
        specs.append(ViewSpec.of(pair[0], pair[1], f"{argname}[{i}]"))
    return specs


def _worded(err: WorkspaceLockedError) -> WorkspaceLockedError:
    """The core's refusal, worded as the original's: with the caller's ``file:line:function``."""
    return WorkspaceLockedError.for_request(err.slot, err.required, err.current, caller_origin())


def _nothing(result: object) -> None:
    return None


def _last_plans(state: WorkspaceState, memos: list[Memo]) -> dict[tuple[int, int], Any]:
    """Per slot that served a request, the plan of its last one.

    A request served the short way left ``(slot, specs)``: its layout is the core's plan of
    the same request on this state unlocked, without growth (a layout does not depend on
    the state beyond the alignment).
    """
    plans = {}
    for i, memo in enumerate(memos):
        last = memo.last
        if isinstance(last, tuple):
            slot, specs = last
            last = fws.acquire(fws.unlock(state), slot, *specs)[1].without_growth()
        if last is not None:
            plans[state.slot_of(i)] = last
    return plans


def _by_slot(memos: list[Memo], num_lanes: int) -> list[list[Memo]]:
    """``memos`` (stored ubatch-major) as ``[ubatch][lane]``."""
    return [memos[i : i + num_lanes] for i in range(0, len(memos), num_lanes)]
