"""Error classes: one per failure kind, each a subclass of the builtin the original raises.

Existing callers that wrote ``except AssertionError`` (or ``ValueError``/``RuntimeError``)
around vLLM's ``WorkspaceManager`` keep working; new code can catch the precise class.
"""

from __future__ import annotations

from collections.abc import Hashable

_MB = 1024 * 1024


class WorkspaceError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidSpecError(WorkspaceError, ValueError):
    """A view request ``(shape, dtype)`` or another argument is malformed."""


class InvalidSlotError(WorkspaceError, ValueError):
    """A lane or ubatch index is negative or not an integer."""


class LaneNotConfiguredError(WorkspaceError, RuntimeError):
    """The lane is past the number of lanes the workspace was built with."""


class UbatchNotConfiguredError(WorkspaceError, RuntimeError, IndexError):
    """The ubatch is past the number of ubatch slots the workspace was built with.

    Also an ``IndexError``: the original indexed a list with it.
    """


class WorkspaceLockedError(WorkspaceError, AssertionError):
    """The workspace is locked and a request needs more bytes than the slot holds.

    Attributes:
        slot: the ``(ubatch, lane)`` that would have grown.
        required: bytes the request needs.
        current: bytes the slot holds.
    """

    def __init__(self, message: str, *, slot: tuple[int, int], required: int, current: int):
        super().__init__(message)
        self.slot = slot
        self.required = required
        self.current = current

    @classmethod
    def for_request(
        cls, slot: tuple[int, int], required: int, current: int, origin: str = ""
    ) -> WorkspaceLockedError:
        """Build the error with the original's wording (sizes in MB) plus exact bytes."""
        source = f"allocation from '{origin}'" if origin else f"a request for slot {slot}"
        return cls(
            f"Workspace is locked but {source} requires {required / _MB:.2f} MB "
            f"({required} bytes), current size is {current / _MB:.2f} MB ({current} bytes). "
            "Workspace growth is not allowed after locking. Reserve the worst case before "
            "lock() (reserve(...)), or unlock() first.",
            slot=slot,
            required=required,
            current=current,
        )


class PersistentKeyLockedError(WorkspaceError, AssertionError):
    """The workspace is locked and a persistent key was never claimed in this slot."""

    def __init__(self, key: Hashable, slot: tuple[int, int]):
        super().__init__(
            f"Workspace is locked but {key!r} was not allocated during warmup for the "
            f"current ubatch and lane (slot {slot}). Request it once before lock()."
        )
        self.key = key
        self.slot = slot


class PersistentMismatchError(WorkspaceError, ValueError):
    """A persistent tensor was requested again with another shape or dtype."""


class NotInitializedError(WorkspaceError, AssertionError):
    """A module-level workspace function was called before ``init_workspace_manager``."""
