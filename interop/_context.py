"""Which slot the calling code works in: its lane and its ubatch, per execution context.

Both live in one context variable, so every thread and every asyncio task sees its own, and
a ``with`` block restores the previous values on exit (exceptions included).

The ubatch, in this order: the innermost :func:`use_workspace_ubatch` (or
:func:`use_workspace_ubatch_id`, upstream PR #58161's name) block; else
``interop.dbo_current_ubatch_id()``, read at each request, as vLLM's workspace module reads
its import of that function (so ``monkeypatch.setattr(interop, "dbo_current_ubatch_id", f)``
works as in vLLM's tests); its default answers what the provider installed with
:func:`set_ubatch_provider` says, else 0.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import operator
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from types import TracebackType
from typing import Any, TypeVar

from functional_ws import InvalidSlotError, InvalidSlotTypeError
from functional_ws._checks import check_int

from ._compile import run_eagerly_under_compile
from ._errors import SlotUnknownError
from ._locks import renew_after_fork

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``(ubatch, lane)`` of the current execution context; ubatch ``None`` outside any
#: :func:`use_workspace_ubatch` block (then the provider, or 0, says). One variable, not two:
#: the hot paths read it on every request, and one read is measurably cheaper than two.
SLOT: ContextVar[tuple[int | None, int]] = ContextVar("functional_ws_slot", default=(None, 0))

#: Who says the ubatch outside any block, as the hot paths read it: ``None`` for 0, else the
#: function to call (``interop.dbo_current_ubatch_id`` where it was replaced, else the
#: function installed with :func:`set_ubatch_provider`). Kept by :func:`_refresh`.
provider: Callable[[], int] | None = None
_installed: Callable[[], int] | None = None  # set_ubatch_provider's
_replaced: Callable[[], int] | None = None  # interop.dbo_current_ubatch_id, where replaced


def dbo_current_ubatch_id() -> int:
    """The ubatch outside any :func:`use_workspace_ubatch` block: what the provider
    installed with :func:`set_ubatch_provider` says, else 0 (vLLM's function of that name,
    which its tests replace: ``interop.dbo_current_ubatch_id`` is read at each request).

    Example:
        >>> from interop import dbo_current_ubatch_id
        >>> dbo_current_ubatch_id()
        0
    """
    return 0 if _installed is None else _installed()


def ubatch_function_replaced(function: Callable[[], int] | None) -> None:
    """``interop.dbo_current_ubatch_id`` was set to ``function`` (``None``: back to its
    default), by the package's attribute hook."""
    global _replaced
    _replaced = None if function is dbo_current_ubatch_id else function
    _refresh()


def _refresh() -> None:
    global provider
    provider = _replaced if _replaced is not None else _installed


def plain_int(value: Any) -> Any:
    """``value`` as an ``int`` where it is an integer of another type (a NumPy integer, as
    the original accepts one), else unchanged (a ``bool`` too: the checks refuse it)."""
    if type(value) is not int and isinstance(value, numbers.Integral):
        return value if isinstance(value, bool) else operator.index(value)
    return value


def _check_index(name: str, value: object) -> int:
    return check_int(
        plain_int(value),
        f"Workspace {name}",
        error=InvalidSlotError,
        type_error=InvalidSlotTypeError,
    )


