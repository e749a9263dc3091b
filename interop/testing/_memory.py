"""Real bytes behind torch views: which buffer a view lies in, reading and writing its bytes.

A buffer is a torch storage, found with ``untyped_storage()``. The machine keeps only a weak
reference to it between calls, so it never pins memory a manager wants to release, and a
buffer freed and replaced at the same address is still seen as a new one.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .._private import storage_from_weak


def nbytes_of(view: torch.Tensor) -> int:
    """The bytes a (contiguous) view covers."""
    return view.numel() * view.element_size()


def window(storage: torch.UntypedStorage, offset: int, nbytes: int) -> torch.Tensor:
    """A ``uint8`` tensor over bytes ``[offset, offset + nbytes)`` of ``storage``."""
    empty = torch.empty((0,), dtype=torch.uint8, device=storage.device)
    return empty.set_(storage, offset, (nbytes,), (1,))


def view_bytes(view: torch.Tensor) -> torch.Tensor:
    """A ``uint8`` tensor over the bytes of a contiguous view."""
    storage = view.untyped_storage()
    return window(storage, view.data_ptr() - storage.data_ptr(), nbytes_of(view))


def check_real(view: torch.Tensor) -> None:
    """Refuse a view with no bytes behind it: every meta tensor lies at address 0, so the
    kit's checks of bytes and addresses would fail (overlap) or pass (alignment) for
    nothing.

    Raises:
        ValueError: ``view`` is on the meta device.
    """
    if view.is_meta:
        raise ValueError(
            "interop.testing checks a manager's real bytes and addresses (retained spans, "
            "persistent tensors, overlap, alignment), but the factory's manager hands out "
            "views on the meta device, which has neither: check a manager made on 'cpu' or "
            "an accelerator (its plans are the same)."
        )


def read(data: torch.Tensor) -> bytes:
    """The bytes of a ``uint8`` tensor (copied to the host).

    Raises:
        ValueError: ``data`` is on the meta device (:func:`check_real`).
    """
    check_real(data)
    return bytes(data.cpu().numpy().tobytes())


def write(data: torch.Tensor, content: bytes) -> None:
    """Write ``content`` into a ``uint8`` tensor of the same length."""
    data.copy_(torch.frombuffer(bytearray(content), dtype=torch.uint8))


def first_difference(now: bytes, before: bytes) -> int | None:
    """The index of the first byte where ``now`` and ``before`` differ, or ``None``."""
    for i, (a, b) in enumerate(zip(now, before, strict=True)):
        if a != b:
            return i
    return None


@dataclasses.dataclass
class Buffer:
    """A slot's buffer as the machine saw it.

    Attributes:
        address: the storage's ``data_ptr()``.
        nbytes: the storage's size.
        weak: a weak reference to the storage.
        epoch: the machine's growth counter when the buffer was first seen.
        lock_serial: the machine's lock counter then, or ``None`` if it was unlocked.
        phase: the address and description of the first view seen in it (the reference for
            relative alignment).
        origin: the address of the first non-empty view of the first ``get_simultaneous``
            seen in it: where the original lays requests out from (the views before it, if
            any, were empty, and empty views take no room).
        base: the address the core's offsets count from (the slot's base), once a view with
            a planned offset was seen in it (only with ``core_state``).
        stale: the slot had this buffer before another one (so its views are stale).
    """

    address: int
    nbytes: int
    weak: StorageWeakRef
    epoch: int
    lock_serial: int | None
    phase: tuple[int, str] | None = None
    origin: int | None = None
    base: int | None = None
    stale: bool = False

    @classmethod
    def of(cls, storage: torch.UntypedStorage, epoch: int, lock_serial: int | None) -> Buffer:
        """Record ``storage``."""
        weak = StorageWeakRef(storage)  # type: ignore[no-untyped-call]
        return cls(storage.data_ptr(), storage.nbytes(), weak, epoch, lock_serial)

    def alive(self) -> bool:
        """Whether the storage still exists (someone, normally the manager, holds it)."""
        return not self.weak.expired()  # type: ignore[no-untyped-call]

    def holds(self, storage: torch.UntypedStorage) -> bool:
        """Whether ``storage`` is this buffer."""
        return (
            self.alive() and storage.data_ptr() == self.address and storage.nbytes() == self.nbytes
        )

    def window(self, offset: int, nbytes: int) -> torch.Tensor | None:
        """A ``uint8`` tensor over ``[offset, offset + nbytes)``, or ``None`` if freed."""
        storage = storage_from_weak(self.weak)
        if storage is None:
            return None
        return window(storage, offset, nbytes)
