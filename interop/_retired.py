"""Retired buffers that live views still pin: found with weak references, reported by slot.

When a slot grows, the manager drops every reference it holds to the old buffer. If memory
is still in use after that, someone else holds it: a view kept across calls, or an array
imported from one (a JAX array made through DLPack keeps the torch storage alive). vLLM
lost 5.9 GiB per rank this way (#56902).

The weak reference is to the buffer's *storage*, not to the tensor object: views made with
``view(dtype)`` do not keep the original tensor object alive (measured: a weak reference to
it dies at once while the views live on), but every view and every DLPack capsule keeps the
storage alive. Nothing here runs on the hot path.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from functional_ws import format_bytes

from ._diagnostics import logger


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


class RetiredBuffers:
    """The buffers growth retired that may still be alive."""

    def __init__(self) -> None:
        self._records: list[RetiredBuffer] = []

    def retire(self, slot: tuple[int, int], buffer: torch.Tensor) -> RetiredBuffer:
        """Start watching ``buffer``; the caller then drops its own references to it."""
        storage = buffer.untyped_storage()
        weak = StorageWeakRef(storage)  # type: ignore[no-untyped-call]
        record = RetiredBuffer(slot, storage.nbytes(), weak)
        self._records.append(record)
        return record

    def pinned(self) -> list[RetiredBuffer]:
        """The retired buffers still alive (forgetting those that were freed)."""
        self._records = [r for r in self._records if r.pinned]
        return list(self._records)

    def report(self, record: RetiredBuffer) -> None:
        """Log a warning if ``record``'s buffer outlived the manager's references to it."""
        if not record.pinned:
            return
        logger.warning(
            "Workspace slot %s (ubatch, lane) grew, but its retired buffer of %s (%d bytes) "
            "is still pinned by live views or by arrays imported from them (e.g. JAX "
            "through DLPack), so that memory stays allocated beside the new buffer until "
            "they are released. Do not keep workspace views across calls.",
            record.slot,
            format_bytes(record.nbytes),
            record.nbytes,
        )