@run_eagerly_under_compile
class _Selection:
    """A ``with`` block that sets the ubatch (``part`` 0) or the lane (1), then restores
    that part alone (the other is as the block leaves it: vLLM keeps the two in separate
    context variables, and a lane reset inside an ubatch block outlives the block there).

    A Ctrl-C can land as ``__exit__`` is called, before its first line runs (CPython
    delivers a pending signal as a function starts): no Python ``__exit__`` can then put
    the slot back, and the selection would outlive its block for good (a request outside
    any block served from the block's slot: 219 of 9,654 real interrupts in a tight loop).
    The block's ``with`` statement holds this object until ``__exit__`` returns, so when
    it dies still active, its block is over: a weak reference to it, made on entry and
    dropped by ``__exit__``, puts its part back then (:func:`_ended_without_exit`), where
    the block still owns that part: :data:`_OWNERS` names, per part, the guard of the block
    that set it last in this context (a later block, or another context, owns its own;
    an outer block of the other part leaves it alone). A weak reference's callback runs
    only then; a ``__del__`` would run Python at every block's end, where a Ctrl-C is
    swallowed ("Exception ignored": 479 of 9,262).
    """

    __slots__ = ("__weakref__", "_active", "_guard", "_part", "_previous", "_value")

    def __init__(self, part: int, value: int) -> None:
        self._part = part
        self._value = value
        self._previous: int | None = None
        self._active = False
        self._guard: _Guard | None = None

    def __enter__(self) -> None:
        if self._active:
            raise RuntimeError("this workspace slot selection is already active")
        ubatch, lane = SLOT.get()
        owners = _OWNERS.get()
        part = self._part
        self._previous = lane if part else ubatch
        guard = self._guard = _Guard(self, part, self._previous, owners[part])
        self._active = True
        try:
            _OWNERS.set((owners[0], guard) if part else (guard, owners[1]))
            SLOT.set((ubatch, self._value) if part else (self._value, lane))
        except BaseException:  # a Ctrl-C as a set returns: the block is never entered,
            self._restore()  # so no __exit__ would put the slot back
            self._active = False
            self._guard = None
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._restore()
        except BaseException:  # a Ctrl-C before (or as) it restored: restore again
            self._restore()
            raise
        finally:
            self._active = False
            self._guard = None  # (its callback never runs)

    def _restore(self) -> None:
        """Put this selection's part back as the block found it (the other as it is)."""
        ubatch, lane = SLOT.get()
        if self._part == 0:
            SLOT.set((self._previous, lane))
        else:
            SLOT.set((ubatch, self._previous))  # type: ignore[arg-type]
        if self._guard is not None:
            _disown(self._guard)

    def __call__(self, function: _F) -> _F:
        """As a decorator (the original's ``@contextmanager`` is one): ``function`` runs
        in this selection, a fresh one per call (so calls may nest and overlap)."""

        @functools.wraps(function)
        def selected(*args: Any, **kwargs: Any) -> Any:
            with _Selection(self._part, self._value):
                return function(*args, **kwargs)

        return selected  # type: ignore[return-value]


class _Guard(weakref.ref):  # type: ignore[type-arg]
    """What a :class:`_Selection` whose block ended without ``__exit__`` puts back: its
    part as the block found it, and the owner of that part before it."""

    __slots__ = ("owner_before", "part", "previous", "thread")

    def __new__(
        cls, selection: _Selection, part: int, previous: int | None, owner_before: Any
    ) -> Any:
        return super().__new__(cls, selection, _ended_without_exit)

    def __init__(
        self, selection: _Selection, part: int, previous: int | None, owner_before: Any
    ) -> None:
        self.part, self.previous, self.owner_before = part, previous, owner_before
        self.thread = threading.get_ident()


#: Per part (ubatch, lane), the :class:`_Guard` of the selection block that set it last
#: in this context, or ``None`` (see :class:`_Selection`).
_OWNERS: ContextVar[tuple[_Guard | None, _Guard | None]] = ContextVar(
    "functional_ws_slot_owners", default=(None, None)
)


def _disown(guard: _Guard) -> None:
    """Give ``guard``'s part back to the owner before it (where it still owns it)."""
    owners = _OWNERS.get()
    if owners[guard.part] is guard:
        before = guard.owner_before
        _OWNERS.set((before, owners[1]) if guard.part == 0 else (owners[0], before))


def _ended_without_exit(guard: _Guard) -> None:
    """``guard``'s selection died still active: its block is over. Put its part back where
    the block still owns it (in the thread that entered it)."""
    if _OWNERS.get()[guard.part] is guard and guard.thread == threading.get_ident():
        ubatch, lane = SLOT.get()
        SLOT.set((guard.previous, lane) if guard.part == 0 else (ubatch, guard.previous))  # type: ignore[arg-type]
        _disown(guard)


class _LaneVariable:
    """vLLM's module attribute ``_workspace_lane`` (a ``ContextVar`` of the lane, which its
    tests read and set): the lane half of :data:`SLOT`, with a ``ContextVar``'s three
    methods. A lane set here is checked at the next request, as there."""

    def get(self) -> int:
        return SLOT.get()[1]

    def set(self, lane: int) -> _LaneToken:
        """Make ``lane`` (a non-negative int, checked as :func:`use_workspace_lane` checks
        it: a negative one would index another lane) this context's lane."""
        checked = _check_index("lane", lane)
        ubatch, previous = SLOT.get()
        SLOT.set((ubatch, checked))
        _OWNERS.set((_OWNERS.get()[0], None))  # the lane is this call's now, no block's
        return _LaneToken(previous)

    def reset(self, token: _LaneToken) -> None:
        """The lane before :meth:`set` again (the ubatch as it is now: the two are one
        variable here, two in vLLM)."""
        SLOT.set((SLOT.get()[0], token.previous))
        _OWNERS.set((_OWNERS.get()[0], None))

    def __repr__(self) -> str:
        return f"<the workspace lane of this context: {self.get()!r}>"


