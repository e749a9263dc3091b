"""Recording a manager's calls: ``WorkspaceManager.recording()``.

Each recorded public method asks whether a recording is on: whether its :class:`Recorder`
(which every handle on the manager shares, a ``copy.copy`` included) has an active
history. ``get_simultaneous`` and ``get_retained`` ask in their slow paths, which every
call takes while a recording runs (the recorder swaps their memo tables for an empty one:
``WorkspaceManager._route``), so a manager not recording asks nothing on their hot paths;
``get_persistent`` and ``get_persistent_resource`` likewise (their tables are swapped
too); the others are wrapped by :func:`recorded`. The question is asked by the class's own
methods, so every way of calling one is recorded: through the instance, through a method
bound before the recording began (a layer that keeps ``ws.get_simultaneous``), or through
the class (``WorkspaceManager.get_simultaneous(ws, ...)``).

Each call is recorded once, as the outermost public call of its thread (``get_persistent``
calling ``get_persistent_resource`` records the outer call), and so is each call the
caller's code makes from inside one (a persistent factory's requests: they are requests of
the run, which sizing must see; see :func:`user_code`); every call from every thread that
begins while a recording is active goes to every recording active when it returns;
recordings nest. Whether a call records is decided as it begins (a hot path asks nothing):
a call another thread began before the recording is not recorded, even where it returns
inside it.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from functional_ws import Slot

from .._locks import renew_after_fork
from ._history import History, Record
from ._tracing import trace_event

#: The public methods a recording sees.
RECORDED = (
    "get_simultaneous",
    "try_get_simultaneous",
    "get_retained",
    "reserve",
    "reserve_many",
    "reserve_for",
    "load_plan",
    "get_persistent_resource",
    "get_persistent",
    "lock",
    "unlock",
)


_F = TypeVar("_F", bound=Callable[..., Any])

#: Per thread, the recorders whose calls are running, innermost last; ``None`` marks the
#: caller's code running inside one (:func:`user_code`).
_running = threading.local()


def _stack() -> list[Any]:
    stack: list[Any] | None = getattr(_running, "stack", None)
    if stack is None:
        stack = _running.stack = []
    return stack


@contextmanager
def user_code() -> Iterator[None]:
    """Run the caller's code (a persistent factory): the manager's calls it makes are
    recorded as calls of their own, not taken for the manager's internal ones."""
    stack = _stack()
    depth = len(stack)
    try:  # (appended inside: a Ctrl-C right after the append still takes it off)
        stack.append(None)
        yield
    finally:
        del stack[depth:]


