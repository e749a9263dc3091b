"""The core's errors: one class per failure kind the core itself decides.

Each subclasses the builtin the original raised for the same failure, so existing callers
that wrote ``except AssertionError`` (or ``ValueError``/``RuntimeError``) around vLLM's
``WorkspaceManager`` keep working, and new code can catch the precise class. Errors that
only the torch shell raises (devices, allocators, the JAX handoff, the module-level API)
live in ``interop``.
"""

from __future__ import annotations

from collections.abc import Hashable

from ._presenters import safe_repr

_MB = 1024 * 1024


class WorkspaceError(Exception):
    """Base class of every error functional-ws raises on purpose (core and shell)."""


class InvalidSpecError(WorkspaceError, ValueError):
    """A view request ``(shape, dtype)``, a key or a request list is malformed."""


class InvalidShapeError(InvalidSpecError, TypeError):
    """A shape that is not a tuple of non-negative ints, or one too large to address: a
    ``TypeError`` as well, as the original raises one (its arithmetic or ``view`` fails)."""


class NegativeDimError(InvalidShapeError, RuntimeError):
    """A shape with a negative dimension: a ``RuntimeError`` as well, as the original's
    ``reshape`` (or ``torch.empty``) raises one (``-1``, which ``reshape`` infers, it serves
    from a grown slot as a view of the wrong size)."""


class UnhashableKeyError(InvalidSpecError, TypeError):
    """A key that cannot be hashed (a list, a dict): a ``TypeError`` as well, as the
    original's persistent-resource lookup raises one (``key not in resources``)."""


class InvalidDtypeError(InvalidSpecError, TypeError, AttributeError):
    """A dtype the workspace cannot make views of (a string, ``None``, a NumPy dtype where
    torch's is needed): a ``TypeError`` and an ``AttributeError`` as well, as the original
    raises one or the other (it reads ``dtype.itemsize``, then hands it to torch)."""


class InvalidRequestError(InvalidSpecError, TypeError, AttributeError):
    """A request that is no ``(shape, dtype)`` pair at all (a number, ``None``, a string): a
    ``TypeError`` and an ``AttributeError`` as well, as the original raises one or the
    other (it unpacks the request, then reads ``dtype.itemsize``). A tuple of another
    length is a plain :class:`InvalidSpecError`, a ``ValueError`` as the original's."""


class InvalidConfigError(WorkspaceError, ValueError):
    """A workspace configuration is out of range: a count, the alignment, the growth policy
    or the capacity limit."""


class InvalidConfigTypeError(InvalidConfigError, TypeError):
    """A configuration count of the wrong type (``num_lanes=2.0``, ``num_ubatches="2"``): a
    ``TypeError`` as well, as the original raises one (it multiplies a list by the count)."""


class InvalidPlanError(WorkspaceError, ValueError):
    """A plan (``functional_ws.from_dict`` data, or a plan file) is malformed, inconsistent
    or made for another configuration. The message names the field (and the file)."""


class InvalidSlotError(WorkspaceError, ValueError):
    """A lane or ubatch index is negative or not an integer."""


class InvalidSlotTypeError(InvalidSlotError, TypeError):
    """A lane or ubatch index that is not an integer (``1.5``, ``"0"``): a ``TypeError`` as
    well, as the original raises one (comparing it, or indexing its list with it)."""


class LaneNotConfiguredError(WorkspaceError, RuntimeError):
    """The lane is past the number of lanes the workspace was built with."""


class UbatchNotConfiguredError(WorkspaceError, RuntimeError, IndexError):
    """The ubatch is past the number of ubatch slots the workspace was built with.

    Also an ``IndexError``: the original indexed a list with it.
    """


class InvalidTraceError(WorkspaceError, ValueError):
    """A trace (:class:`functional_ws.Trace`), one of its events or its JSON text is
    malformed. The message names the field and its value."""


class TraceTypeError(InvalidTraceError, TypeError):
    """An argument that should be a trace (or a state, or JSON text) is something else.

    Also a ``TypeError``: the value is of the wrong kind, not out of range."""