class _LaneToken:
    """What :meth:`_LaneVariable.set` returns: the lane to go back to."""

    __slots__ = ("previous",)

    def __init__(self, previous: int) -> None:
        self.previous = previous


#: ``interop._workspace_lane`` (see :class:`_LaneVariable`).
workspace_lane = _LaneVariable()


def use_workspace_lane(lane: int) -> _Selection:
    """Select an independent workspace lane for this execution context.

    Lanes never share memory: each ``(ubatch, lane)`` slot has its own buffer, retained span
    and persistent resources. The lane must exist in the manager that serves the request
    (``num_lanes``); that is checked at the request, as in the original.

    Args:
        lane: a non-negative int.

    Returns:
        A context manager; the previous lane is restored on exit.

    Raises:
        InvalidSlotError: (``ValueError``, "non-negative") ``lane`` is negative or not an
            int. Raised by the call itself, before the ``with`` block is entered.

    Example:
        >>> from interop import current_slot, use_workspace_lane
        >>> with use_workspace_lane(1):
        ...     current_slot()
        (0, 1)
        >>> current_slot()
        (0, 0)
    """
    return _Selection(1, _check_index("lane", lane))


def use_workspace_ubatch_id(ubatch: int) -> _Selection:
    """Select the ubatch slot for this execution context: :func:`use_workspace_ubatch`
    under upstream's name (vllm-project/vllm PR #58161).

    Example:
        >>> from interop import current_slot, use_workspace_ubatch_id
        >>> with use_workspace_ubatch_id(1):
        ...     current_slot()
        (1, 0)
    """
    return use_workspace_ubatch(ubatch)


def use_workspace_ubatch(ubatch: int) -> _Selection:
    """Select the ubatch slot for this execution context (vLLM's dual-batch overlap).

    Inside the block the ubatch is ``ubatch`` whatever provider is installed.

    Args:
        ubatch: a non-negative int, below the manager's ``num_ubatches`` at the request.

    Returns:
        A context manager; the previous selection is restored on exit.

    Raises:
        InvalidSlotError: (``ValueError``, "non-negative") ``ubatch`` is negative or not an
            int.

    Example:
        >>> from interop import current_slot, use_workspace_ubatch
        >>> with use_workspace_ubatch(1):
        ...     current_slot()
        (1, 0)
    """
    return _Selection(0, _check_index("ubatch", ubatch))


def set_ubatch_provider(function: Callable[[], int] | None) -> Callable[[], int] | None:
    """Install a function that says the current ubatch (for code that tracks ubatches itself).

    It is called on each request made outside any :func:`use_workspace_ubatch` block (by
    ``interop.dbo_current_ubatch_id``'s default; a replaced ``dbo_current_ubatch_id`` wins);
    the setting is process-wide, like vLLM's ``dbo_current_ubatch_id``.

    Args:
        function: of no arguments, returning a non-negative int; or ``None`` to go back to
            the default (ubatch 0).

    Returns:
        The provider that was installed before.

    Raises:
        TypeError: ``function`` is neither callable nor ``None``.

    Example:
        >>> from interop import current_slot, set_ubatch_provider
        >>> previous = set_ubatch_provider(lambda: 1)
        >>> current_slot()
        (1, 0)
        >>> set_ubatch_provider(previous) is not None
        True
        >>> current_slot()
        (0, 0)
    """
    global _installed
    if function is not None and not callable(function):
        raise TypeError(f"provider must be a callable returning an int or None, got {function!r}.")
    previous, _installed = _installed, function
    _refresh()
    return previous


def provided_ubatch() -> int:
    """The ubatch outside any :func:`use_workspace_ubatch` block: the provider's, else 0."""
    if provider is None:
        return 0
    return check_int(
        plain_int(provider()),
        f"the ubatch provider {provider!r}'s result",
        error=InvalidSlotError,
        type_error=InvalidSlotTypeError,
    )


def current_index(num_ubatches: int, num_lanes: int) -> int:
    """Index of the current slot among ``num_ubatches * num_lanes``, or -1 if it is not one.

    The hot paths' slot lookup (``get_simultaneous`` and ``get_retained`` inline it); on -1
    they take the slow path, where the core's checks say what is wrong.
    """
    ubatch, lane = SLOT.get()
    if ubatch is None:
        ubatch = 0 if provider is None else provided_ubatch()
    if lane < num_lanes and ubatch < num_ubatches:
        return ubatch * num_lanes + lane
    return -1


