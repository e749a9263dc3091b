"""Locks a fork does not leave held.

``os.fork`` copies a lock as it is: one that another thread of the parent held is held in
the child for good, with no thread left to release it, and the child's first call that
needs it hangs. Every lock of the shell is registered here with the object (or module)
that owns it; in the child, each is replaced by a new, free lock (``os.register_at_fork``).
What the locks guard stays consistent at every point (the engine's state and buffers, the
retired-buffer records, the recordings), so the child may go on with it.

Example:
    >>> import threading
    >>> class Owner:
    ...     def __init__(self):
    ...         self.lock = threading.Lock()
    ...         renew_after_fork(self, "lock")
    >>> owner = Owner()
    >>> owner.lock.acquire()
    True
    >>> _renew_all()  # what a forked child runs
    >>> owner.lock.locked()
    False
"""

from __future__ import annotations

import gc
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

#: The threads pausing the collector now (:func:`collection_paused`), once per pause (a
#: thread may pause inside its own pause), and whether the collector ran when it was paused:
#: the last to finish resumes it, and a fork meanwhile resumes it in the child, where those
#: threads do not exist.
pausing: list[int] = []
resuming = False

#: Per owner, the names of its lock attributes (weakly: an owner that is gone needs none).
_OWNERS: weakref.WeakKeyDictionary[object, tuple[str, ...]] = weakref.WeakKeyDictionary()


def renew_after_fork(owner: object, *names: str) -> None:
    """Give ``owner``'s lock attributes ``names`` new, free locks in a forked child."""
    _OWNERS[owner] = _OWNERS.get(owner, ()) + names


def _renew_all() -> None:
    for owner, names in list(_OWNERS.items()):
        for name in names:
            setattr(owner, name, threading.Lock())
    global resuming
    pausing.clear()  # a thread of the parent paused the collector: none is left to resume it
    if resuming:
        resuming = False
        gc.enable()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_renew_all)


def collection_paused(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` with Python's garbage collector paused (resumed after, where it ran
    before): what a section under a lock that allocates runs in. A collection runs the
    ``__del__`` (and ``weakref.finalize`` callbacks) of whatever garbage it finds, wherever
    Python allocates: the caller's code, which may call back into what holds the lock, and
    the same thread cannot take it again (it hung for good).

    Process-wide, as the collector is: threads pausing at once (two managers growing) each
    note themselves in :data:`pausing`, and the last to finish resumes it. A function, not
    a context manager: the pause starts inside the ``try`` that ends it. A Ctrl-C landing
    between the steps of the ``finally`` may leave the collector off until the next pause
    ends (which resumes it); a ``gc.disable()`` another thread makes during a pause is
    undone when the pause ends.

    Example:
        >>> import gc
        >>> collection_paused(gc.isenabled), gc.isenabled()
        (False, True)
    """
    global resuming
    me = threading.get_ident()
    try:
        if gc.isenabled():
            resuming = True  # before the pause: a Ctrl-C after it resumes it
            gc.disable()
        pausing.append(me)
        return fn(*args)
    finally:
        if me in pausing:  # (absent: a Ctrl-C came before it was noted)
            pausing.remove(me)
        if resuming and not pausing:
            resuming = False
            gc.enable()
