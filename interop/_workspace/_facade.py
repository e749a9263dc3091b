"""The torch façade: vLLM's ``WorkspaceManager`` API over the pure core.

:class:`WorkspaceManager` is one class holding the rooms of the manager (``README.md``
beside it draws them). Each public method normalises its arguments at the request boundary
(``_requests.py``) and hands the rest on: the hot paths look a request up in the slot's
memo (``_memo.py``) and, where the state is the one the memoised plan left, hand out fresh
views at once; everything else goes to the miss path or the slow paths (``_serving.py``),
which have the engine (``_engine.py``) install the core's transition, carry out its growth
and carve the views.

The hits of :meth:`WorkspaceManager.get_simultaneous` and
:meth:`WorkspaceManager.get_retained` are written out inline (a call is a measurable share
of a repeated request: ``benchmarks/bench_hot_path.py``): find the slot's memo, look the
request up, check that its dims are plain ints (a memoised ``((1,), dtype)`` equals
``((True,), dtype)`` and ``((1.0,), dtype)``, which must still be refused), and serve the
memoised views if the state is the one their plan left; a state that moved goes to
:func:`interop._workspace._memo.replay_and_swap`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any, Literal, TypeVar

import torch

import functional_ws as fws
from functional_ws import ViewSpec, WorkspaceState
from functional_ws.fast_paths import interchangeable_keys

from .. import _context
from .._compile import run_eagerly_under_compile
from .._context import SLOT, known_slot, provided_ubatch
from .._device import device_memory, normalize_device
from .._diagnostics import debug_enabled, logger
from .._errors import FakeCopyError
from .._private import fake_mode_active, is_fake_tensor
from . import _plans
from ._allocators import AllocatorArg, allocator_stack
from ._buffers import SlotBuffers
from ._carving import fresh
from ._display import manager_html, manager_plot, manager_repr
from ._engine import Engine
from ._history import History
from ._memo import Memo, Memos, last_plans, replay_and_swap
from ._persistent import (
    PersistentTables,
    check_persistent_tensor,
    check_tensor_key,
    tensor_factory,
)
from ._recording import Recorder, recorded
from ._requests import (
    NUMPY_INTS,
    canonical,
    canonical_shape,
    check_alignment,
    check_torch_dtypes,
    chosen_slots,
    plain_nbytes,
    plain_shape,
    reserve_requests,
    torch_specs,
)
from ._serving import Server
from ._stats import WorkspaceStats, collect

_MB = 1024 * 1024
#: What the hot paths' memo tables are while a recording runs (:meth:`WorkspaceManager._route`).
_NOT_SERVED: tuple[()] = ()
T = TypeVar("T")


@run_eagerly_under_compile
class WorkspaceManager:
    """Shared scratch memory and keyed persistent resources per ``(ubatch, lane)`` slot.

    A drop-in for vLLM's ``WorkspaceManager``: same methods, semantics, error types and
    message fragments, plus :meth:`reserve` and :meth:`try_get_simultaneous` as vLLM's PR
    #42551 proposed them (closed without merging: no vLLM release has them).
    Views are carved back to back at offsets rounded up to 256 bytes; a slot grows to
    exactly the bytes needed, never shrinking, in the original's order (README:
    "Guarantees"). Each call works in the slot of the calling context: the lane of
    :func:`interop.use_workspace_lane` (default 0) and the ubatch of
    :func:`interop.use_workspace_ubatch`, else ``interop.dbo_current_ubatch_id`` where a
    test replaced it, else the :func:`interop.set_ubatch_provider` provider, else 0.

    Args:
        device: where the buffers live (a ``torch.device`` or a string such as ``"cuda:0"``).
        num_ubatches: ubatch slots; ``None`` means 1.
        num_lanes: independent lanes per ubatch, at least one.
        alloc_context: a factory of the context manager every growth allocates in (vLLM
            passes a sleep-mode memory pool). As in the original it is entered after the
            old buffer is released and the cache emptied; a context that fails to enter is
            recovered as a failed allocation.
        growth: ``"slot"`` (the original: only the requesting slot grows) or ``"ubatches"``
            (every ubatch slot of the requesting lane grows with it).
        alignment: byte alignment of every view, a power of two of at least 16 (the largest
            torch itemsize).
        allocator: who provides each slot's buffer: ``"torch"`` (as the original),
            ``"jax"`` (a JAX ``uint8`` array, used by torch zero-copy through DLPack: on a
            GPU where JAX preallocated, the workspace lives in JAX's pool), or a callable
            ``allocator(nbytes, device)`` returning a 1-D contiguous ``uint8`` tensor of at
            least ``nbytes`` on ``device`` (a pool you have), validated on every growth. A
            callable's new buffers are allocated before the old ones go, so a refused
            result changes nothing (a growth then peaks at old plus new). With ``"jax"``,
            hand views to JAX with :func:`interop.jax_call`, so that torch never writes a
            region a JAX computation still reads.

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
            1 if num_ubatches is None else _context.plain_int(num_ubatches),
            _context.plain_int(num_lanes),
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
        self._acquired_at: Sequence[list[Memo]] = self._memos.acquired_at
        self._retained_at: Sequence[list[Memo]] = self._memos.retained_at
        self._persistent = PersistentTables(count)
        self._tables: Sequence[dict[Hashable, Any]] = self._persistent.tables
        self._server = Server(self._engine, self._memos, self._persistent)
        self._recorder = Recorder(WorkspaceManager._current_slot)  # the slot it serves in
        self._recorder.adopt(self)
        #: What a copy is made with (:meth:`__reduce__`).
        self._config = {
            "num_ubatches": state.num_ubatches,
            "num_lanes": state.num_lanes,
            "alloc_context": alloc_context,
            "growth": state.growth,
            "alignment": state.alignment,
            "allocator": allocator,
        }
        if self._device.type == "cuda" and self._allocator.name != "jax":
            # JAX's memory settings are the bridge's: imported only for a GPU workspace.
            from .._bridge._jax_config import warn_if_jax_preallocates

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
        return self._engine.state.index(self._current_slot())

    _resolve_workspace_id = _get_workspace_id

    def is_locked(self) -> bool:
        """Check if workspace is locked."""
        return self._engine.state.locked

    # ----- lock -----

    @recorded
    def lock(self) -> None:
        """Lock the workspace to prevent growth or new persistent resources.

        Larger scratch requests and new persistent keys then raise an ``AssertionError``;
        existing buffers and resources keep their storage.
        """
        self._set_lock(True)

    @recorded
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

        A request that can never fit (above the device's memory) is refused before anything
        is released; a failed allocation gives the slot its old capacity again where it can
        (new bytes: the retained span is dropped) and raises the allocator's own error with
        a note (README: "Guarantees").

        Args:
            *shapes_and_dtypes: one or more ``(shape, dtype)`` pairs; a shape is a tuple,
                ``torch.Size`` or list of non-negative ints (NumPy integers too), a dtype a
                ``torch.dtype`` such as ``torch.float32``.

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
        memo: Any  # a Memo; None for a slot not configured or a request not hashable
        try:  # lane and ubatch are non-negative ints: too large raises IndexError
            memo = self._acquired_at[ubatch][lane]
            entry = memo.get(shapes_and_dtypes)  # None when absent
        except (IndexError, TypeError):  # not configured; unhashable (a list shape)
            entry = memo = None  # (served below: an error raised here would chain to this)
        if entry is None:
            nbytes: Any = None if memo is None else plain_nbytes(shapes_and_dtypes)
            if nbytes is None or memo.old or memo.admits(shapes_and_dtypes):
                served = self._miss(shapes_and_dtypes, memo, (ubatch, lane), nbytes)
                if served is not None:
                    return served
            # Seen for the first time, the miss path written out (bench_workloads' miss
            # rows): planned from its byte counts, carved, nothing kept.
            views = self._engine.fit_and_carve(memo.index, nbytes, shapes_and_dtypes)
            if memo.dead:  # this call grew the slot: its memo was replaced
                memo = self._memos.acquired_at[ubatch][lane]
            memo.last = shapes_and_dtypes  # what the pictures draw (the slot is the memo's)
            if len(views) == 1:  # fresh(), unrolled
                return [views[0].view(shapes_and_dtypes[0][1])]
            return fresh(views, shapes_and_dtypes)
        # A hit, written out here: bench_hot_path's "get_simultaneous x1" and "x3" (a call
        # is a measurable share of a repeated request). A memoised ((1,), dtype) equals
        # ((True,), dtype) and ((1.0,), dtype), which must still be refused: its dims are
        # checked (a NumPy int is served as the int it equals).
        for shape, _ in shapes_and_dtypes:
            for dim in shape:
                if type(dim) is not int and type(dim) not in NUMPY_INTS:
                    entry = None  # the slow path may grow the slot: pin nothing of it
                    return self._acquire(shapes_and_dtypes, (ubatch, lane))
        state = self._engine.state
        if entry.state is state:
            memo.last = entry.plan  # what the pictures draw
            one = entry.one
            if one is not None:  # the one-view shortcut ("get_simultaneous x1")
                return [one.view(entry.dtype)]
            return entry.fresh()  # type: ignore[no-any-return]
        if replay_and_swap(self._engine, memo, entry, state) is not None:
            return entry.fresh()  # type: ignore[no-any-return]
        entry = None  # the slow path may grow the slot: pin nothing of its old buffer
        return self._server.acquire(shapes_and_dtypes, (ubatch, lane), True)  # memoised anew

    def _miss(
        self, specs: tuple[Any, ...], memo: Memo | None, slot: tuple[int, int], nbytes: Any
    ) -> list[torch.Tensor] | None:
        """A request the memo could not serve and that is not a plain first sighting: one
        not in its plain form (``nbytes`` is ``None``: made canonical, or refused), one kept
        in the memo's old generation, or one seen before (planned and memoised). ``None``:
        a first sighting after all, which the caller serves.

        The memo was asked whether it saw the request before unless it has an old
        generation (then it is asked here)."""
        if memo is None or nbytes is None:  # spelled otherwise, not a request, no slot
            return self._acquire(specs, slot)
        if memo.old:
            if memo.promote(specs) is not None:
                return self.get_simultaneous(*specs)  # kept in the old generation: a hit now
            if not memo.admits(specs):
                return None
        return self._server.acquire_seen(specs, memo.index, nbytes)

    @recorded
    def try_get_simultaneous(
        self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]
    ) -> list[torch.Tensor] | None:
        """:meth:`get_simultaneous`, but ``None`` where the workspace is locked and the
        current slot is too small (as vLLM's unmerged PR #42551 proposed).

        Unlocked, it grows as :meth:`get_simultaneous` does; locked and large enough, it
        returns the same views. Nothing changes when it returns ``None``. Other errors are
        raised as usual, another manager's lock refusal too (raised by an ``alloc_context``
        or an allocator this manager's growth ran).

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
        except fws.WorkspaceLockedError as err:
            if err.refused_by is not self._engine:  # raised by code a growth ran
                raise
            return None

    def _acquire(self, specs: tuple[Any, ...], slot: tuple[int, int]) -> list[torch.Tensor]:
        """A request not in its plain form: served as its canonical form (lists,
        ``torch.Size``, NumPy ints), or, when it has none, by the core, which explains what
        is wrong with it (a slot not configured included). And every request while a
        recording runs (:meth:`_route`), recorded here."""
        if self._records_here(self._acquired_at):  # in the slot found (read once)

            def served(*pairs: Any) -> list[torch.Tensor]:
                return WorkspaceManager._acquire(self, pairs, slot)

            return self._recorder.call(self, "get_simultaneous", served, specs, {})  # type: ignore[no-any-return]
        canon = canonical(specs, "shapes_and_dtypes")  # the public argument's name
        if canon is not specs:
            return self.get_simultaneous(*canon)
        # A torch_call function on XLA's own thread: the only slot, or SlotUnknownError
        slot = known_slot(slot, self._num_ubatches * self._num_lanes)
        return self._server.acquire(specs, slot, False)

    def get_retained(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        """Get a scratch view at the end of the workspace that can outlive requests.

        :meth:`get_simultaneous` hands out views from the start of the buffer, so requests
        smaller than the buffer leave its end alone. This view spans the buffer's last
        bytes (its start rounded down to 256), and the flag says whether they still hold
        what the previous ``get_retained`` left there: that call used the same key and its
        span started at the same byte, no request since reached into the span, and the
        buffer was not reallocated. As in the original, the start decides, not the size:
        a larger view starting at the same byte (in the same 256-byte block) is intact too,
        and only its first bytes, as many as the previous call's view had, are kept.

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
        memo: Any  # a Memo; None for a slot not configured or a request not hashable
        try:
            memo = self._retained_at[ubatch][lane]
            entry = memo[key, shape, dtype]  # None when absent (Memo.__missing__)
        except (IndexError, TypeError):  # a slot not configured, an unhashable key
            entry = memo = None  # (served below: an error raised here would chain to this)
        if entry is not None and isinstance(shape, tuple):  # torch.Size too
            for dim in shape:  # a memoised (1,) equals (True,) and (1.0,): check
                if type(dim) is not int and type(dim) not in NUMPY_INTS:
                    entry = None  # the slow path may grow the slot: pin nothing of it
                    return self._retain(key, shape, dtype)
            if not interchangeable_keys(entry.plan.key, key):  # the slot keeps the latest
                entry = None  # (an equal key of another make: np.int64(1) for 1)
                return self._retain(key, shape, dtype)
            state = self._engine.state
            intact: bool | None = True
            if entry.state is state:  # the replay left this state unchanged: intact
                memo.last = entry.plan  # what the pictures draw
            else:
                intact = replay_and_swap(self._engine, memo, entry, state)
            if intact is not None:
                view = entry.view.view(dtype)
                if type(view) is not torch.Tensor:  # under a mode (a fake tensor): its
                    self._server.forget((ubatch, lane), key)  # writes may reach no byte
                return view, intact
        entry = None  # the slow path may grow the slot: pin nothing of its old buffer
        return self._retain(key, shape, dtype)

    def _retain(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        if self._records_here(self._retained_at):
            method = partial(WorkspaceManager._retain, self)
            return self._recorder.call(self, "get_retained", method, (key, shape, dtype), {})  # type: ignore[no-any-return]
        canon = canonical_shape(shape)
        if canon is not shape:  # spelled otherwise: served as its canonical spelling
            return self.get_retained(key, canon, dtype)
        return self._server.retain(key, shape, dtype, self._current_slot())

    def _route(self, recording: bool) -> None:
        """While a recording runs, the hot paths find no memo and no persistent table (their
        tables are swapped for an empty one), so that every ``get_simultaneous``,
        ``get_retained``, ``get_persistent`` and ``get_persistent_resource`` takes its slow
        path, which records it (:meth:`_acquire`, :meth:`_retain`,
        :meth:`_create_resource`, ``get_persistent``'s own); a manager not recording asks
        nothing there (``bench_hot_path``'s repeat rows). The recorder calls this for every
        handle on the manager (a ``copy.copy`` included), under its lock."""
        self._acquired_at = _NOT_SERVED if recording else self._memos.acquired_at
        self._retained_at = _NOT_SERVED if recording else self._memos.retained_at
        self._tables = _NOT_SERVED if recording else self._persistent.tables

    def _current_slot(self) -> tuple[int, int]:
        """:func:`interop.current_slot`, except in a ``torch_call`` function XLA runs on a
        thread of its own: there the only slot of a manager that has one, else
        ``SlotUnknownError`` (:func:`interop._context.known_slot`)."""
        ubatch, lane = SLOT.get()
        if ubatch is None:
            return provided_ubatch(), lane
        return known_slot((ubatch, lane), self._num_ubatches * self._num_lanes)

    def _records_here(self, table: object) -> bool:
        """Whether the slow path calling this records its call (a recording runs, and this
        is no call the manager makes inside another). ``table`` is the hot-path table the
        call looked in: one routed while no recording runs (a recording's end,
        interrupted, left it so) is routed back."""
        recorder = self._recorder
        if recorder.active:
            return recorder.outermost()
        if table is _NOT_SERVED:
            recorder.heal(self)
        return False

    def _slot_buffer(self, slot: tuple[int, int]) -> torch.Tensor | None:
        """The aligned ``uint8`` buffer of ``slot`` (for tests and debugging)."""
        return self._engine.buffers.buffer(self._engine.state.index(slot))

    # ----- reservations and plans -----

    @recorded
    def reserve(
        self,
        *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype],
        slots: Iterable[tuple[int, int]] | Literal["all"] | None = None,
    ) -> None:
        """Pre-allocate room for these views, taken together, in every ubatch slot
        (as vLLM's unmerged PR #42551 proposed).

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
        self._reserve([torch_specs(pairs, "shapes_and_dtypes")], slots)

    @recorded
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
        self._reserve(reserve_requests(requests), slots)

    @recorded
    def reserve_for(self, *traces: fws.Trace) -> None:
        """Grow every slot to the worst case of ``traces``, in one growth; nothing else
        changes.

        Each slot grows to what :func:`functional_ws.worst_case` of the traces gives it
        (the largest request any trace makes in it; with ``growth="ubatches"`` its lane's
        ubatch slots in step); a slot that holds that much already keeps its buffer. The
        lock, the retained spans and the persistent resources are left as they are: claim
        the keys by running the warm-up (a trace cannot make their resources). Then
        :func:`functional_ws.replay` of each trace on :attr:`state` reports no growth, and
        after :meth:`lock` no request of theirs is refused for want of room.

        Args:
            *traces: one or more :class:`functional_ws.Trace` (a recording's
                ``History.trace()``, ``Trace.from_json(...)``), made on a manager with as
                many ubatches and lanes.

        Raises:
            WorkspaceLockedError: (``AssertionError``) locked and a slot would have to grow.
            CapacityLimitError: (``RuntimeError``) a slot would need more than the device has.
            TraceTypeError: (``TypeError``) an argument is not a trace.
            TraceMismatchError: (``ValueError``) a trace names a slot this manager lacks.
            InvalidTraceError: (``ValueError``) no trace was given.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> warm = WorkspaceManager("cpu", num_ubatches=2)
            >>> with warm.recording() as history:
            ...     _ = warm.get_simultaneous(((1000,), torch.float32))
            >>> fresh = WorkspaceManager("cpu", num_ubatches=2)
            >>> fresh.reserve_for(history.trace())
            >>> [s.capacity for s in fresh.stats().slots]
            [4096, 0]
        """
        if not traces:
            raise fws.InvalidTraceError(
                "reserve_for needs at least one trace: ws.reserve_for(history.trace(), ...)."
            )
        self._server.reserve_for(traces)

    def _reserve(self, requests: list[list[ViewSpec]], slots: Any) -> None:
        lane = 0
        if slots is None:  # the current lane's ubatch slots: the lane must exist
            lane = self._current_slot()[1]
            self._engine.state.index((0, lane))
        self._server.reserve(requests, chosen_slots(slots, lane, self._num_ubatches))

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the current sizes to ``path`` as JSON (:func:`functional_ws.to_dict`).

        The file is replaced atomically: a write that fails leaves the previous plan intact.
        Only a regular file is replaced (or nothing at ``path``). Load it at the next start
        with :meth:`load_plan` to reserve those sizes at once.

        Raises:
            FileExistsError: (``OSError``) ``path`` is a FIFO, a device node, a socket or a
                folder (also at the end of a link): nothing is written.
            OSError: the plan could not be written (the previous one is unchanged).
        """
        _plans.save_plan(self._engine.state, path)

    @recorded
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
        self._server.apply_plan(_plans.load_plan(path), path)

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
            FactoryNotCallableError: (``TypeError``) the key is new and ``factory`` is not
                callable.

        Example:
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu")
            >>> table = ws.get_persistent_resource("table", lambda: {"made": True})
            >>> ws.get_persistent_resource("table", dict) is table
            True
        """
        index = _context.current_index(self._num_ubatches, self._num_lanes)
        if index >= 0:
            try:  # (while a recording runs, the tables are empty: _route)
                return self._tables[index][key]  # type: ignore[no-any-return]
            except (KeyError, TypeError, IndexError):
                pass
        return self._create_resource(key, factory)

    def _create_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        if self._records_here(self._tables):
            method = partial(WorkspaceManager._create_resource, self)
            args = (key, factory)
            return self._recorder.call(self, "get_persistent_resource", method, args, {})  # type: ignore[no-any-return]
        return self._server.create_resource(self._current_slot(), key, factory)

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
            UnhashableKeyError: (``TypeError`` and ``ValueError``) a key that cannot be
                hashed, naming it.

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
            try:  # (while a recording runs, the tables are empty: _route)
                tensor = self._tables[index].get((torch.Tensor, key))
            except (TypeError, IndexError):
                tensor = None
            if (
                type(tensor) is torch.Tensor
                and tensor.dtype is dtype
                and type(shape) is tuple
                and tensor.shape == shape
                and plain_shape(shape)
            ):
                return tensor
        if self._records_here(self._tables):
            method = partial(WorkspaceManager.get_persistent, self)
            kwargs = {"zero_init": zero_init} if zero_init is not False else {}  # as called
            args = (key, shape, dtype)
            return self._recorder.call(self, "get_persistent", method, args, kwargs)  # type: ignore[no-any-return]
        check_tensor_key(key)
        shape = canonical_shape(shape)
        check_torch_dtypes(((shape, dtype),), "dtype")
        spec = ViewSpec.of(shape, dtype, "")
        factory = tensor_factory(spec, self._device, zero_init)
        resource = self.get_persistent_resource((torch.Tensor, key), factory)
        return check_persistent_tensor(key, resource, spec.shape, dtype)

    # ----- what a manager shows -----

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
        return collect(self._engine.state, self._allocator.retired.pinned(), self._allocator.name)

    @property
    def last_layouts(self) -> dict[tuple[int, int], fws.Layout]:
        """Per slot, the layout of the last :meth:`get_simultaneous` (what pictures draw),
        as the slot holds it now: planned again on the current state, so a call that grew
        the slot shows no growth here (:meth:`recording`'s ``History`` keeps growths)."""
        return last_plans(self._engine.state, self._memos.acquired)

    @property
    def last_spans(self) -> dict[tuple[int, int], fws.Span]:
        """Per slot, the span of the last :meth:`get_retained` (drawn intact or clobbered),
        as the slot holds it now: a call that grew the slot shows no growth here
        (:meth:`recording`'s ``History`` keeps growths)."""
        return last_plans(self._engine.state, self._memos.retained)

    def recording(self) -> AbstractContextManager[History]:
        """Record every public call and the state after it, until the block ends.

        Calls from every thread are recorded, each once (a public method calling another
        is recorded as the outer call); recordings nest, each receiving every call made
        inside its block. ``Record.state`` is the manager's state right after the call.
        A call another thread began before the block is not recorded, even where it
        returns inside it (a growth it makes shows only in the next record's state, and
        a trace of the history lacks its request): start the recording before the calls
        it must see, a warm-up's threads included.

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
        state, device, allocator = self._engine.state, self._device, self._allocator.name
        return manager_plot(state, self.last_layouts, self.last_spans, device, allocator, ax)

    def _repr_html_(self) -> str:
        state, device, allocator = self._engine.state, self._device, self._allocator.name
        return manager_html(state, self.last_layouts, self.last_spans, device, allocator)

    def __repr__(self) -> str:
        return manager_repr(self._engine.state, self._device, self._allocator.name)

    # ----- copies -----

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickling: a manager of the same class and configuration holding this one's state,
        bytes and persistent resources, and a subclass's own attributes (the original's
        tensors, dicts and attributes pickle likewise). The bytes go as a copy taken with
        the state (so this manager's buffers are never handed to the pickler: torch's
        multiprocessing would move them into shared memory); the persistent resources as
        they are (torch's multiprocessing shares the tensors among them with the child, as
        any tensor it sends). The allocator and ``alloc_context`` go by reference (pickle
        needs them importable); the memo and a recording running are not kept."""
        state, buffers = self._engine.snapshot()
        tables = [dict(table) for table in self._persistent.tables]
        return (
            _rebuild,
            (type(self), self._device, self._config, state, buffers, tables, self._extras()),
        )

    def __deepcopy__(self, memo: dict[Any, Any]) -> WorkspaceManager:
        """``copy.deepcopy`` (of a model holding the manager, say): an independent manager
        as :meth:`__reduce__` describes, its persistent resources and a subclass's own
        attributes deep-copied with the rest, in the same memo (a resource that refers to
        the manager refers to the copy; handles on one manager copy to handles on one
        copy). Views handed out before are copied as tensors of their own.

        Raises:
            FakeCopyError: (``RuntimeError``) copied under a torch mode that makes tensors
                fake (``FakeTensorMode``, ``make_fx``) while persistent tensors are held:
                their copies would hold no bytes. Nothing is copied.
        """
        engine_key = (_COPY_OF, id(self._engine))  # one copy per manager, whatever the handle
        twin = memo.get(engine_key)
        if twin is not None:
            handle = twin.__copy__()
            memo[id(self)] = handle
            return handle  # type: ignore[no-any-return]
        if fake_mode_active():
            _refuse_fake_copy(type(self), self._persistent.tables)
        copied = _new_like(type(self), self._device, self._config)
        copied._engine.copy_of(self._engine)  # no copy of the bytes held in between
        memo[id(self)] = memo[engine_key] = copied  # before what may refer back to it
        for table, kept in zip(copied._persistent.tables, self._persistent.tables, strict=True):
            resources = dict(kept)  # (another thread may add to it meanwhile)
            table.update({key: copy.deepcopy(value, memo) for key, value in resources.items()})
        _restore_extras(copied, copy.deepcopy(self._extras(), memo))
        return copied

    def __copy__(self) -> WorkspaceManager:
        """``copy.copy``: another handle on this manager (its state, buffers and resources
        shared, as the original's shallow copy shares its lists and dicts)."""
        shallow = object.__new__(type(self))
        vars(shallow).update(vars(self))
        self._recorder.adopt(shallow)  # routed as this one is, whatever runs meanwhile
        return shallow

    def _extras(self) -> Any:
        """What a subclass keeps beside the manager's own attributes, as its
        ``__getstate__`` gives it (the default: its ``__dict__``, and its ``__slots__``
        values as a second dict), the manager's own attributes left out."""
        state = self.__getstate__()
        attributes, slots = state if isinstance(state, tuple) else (state, None)
        attributes = {k: v for k, v in (attributes or {}).items() if k not in _OWN}
        return attributes if slots is None else (attributes, slots)


#: A deep copy's memo key for the copy of a manager (by its engine: every handle's).
_COPY_OF = object()
#: The attributes ``WorkspaceManager.__init__`` sets (``tests/workspace/test_copies.py``
#: checks them against a new manager's).
_OWN = frozenset(
    {
        "_device", "_num_ubatches", "_num_lanes", "_allocator", "_memos", "_engine",
        "_acquired_at", "_retained_at", "_persistent", "_tables", "_server", "_recorder",
        "_config",
    }
)  # fmt: skip


def _new_like(
    cls: type[WorkspaceManager], device: torch.device, config: dict[str, Any]
) -> WorkspaceManager:
    """A new manager of class ``cls``, configured by ``config`` (a subclass's ``__init__``
    is not called, as unpickling calls none)."""
    manager: WorkspaceManager = object.__new__(cls)
    WorkspaceManager.__init__(manager, device, **config)
    return manager


def _rebuild(
    cls: type[WorkspaceManager],
    device: torch.device,
    config: dict[str, Any],
    state: WorkspaceState,
    buffers: list[torch.Tensor | None],
    tables: list[dict[Hashable, Any]],
    extras: Any,
) -> WorkspaceManager:
    """A manager of class ``cls`` and ``config`` on ``device`` that is a copy of one whose
    state, bytes, persistent tables and a subclass's state (:meth:`_extras`) were these
    (each slot's bytes copied into a buffer of its own)."""
    fake = [b for b in buffers if b is not None and type(b) is not torch.Tensor]
    fake += [v for table in tables for v in table.values() if is_fake_tensor(v)]
    if fake:
        raise FakeCopyError(
            f"a {cls.__name__} was unpickled under a torch mode that makes tensors fake "
            f"(its bytes or persistent tensors came back as {type(fake[0]).__name__}, which "
            "holds none): the copy would call its retained spans intact over bytes nobody "
            "wrote, or keep fake persistent tensors. Unpickle it outside the mode "
            "(FakeTensorMode, make_fx)."
        )
    manager = _new_like(cls, device, config)
    manager._engine.adopt(state, buffers)
    for table, kept in zip(manager._persistent.tables, tables, strict=True):
        table.update(kept)
    _restore_extras(manager, extras)
    return manager


def _refuse_fake_copy(cls: type[WorkspaceManager], tables: Sequence[dict[Hashable, Any]]) -> None:
    """Refuse a deep copy made under a fake-tensor mode where a persistent tensor is held
    (its copy would be fake, as an unpickled one is: :func:`_rebuild`); the bytes are
    copied outside the mode, and other resources as they deep-copy.

    Raises:
        FakeCopyError: a persistent tensor is held.
    """
    held = [v for table in tables for v in list(table.values()) if isinstance(v, torch.Tensor)]
    if held:
        raise FakeCopyError(
            f"a {cls.__name__} was deep-copied under a torch mode that makes tensors fake "
            f"(FakeTensorMode, make_fx): its {len(held)} persistent tensor(s) would be "
            "copied as fake tensors, which hold no bytes. Copy it outside the mode."
        )


def _restore_extras(manager: WorkspaceManager, extras: Any) -> None:
    """Give ``manager`` what :meth:`WorkspaceManager._extras` took: through the subclass's
    ``__setstate__`` where it has one, else as attributes (and ``__slots__`` values)."""
    setstate = getattr(manager, "__setstate__", None)
    if setstate is not None:
        setstate(extras)
        return
    attributes, slots = extras if isinstance(extras, tuple) else (extras, None)
    vars(manager).update(attributes)
    for name, value in (slots or {}).items():
        setattr(manager, name, value)