def current_slot() -> tuple[int, int]:
    """The ``(ubatch, lane)`` the calling execution context works in.

    Raises:
        SlotUnknownError: (``RuntimeError``) inside :func:`slot_unknown` (a ``torch_call``
            function XLA runs on a thread of its own).

    Example:
        >>> from interop import current_slot
        >>> current_slot()
        (0, 0)
    """
    ubatch, lane = SLOT.get()
    if type(ubatch) is _Unknown:
        raise SlotUnknownError(ubatch.why)
    return (provided_ubatch() if ubatch is None else ubatch), lane


#: Held by a block of :func:`slot_unknown` from its first request of a one-slot workspace
#: to its end. XLA runs such blocks (``torch_call`` functions) on threads of its own, and
#: several at once where a computation is sharded over devices (``shard_map``, ``pmap``, a
#: sharded input: one call per device): each would be served the only slot's bytes, and
#: they overwrote each other's scratch (4 host devices: wrong results in 10 runs of 10).
#: The second block to ask waits until the first ends. One lock for every manager: such a
#: block may use several.
_ONLY_SLOT = threading.Lock()
renew_after_fork(sys.modules[__name__], "_ONLY_SLOT")  # a fork while a thread holds it


class _Unknown(int):
    """The ubatch of code whose caller's slot cannot be known (:func:`slot_unknown`): an
    int past every configured ubatch, so that the hot paths, which index by it, miss and
    take their slow paths, which raise :class:`SlotUnknownError` (:func:`refuse_unknown`)
    or serve a one-slot manager's only slot (:func:`known_slot`)."""

    why: str
    #: The block's exit stack: it holds :data:`_ONLY_SLOT` once the block asks for it.
    stack: contextlib.ExitStack
    #: Guards :attr:`holding` and :attr:`ended`: threads the block started with a copy of
    #: its context ask through the same object.
    guard: threading.Lock
    holding: bool = False
    #: The block is over (a copy of its context may outlive it): nothing is held for it.
    ended: bool = False

    def __repr__(self) -> str:
        return "<ubatch unknown>"

    def hold_only_slot(self) -> None:
        """Take :data:`_ONLY_SLOT` until the block ends (once; waits while another holds
        it). Through the block's exit stack, a ``with`` in effect: the threads that run
        such blocks are not Python's, so no signal handler (Ctrl-C) runs between.

        Raises:
            SlotUnknownError: the block has ended (asked from a copy of its context, which
                would have taken the lock for good).
        """
        with self.guard:
            if self.ended:
                raise SlotUnknownError(
                    f"{self.why} (Asked from a copy of the function's context after the "
                    "function returned: its only slot is no longer held for it.)"
                )
            if not self.holding:
                self.stack.enter_context(_ONLY_SLOT)
                self.holding = True

    def end(self) -> None:
        """The block is over: later requests through this object are refused."""
        with self.guard:
            self.ended = True


def known_slot(slot: tuple[Any, int], num_slots: int) -> tuple[Any, int]:
    """``slot``, or where its ubatch is :func:`slot_unknown`'s, the only slot of a manager
    that has one (``(0, 0)``: no other slot could be meant), held for the block until it
    ends (:data:`_ONLY_SLOT`: two such blocks running at once do not share it).

    Raises:
        SlotUnknownError: the ubatch is unknown and the manager has ``num_slots`` > 1.
    """
    ubatch = slot[0]
    if type(ubatch) is not _Unknown:
        return slot
    if num_slots == 1:
        ubatch.hold_only_slot()
        return (0, 0)
    raise SlotUnknownError(ubatch.why)


def holds_only_slot() -> bool:
    """Whether the current :func:`slot_unknown` block holds a one-slot workspace's only
    slot (it asked it for scratch): what it carved stays its own until the block ends."""
    ubatch = SLOT.get()[0]
    return type(ubatch) is _Unknown and ubatch.holding


@contextlib.contextmanager
def slot_unknown(why: str) -> Iterator[None]:
    """While the block runs, the current context's slot is unknown: every workspace
    request in it raises :class:`SlotUnknownError` with ``why`` (what runs, and what to do
    instead), rather than serve a slot another caller may be using; a workspace of one
    slot serves it, one such block at a time (:func:`known_slot`)."""
    with contextlib.ExitStack() as stack:  # releases what the block held, after the reset
        unknown = _Unknown(1 << 62)
        unknown.why = why
        unknown.stack = stack
        unknown.guard = threading.Lock()
        token = SLOT.set((unknown, 0))
        try:
            yield
        finally:
            unknown.end()
            SLOT.reset(token)
