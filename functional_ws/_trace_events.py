"""One request of a trace (:class:`TraceEvent`), and a key that JSON could not hold.

A :class:`~functional_ws.Trace` is a tuple of events: per event its kind (``"acquire"`` for a
``get_simultaneous`` call, ``"retain"`` for a ``get_retained`` call, ``"claim"`` for a
persistent resource's key), its ``(ubatch, lane)`` slot, the byte count and dtype name of
each view, and the key. A dtype is kept as its name (``"bfloat16"``): plans depend on a
view only through its byte count, and a name goes through JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any, Literal

import jax
import numpy as np

from ._checks import check_int, is_int
from ._errors import InvalidTraceError
from ._presenters import Presented, key_text, robust_repr, safe_repr
from ._spec import MAX_BYTES
from ._state import Slot

#: What an event asks for: views from the slot's start (``get_simultaneous``), a span at
#: its end (``get_retained``), or a persistent key (``get_persistent_resource``).
EventKind = Literal["acquire", "retain", "claim"]
EVENT_KINDS: tuple[str, ...] = ("acquire", "retain", "claim")
#: The original API's name for each kind (how a shortfall names the call).
CALLS = {"acquire": "get_simultaneous", "retain": "get_retained", "claim": "persistent key"}


def dtype_label(dtype: Any) -> str:
    """How a trace spells a dtype: its name without a ``torch.`` prefix.

    Example:
        >>> import numpy as np
        >>> dtype_label(np.dtype("float16")), dtype_label(np.float32)
        ('float16', 'float32')
    """
    if isinstance(dtype, type):  # NumPy scalar types, JAX's (jnp.float32.dtype)
        inner = getattr(dtype, "dtype", None)
        try:
            return np.dtype(inner if isinstance(inner, np.dtype) else dtype).name
        except TypeError:
            pass
    return str(dtype).removeprefix("torch.")


def check_slot(slot: Any, where: str, error: type[Exception]) -> Slot:
    if type(slot) is not tuple or len(slot) != 2:
        raise error(f"{where} must be an (ubatch, lane) pair of ints, got {safe_repr(slot)}.")
    ubatch = check_int(slot[0], f"{where}[0] (the ubatch)", error=error)
    lane = check_int(slot[1], f"{where}[1] (the lane)", error=error)
    return (int(ubatch), int(lane))  # plain ints: an int subclass (an IntEnum) as its value


@jax.tree_util.register_static
@robust_repr
@dataclasses.dataclass(frozen=True, slots=True)
class TraceEvent(Presented):
    """One request of a trace. Construction checks that the fields agree with each other.

    Attributes:
        kind: ``"acquire"``, ``"retain"`` or ``"claim"``.
        slot: the ``(ubatch, lane)`` it was made in.
        views: ``(nbytes, dtype name)`` per view: an acquire's views in call order, a
            retain's one view, none for a claim.
        key: the key of a retain or a claim (``None`` for an acquire).

    Example:
        >>> TraceEvent("acquire", (0, 0), ((4096, "float16"), (40, "int32"))).nbytes
        (4096, 40)
        >>> TraceEvent("claim", (0, 0), ((8, "int8"),), "scales")
        Traceback (most recent call last):
        ...
        functional_ws.InvalidTraceError: TraceEvent: a claim has no views, got ((8, 'int8'),).
    """

    kind: EventKind
    slot: Slot
    views: tuple[tuple[int, str], ...] = ()
    key: Hashable = None

    _repr_pretty_ = Presented._repr_pretty_  # IPython reads it from the class itself

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise InvalidTraceError(
                f"TraceEvent: kind must be one of {EVENT_KINDS}, got {self.kind!r}."
            )
        # plain ints (an IntEnum names itself in displays): the pair as check_slot returns it
        slot = check_slot(self.slot, "TraceEvent: slot", InvalidTraceError)
        object.__setattr__(self, "slot", slot)
        if type(self.views) is not tuple:
            raise InvalidTraceError(f"TraceEvent: views must be a tuple, got {self.views!r}.")
        for i, view in enumerate(self.views):
            _check_view(view, f"TraceEvent: views[{i}]")
        if self.kind == "claim" and self.views:
            raise InvalidTraceError(f"TraceEvent: a claim has no views, got {self.views!r}.")
        if self.kind == "retain" and len(self.views) != 1:
            raise InvalidTraceError(
                f"TraceEvent: a retain has exactly one view, got {self.views!r}."
            )
        if self.kind == "acquire" and self.key is not None:
            raise InvalidTraceError(
                f"TraceEvent: an acquire has no key, got {safe_repr(self.key)}."
            )
        try:
            hash(self.key)
        except TypeError:
            raise InvalidTraceError(
                f"TraceEvent: key must be hashable, got {safe_repr(self.key)}."
            ) from None

    @property
    def nbytes(self) -> tuple[int, ...]:
        """The exact bytes of each view."""
        return tuple(n for n, _ in self.views)

    @property
    def call(self) -> str:
        """The original API's call: ``get_simultaneous``, ``get_retained`` or
        ``persistent key``."""
        return CALLS[self.kind]

    def describe(self) -> str:
        """The event in one line, exact bytes.

        Example:
            >>> TraceEvent("retain", (1, 0), ((1024, "float32"),), ("deepseek", 3)).describe()
            "get_retained ('deepseek', 3): 1,024 B float32 in slot (1, 0)"
        """
        views = " + ".join(f"{n:,} B {dtype}" for n, dtype in self.views)
        if self.kind == "acquire":
            return f"get_simultaneous {views or '(no views)'} in slot {self.slot}"
        if self.kind == "retain":
            return f"get_retained {key_text(self.key)}: {views} in slot {self.slot}"
        return f"persistent key {key_text(self.key)} in slot {self.slot}"


def _check_view(view: Any, where: str) -> None:
    if type(view) is not tuple or len(view) != 2:
        raise InvalidTraceError(f"{where} must be an (nbytes, dtype name) pair, got {view!r}.")
    nbytes, dtype = view
    if not is_int(nbytes) or not 0 <= nbytes < MAX_BYTES:
        raise InvalidTraceError(
            f"{where}: nbytes must be an int from 0 to 2**63 - 1, got {nbytes!r}."
        )
    if type(dtype) is not str or not dtype:
        raise InvalidTraceError(f"{where}: the dtype name must be a non-empty str, got {dtype!r}.")


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class ReprKey:
    """A key that JSON could not hold, read back from a trace: its ``repr`` text.

    Equal to another :class:`ReprKey` of the same text, to no other object; its own
    ``repr`` is the text, so a trace read back prints as the one written.

    Example:
        >>> ReprKey("<class 'torch.Tensor'>")
        <class 'torch.Tensor'>
    """

    text: str

    def __post_init__(self) -> None:
        if type(self.text) is not str:
            raise InvalidTraceError(f"ReprKey: text must be a str, got {self.text!r}.")

    def __repr__(self) -> str:
        return self.text


def short(value: Any) -> str:
    text = key_text(value)
    return text if len(text) <= 80 else text[:77] + "..."
