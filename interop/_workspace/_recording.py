"""Recording a manager's calls: ``WorkspaceManager.recording()``.

No public method asks whether a recording is on. While one is, the manager's public methods
are shadowed by recording wrappers set on the instance (:meth:`Recorder.recording` sets
them when the first recording starts and removes them when the last one ends), so a
manager that is not recording runs exactly its class's methods, at no cost.

Each call is recorded once, as the outermost public call of its thread (``get_persistent``
calling ``get_persistent_resource`` records the outer call), and so is each call the
caller's code makes from inside one (a persistent factory's requests: they are requests of
the run, which sizing must see; see :func:`user_code`); every call from every thread goes
to every recording active when it returns; recordings nest.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from functional_ws import Slot

from .._compile import run_eagerly
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
    stack.append(None)
    try:
        yield
    finally:
        stack.pop()


class Recorder:
    """The recordings running on one manager (which holds it; the recorder holds no
    reference to the manager, so dropping a manager frees it at once).

    Args:
        current_slot: says which slot the calling context works in.

    Attributes:
        active: the histories recording now, in the order their blocks began.
    """

    def __init__(self, current_slot: Callable[[], Slot]) -> None:
        self.active: list[History] = []
        self._current_slot = current_slot
        self._lock = threading.Lock()
        renew_after_fork(self, "_lock")  # a fork while another thread holds it

    @contextmanager
    def recording(self, manager: Any) -> Iterator[History]:
        """Record ``manager``'s public calls until the block ends.

        Yields:
            The :class:`History`, filled as calls are made; it starts with the current state.
        """
        history = History([Record("start", self._current_slot(), manager.state)])
        with self._lock:
            if not self.active:
                _shadow(self, manager)
            self.active.append(history)
        try:
            yield history
        finally:
            with self._lock:
                self.active[:] = [h for h in self.active if h is not history]
                if not self.active:
                    _unshadow(manager)

    def call(
        self, manager: Any, name: str, method: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        """Run ``method(*args, **kwargs)`` and record it, unless it is one the manager makes
        inside another call of its own."""
        stack = _stack()
        inner = bool(stack) and stack[-1] is self
        stack.append(self)
        error = None
        try:
            return method(*args, **kwargs)
        except BaseException as err:  # an interrupt too: the call did not succeed
            error = err
            raise
        finally:
            stack.pop()
            if not inner:
                self._record(manager, name, args, kwargs, error)

    def _record(
        self, manager: Any, name: str, args: Any, kwargs: Any, error: BaseException | None
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
            slot: Slot | None = self._current_slot()
        except Exception:
            slot = None
        try:
            event = trace_event(name, args, kwargs, slot, error)
        except Exception:  # a malformed request, refused by the call itself
            event = None
        outcome = None if error is None else _outcome(error)
        record = Record(call, slot, manager.state, outcome, event)
        with self._lock:
            for history in self.active:
                history.append(record)


def _outcome(err: BaseException) -> str:
    """How a record names an error (its type, and its message where it has one)."""
    try:
        text = str(err)
    except Exception:
        text = ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _shadow(recorder: Recorder, manager: Any) -> None:
    """Set a recording wrapper over each recorded method, on the instance (they reference
    the manager: a cycle that :func:`_unshadow` breaks when the last recording ends)."""
    for name in RECORDED:
        method = getattr(type(manager), name).__get__(manager)
        vars(manager)[name] = _wrapper(recorder, manager, name, method)


def _unshadow(manager: Any) -> None:
    for name in RECORDED:
        vars(manager).pop(name, None)


def _wrapper(
    recorder: Recorder, manager: Any, name: str, method: Callable[..., Any]
) -> Callable[..., Any]:
    @functools.wraps(method)
    def record(*args: Any, **kwargs: Any) -> Any:
        return recorder.call(manager, name, method, args, kwargs)

    run_eagerly(record)  # type: ignore[arg-type]  # a plain function, as the method itself
    return record


def _describe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value: Any) -> str:
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", "<callable>")
    text = repr(value).replace("torch.", "")
    return text if len(text) <= 60 else text[:57] + "..."
