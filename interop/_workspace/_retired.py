"""Retired buffers that live views still pin: found with weak references, reported by slot.

When a slot grows, the manager drops every reference it holds to the old buffer. If memory
is still in use after that, someone else holds it: a view kept across calls, or an array
imported from one (a JAX array made through DLPack keeps the torch storage alive). vLLM
lost 5.9 GiB per rank this way (#56902).

The weak reference is to the buffer's *storage*, not to the tensor object: views made with
``view(dtype)`` do not keep the original tensor object alive (measured: a weak reference to
it dies at once while the views live on), but every view and every DLPack capsule keeps the
storage alive. Nothing here runs on the hot path.

The records stay bounded without anyone calling ``stats()``: dead ones are dropped whenever
the list reaches twice the number found alive at the last sweep (at least
:data:`SWEEP_AT_LEAST`), so each growth costs amortised constant time and, with no views
held, a manager keeps at most that many records however often it grows.

Under ``torch.compile`` the manager's methods run eagerly (``_compile.py``), but between
graphs Dynamo passes the values live at a graph break to the function that resumes after
it, which holds them until it returns: a view the code dropped (``ws.get_retained(...)[1]``)
pins its buffer until the compiled function returns. So a buffer retired inside a compiled
function is not warned about (``stats()`` still counts it while it is pinned). And nothing
is recorded while Dynamo traces: the buffer it traces may be a fake tensor.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from types import FrameType

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from functional_ws.display import exact_bytes

from .. import _private
from .._diagnostics import logger
from .._locks import renew_after_fork

#: The fewest records kept before dead ones are swept out.
SWEEP_AT_LEAST = 16
#: How Dynamo names the functions that resume a compiled function after a graph break.
RESUME_PREFIX = "torch_dynamo_resume_in_"


class StorageRef(StorageWeakRef):
    """torch's ``StorageWeakRef``, whose finaliser tolerates a construction that never ran.

    ``StorageWeakRef.__del__`` assumes ``__init__`` finished; an instance made by
    ``__new__`` alone (as Dynamo's polyfill for class instantiation does before a graph
    break) printed ``Exception ignored in: StorageWeakRef.__del__ ... AttributeError``.
    """

    __slots__ = ()

    # Bound here, not looked up when it runs: a finaliser may run at interpreter shutdown,
    # when module globals are already cleared (torch's own keeps its function for this).
    __del__ = _private.release_weak_storage


@dataclasses.dataclass(frozen=True)
class RetiredBuffer:
    """One buffer a growth replaced: its slot, its bytes and a weak reference to its storage."""

    slot: tuple[int, int]
    nbytes: int
    storage: StorageWeakRef

    @property
    def pinned(self) -> bool:
        """Whether the storage is still alive (something outside the manager holds it)."""
        return not self.storage.expired()  # type: ignore[no-untyped-call]


#: The warnings :meth:`RetiredBuffers.report` logs one by one; then only at the 8th, 16th,
#: 32nd... (a loop that keeps its views logged one line per growth, thousands of lines).
WARN_FIRST = 4


class RetiredBuffers:
    """The buffers growth retired that may still be alive (thread-safe, bounded).

    Example:
        >>> import torch
        >>> retired = RetiredBuffers()
        >>> buffer = torch.empty(512, dtype=torch.uint8)
        >>> view = buffer[:4]
        >>> record = retired.retire((0, 0), buffer)
        >>> del buffer
        >>> [r.nbytes for r in retired.pinned()]
        [512]
        >>> del view
        >>> retired.pinned(), len(retired)
        ([], 0)
    """

    def __init__(self) -> None:
        self._records: list[RetiredBuffer] = []
        self._sweep_at = SWEEP_AT_LEAST
        self._reported = 0  # warnings asked for (see report)
        self._lock = threading.Lock()
        renew_after_fork(self, "_lock")  # a fork while another thread holds it

    def __len__(self) -> int:
        """Records kept: those alive at the last sweep and those retired since."""
        return len(self._records)

    def retire(self, slot: tuple[int, int], buffer: torch.Tensor) -> RetiredBuffer | None:
        """Start watching ``buffer``; the caller then drops its own references to it.

        Args:
            slot: the ``(ubatch, lane)`` whose buffer this was.
            buffer: the buffer being replaced.

        Returns:
            The record to :meth:`report` once the caller's references are gone, or ``None``
            while Dynamo traces (nothing is watched then).
        """
        if torch.compiler.is_compiling():
            return None
        storage = buffer.untyped_storage()
        weak = StorageRef(storage)  # type: ignore[no-untyped-call]
        record = RetiredBuffer(slot, storage.nbytes(), weak)
        with self._lock:
            self._records.append(record)
            if len(self._records) >= self._sweep_at:
                self._sweep()
        return record

    def pinned(self) -> list[RetiredBuffer]:
        """The retired buffers still alive (forgetting those that were freed)."""
        with self._lock:
            self._sweep()
            return list(self._records)

    def _sweep(self) -> None:
        """Drop the records of freed buffers (the caller holds the lock)."""
        self._records = [r for r in self._records if r.pinned]
        self._sweep_at = max(SWEEP_AT_LEAST, 2 * len(self._records))

    def report(self, record: RetiredBuffer | None) -> None:
        """Log a warning if ``record``'s buffer outlived the manager's references to it.

        Not inside a function ``torch.compile`` runs, whose resume functions may hold it.
        """
        if record is None or not record.pinned or _inside_compiled_function():
            return
        with self._lock:
            self._reported += 1
            count = self._reported
        if count > WARN_FIRST and count & (count - 1):  # then at powers of two only
            return
        repeats = (
            f" ({count} growths of this manager have left a buffer pinned so far; the next "
            f"warning comes at {2 * count})"
            if count >= WARN_FIRST
            else ""
        )
        logger.warning(
            "Workspace slot %s (ubatch, lane) released its buffer to grow, but that "
            "retired buffer of %s is still pinned by live views or by arrays imported from "
            "them (e.g. JAX through DLPack), so that memory stays allocated beside the "
            "slot's next buffer until they are released. Do not keep workspace views across "
            "calls.%s",
            record.slot,
            exact_bytes(record.nbytes),
            repeats,
        )


def _inside_compiled_function() -> bool:
    """Whether a function Dynamo resumes after a graph break is on the calling stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name.startswith(RESUME_PREFIX):
            return True
        frame = frame.f_back
    return False