class Recorder:
    """The recordings running on one manager (which holds it; the recorder holds no
    reference to the manager, so dropping a manager frees it at once).

    Args:
        current_slot: says which slot the calling context works in, given the manager
            (the slot its requests are served in: on a thread XLA runs a ``torch_call``
            function on, a one-slot manager's only slot).

    Attributes:
        active: the histories recording now (by identity), in the order their blocks began.
    """

    def __init__(self, current_slot: Callable[[Any], Slot]) -> None:
        self.active: dict[int, History] = {}
        #: The handles on the manager (it and its shallow copies) by identity (a subclass may
        #: define ``__eq__``), whose hot paths a recording routes to the slow paths that
        #: record (``WorkspaceManager._route``); held weakly.
        self._handles: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._current_slot = current_slot
        self._lock = threading.Lock()
        renew_after_fork(self, "_lock")  # a fork while another thread holds it

    @contextmanager
    def recording(self, manager: Any) -> Iterator[History]:
        """Record ``manager``'s public calls until the block ends.

        Yields:
            The :class:`History`, filled as calls are made; it starts with the current state.
        """
        history = History([Record("start", self._current_slot(manager), manager.state)])
        # A Ctrl-C anywhere leaves nothing behind: the history goes in the finally, and a
        # handle left routed (the loop interrupted) is routed back by its slow path (heal).
        try:
            with self._lock:  # (the handles are routed under it: see adopt, heal)
                self.active[id(history)] = history
                self._route(True)
            yield history
        finally:
            with self._lock:
                self.active.pop(id(history), None)
                if not self.active:  # (interrupted in the loop: the slow path heals it)
                    self._route(False)

    def _route(self, recording: bool) -> None:
        for handle in list(self._handles.values()):
            handle._route(recording)

    def adopt(self, handle: Any) -> None:
        """Count ``handle`` (the manager, or a shallow copy of it) among those a recording
        routes, routed as the others are now."""
        with self._lock:
            self._handles[id(handle)] = handle
            handle._route(bool(self.active))

    def heal(self, handle: Any) -> None:
        """Route ``handle`` back to its hot paths if no recording runs (a recording's end,
        interrupted, left it routed); under the lock, so a recording starting meanwhile
        keeps it routed."""
        with self._lock:
            if not self.active:
                handle._route(False)

    def outermost(self) -> bool:
        """Whether a public call starting now is one to record: not one the manager makes
        inside another call of its own (the caller's code run inside one is recorded)."""
        stack = _stack()
        return not stack or stack[-1] is not self

    def call(
        self, manager: Any, name: str, method: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        """Run ``method(*args, **kwargs)`` and record it, unless it is one the manager makes
        inside another call of its own."""
        stack = _stack()
        inner = bool(stack) and stack[-1] is self
        depth = len(stack)
        error = None
        result: Any = _NOTHING
        try:  # (appended inside: a Ctrl-C right after the append still takes it off)
            stack.append(self)
            result = method(*args, **kwargs)
            return result
        except BaseException as err:  # an interrupt too: the call did not succeed
            error = err
            raise
        finally:
            del stack[depth:]
            if not inner:
                declined = DECLINED if name == "try_get_simultaneous" and result is None else None
                self._record(manager, name, args, kwargs, error, declined)

    def _record(
        self,
        manager: Any,
        name: str,
        args: Any,
        kwargs: Any,
        error: BaseException | None,
        declined: str | None = None,
    ) -> None:
        """Append the call to every active history. The bookkeeping runs the caller's code
        (an argument's ``repr``, the ubatch provider, a key's ``__hash__``): whatever it
        raises is written in the record (or leaves the call out of the trace), never raised,
        so recording never changes a call's result or error."""
        try:
            call = _describe(name, args, kwargs)
        except Exception as err:
            call = f"{name}(<arguments whose repr raised {_outcome(err)}>)"
        try:
            slot: Slot | None = self._current_slot(manager)
        except Exception:
            slot = None
        try:
            event = trace_event(name, args, kwargs, slot, error)
        except Exception:  # a malformed request, refused by the call itself
            event = None
        outcome = None if error is None else _outcome(error)
        record = Record(call, slot, manager.state, outcome, event, declined)
        with self._lock:
            for history in self.active.values():
                history.append(record)


def _outcome(err: BaseException) -> str:
    """How a record names an error: its type, its message where it has one, and its notes
    (a failed growth's says what became of the slot), one per line."""
    try:
        text = str(err)
    except Exception:
        text = ""
    outcome = f"{type(err).__name__}: {text}" if text else type(err).__name__
    notes = getattr(err, "__notes__", None)
    if isinstance(notes, list):
        outcome += "".join(f"\n{note}" for note in notes if isinstance(note, str))
    return outcome


#: A call's result before it returns (no result: it raised).
_NOTHING = object()
#: What a ``try_get_simultaneous`` that returned ``None`` records.
DECLINED = "returned None: locked, and the slot is too small"


def recorded(method: _F) -> _F:
    """``method`` (a manager's public method), recorded while a recording runs."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = self._recorder
        if not recorder.active or not recorder.outermost():
            return method(self, *args, **kwargs)
        return recorder.call(self, name, method.__get__(self), args, kwargs)

    return call  # type: ignore[return-value]


def _describe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value: Any) -> str:
    """``value`` as a call's text shows it, at most 60 characters: a function by its name,
    a dtype without its ``torch.`` (in requests too), anything else (a key) by its repr."""
    if inspect.isroutine(value) or isinstance(value, functools.partial):
        return getattr(value, "__name__", None) or f"<{type(value).__name__}>"
    text = _text(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(value: Any) -> str:
    """``repr(value)``, with each torch dtype and ``torch.Size`` in it (a request's
    ``((8,), torch.float32)`` pairs) written without ``torch.``; a key's own text kept."""
    kind = type(value)
    if kind is torch.dtype or kind is torch.Size:
        return repr(value).removeprefix("torch.")
    if kind is tuple:
        inner = ", ".join(map(_text, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if kind is list:
        return f"[{', '.join(map(_text, value))}]"
    return repr(value)