class TraceMismatchError(InvalidTraceError):
    """A trace names a slot the workspace does not have: it was recorded on a workspace
    with more ubatches or lanes. The message names the event, its slot and the
    configuration."""


class CapacityLimitError(WorkspaceError, RuntimeError):
    """A growth asks for more bytes than a slot can ever hold (above the capacity limit,
    which the torch shell sets to the device's total memory).

    Refused before anything is released, so the slot keeps its buffer. A ``RuntimeError``,
    like torch's out-of-memory errors.

    Attributes:
        slot: the ``(ubatch, lane)`` that would have grown.
        required: bytes the request needs.
        limit: the most bytes a slot may hold.
    """

    def __init__(self, slot: tuple[int, int], required: int, limit: int):
        super().__init__(
            f"Workspace slot {slot} would have to grow to {required} bytes "
            f"({required / 2**30:.2f} GiB), above the capacity limit of {limit} bytes "
            f"({limit / 2**30:.2f} GiB: the state's max_capacity, which interop's manager "
            "sets to the device's total memory): the request can never fit. Nothing was "
            "released; the slot keeps its buffer."
        )
        self.slot = slot
        self.required = required
        self.limit = limit


class WorkspaceLockedError(WorkspaceError, AssertionError):
    """The workspace is locked and a request needs more bytes than the slot holds.

    Attributes:
        slot: the ``(ubatch, lane)`` that would have grown.
        required: bytes the request needs.
        current: bytes the slot holds.
        refused_by: what refused, where a shell says (the torch façade marks its engine's
            own refusals, so that a refusal raised by code a growth runs, another
            manager's, is told apart); ``None`` otherwise.
    """

    refused_by: object = None

    def __init__(self, message: str, *, slot: tuple[int, int], required: int, current: int):
        super().__init__(message)
        self.slot = slot
        self.required = required
        self.current = current

    @classmethod
    def for_request(
        cls, slot: tuple[int, int], required: int, current: int, origin: str = ""
    ) -> WorkspaceLockedError:
        """Build the error in the original's words, whole, then what we add: the slot, the
        exact bytes and the fix. ``origin``: the caller's ``file:line:function``
        (``'unknown'`` where there is none, as the original says)."""
        return cls(
            f"Workspace is locked but allocation from '{origin or 'unknown'}' requires "
            f"{required / _MB:.2f} MB, current size is {current / _MB:.2f} MB. Workspace "
            f"growth is not allowed after locking. That is slot {slot} (ubatch, lane): "
            f"{required} bytes requested, {current} bytes held. Reserve the worst case before "
            "lock() (reserve(...)), or unlock() first.",
            slot=slot,
            required=required,
            current=current,
        )


class PersistentKeyLockedError(WorkspaceError, AssertionError):
    """The workspace is locked and a persistent key was never claimed in this slot."""

    def __init__(self, key: Hashable, slot: tuple[int, int]):
        super().__init__(
            f"Workspace is locked but {safe_repr(key)} was not allocated during warmup for the "
            f"current ubatch and lane. That is slot {slot} (ubatch, lane): request the key "
            "there once before lock()."
        )
        self.key = key
        self.slot = slot


# Tracebacks print ``functional_ws.WorkspaceLockedError``: the public path, not this module's.
for _error in (
    WorkspaceError,
    InvalidSpecError,
    InvalidShapeError,
    NegativeDimError,
    UnhashableKeyError,
    InvalidDtypeError,
    InvalidRequestError,
    InvalidConfigError,
    InvalidConfigTypeError,
    InvalidPlanError,
    InvalidSlotError,
    InvalidSlotTypeError,
    InvalidTraceError,
    TraceTypeError,
    TraceMismatchError,
    LaneNotConfiguredError,
    UbatchNotConfiguredError,
    CapacityLimitError,
    WorkspaceLockedError,
    PersistentKeyLockedError,
):
    _error.__module__ = "functional_ws"
del _error
