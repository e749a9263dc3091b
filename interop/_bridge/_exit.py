"""At interpreter exit: let XLA's threads finish letting go of the torch tensors JAX imported.

A torch tensor handed to JAX (``to_jax``, ``jax_call``) is owned by the ``jax.Array`` made
over it and by every XLA execution that reads it. When an execution is the last owner, one
of XLA's worker threads releases the tensor after the computation, and that release runs
Python: torch's ``decref`` of the tensor takes the GIL, and a storage that is itself JAX's
memory (``to_torch`` results, ``allocator="jax"`` workspaces) frees a ``jax.Array``, which
lets go of the GIL and takes it again. If the interpreter has begun to finalize meanwhile,
CPython ends the worker thread where it asks for the GIL (``pthread_exit``), the unwinding
meets a ``noexcept`` C++ destructor, and the process aborts with "terminate called without
an active exception" after the script's last line ran (seen here about once in 20 exits of
a script whose last call was ``jax_call``; every time when the release is slow).

So the first handoff to a device registers :func:`wait_for_foreign_releases` with
``atexit`` (atexit runs it before JAX's own clean-up, which was registered earlier). It
lets go of the GIL until no thread that Python did not start holds a Python thread state:
those are exactly the threads inside such a release (CPython makes a thread state for them
when they ask for the GIL and drops it when they are done), or until ``DEADLINE_S``.

What it does not cover: an execution still *running* at exit (its release comes later
than any wait can know of). ``jax.block_until_ready`` the results of the last step before
the script ends (``jax_call`` returns only finished results).
"""

from __future__ import annotations

import atexit
import ctypes
import sys
import threading
import time
from collections.abc import Callable

from .._locks import renew_after_fork

#: The longest the exit waits, in seconds. Reached only where a thread that Python did not
#: start keeps a thread state for good (none does on CPU; the wait then ends there).
DEADLINE_S = 1.0
#: How long the exit waits even when no release is under way: an execution that has just
#: finished asks for the GIL a few microseconds after its results are ready.
GRACE_S = 0.002
_POLL_S = 0.001


def _thread_state_counter() -> Callable[[], int] | None:
    """A function counting the interpreter's thread states, or ``None`` where the C API
    is not reachable (an interpreter other than CPython)."""
    try:
        api = ctypes.pythonapi
        current = api.PyInterpreterState_Get
        head = api.PyInterpreterState_ThreadHead
        following = api.PyThreadState_Next
    except AttributeError:  # pragma: no cover - not CPython
        return None
    current.restype = ctypes.c_void_p
    head.restype = ctypes.c_void_p
    head.argtypes = [ctypes.c_void_p]
    following.restype = ctypes.c_void_p
    following.argtypes = [ctypes.c_void_p]

    def count() -> int:
        state, total = head(current()), 0
        while state:
            total += 1
            state = following(state)
        return total

    return count


_count_thread_states = _thread_state_counter()


def foreign_thread_states() -> int:
    """How many thread states belong to threads Python did not start (0 where unknown).

    Python's own threads are those :func:`threading.enumerate` lists, less the placeholders
    it keeps for foreign threads that once called into Python.
    """
    if _count_thread_states is None:  # pragma: no cover - not CPython
        return 0
    dummy = threading._DummyThread
    own = sum(1 for thread in threading.enumerate() if not isinstance(thread, dummy))
    return max(0, _count_thread_states() - own)


def wait_for_foreign_releases(deadline_s: float = DEADLINE_S, grace_s: float = GRACE_S) -> int:
    """Let go of the GIL until no foreign thread holds a thread state, for at least
    ``grace_s`` and at most ``deadline_s`` seconds; returns how many still do."""
    start = time.monotonic()
    while True:
        waiting = foreign_thread_states()
        elapsed = time.monotonic() - start
        if (waiting == 0 and elapsed >= grace_s) or elapsed >= deadline_s:
            return waiting
        time.sleep(_POLL_S)


_registered = False
_register_lock = threading.Lock()
renew_after_fork(sys.modules[__name__], "_register_lock")  # a fork while a thread holds it


def register() -> None:
    """Register the wait with ``atexit`` (once per process; a forked child inherits it)."""
    global _registered
    with _register_lock:
        if not _registered:
            atexit.register(wait_for_foreign_releases)
            _registered = True
