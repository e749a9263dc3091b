"""Keyed persistent resources per slot: the objects behind the original's ``get_persistent*``.

The core records which keys each slot has claimed (so a locked manager refuses new ones);
the objects themselves live in a :class:`PersistentTables`, which the manager holds. A
factory runs without any lock held (it may use the manager, or wait for another thread
that does); when two threads create the same key at once, the first to finish wins and
both get its resource. A factory that asks for its own key again (on its thread) gets the
inner call's resource, and its own then replaces it, as in the original.

``get_persistent`` keeps its tensors under ``(torch.Tensor, key)``, in the namespace of
``get_persistent_resource`` (as the original does); the displays name such a key as the
user wrote it, marked ``(tensor)``: :func:`tensor_key_text`, installed when this module is
imported.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any, cast

import torch

from functional_ws import ReprKey, UnhashableKeyError, ViewSpec
from functional_ws._presenters import install_key_namer, key_text, safe_repr

from .._errors import PersistentMismatchError, PersistentNotTensorError
from .._private import outside_modes


class PersistentTables:
    """One ``{key: resource}`` table per ``(ubatch, lane)`` slot, in slot order.

    Attributes:
        tables: the tables (the manager's hot paths read them directly).
    """

    def __init__(self, count: int) -> None:
        self.tables: list[dict[Hashable, Any]] = [{} for _ in range(count)]
        # Per thread, per ``(index, key)`` whose factory runs on it now, a ``[stored]`` cell
        # per such factory, outermost first: ``stored`` once a call it made stored the key.
        self._running = threading.local()

    @contextlib.contextmanager
    def creating(self, index: int, key: Hashable) -> Iterator[list[bool]]:
        """Around the factory of ``key`` in slot ``index``; yields its cell, which says
        after the factory whether a call the factory made stored ``key`` (then
        :meth:`keep` is told to replace that resource)."""
        running = self._running.__dict__.setdefault("cells", {})
        cells = running.setdefault((index, key), [])
        cell = [False]
        cells.append(cell)
        try:
            yield cell
        finally:
            cells.pop()  # this factory's: nested ones ended first
            if not cells:
                del running[(index, key)]

    def keep(self, index: int, key: Hashable, resource: Any, *, replace: bool = False) -> Any:
        """Store ``resource`` under ``key`` in slot ``index``; the resource the slot keeps.

        Where another thread stored one first, that one stays (the first to finish wins).
        With ``replace`` (a call this factory made stored one: the factory asked for its
        own key again), this one replaces it, as in the original, whose outer call
        assigns last.
        """
        table = self.tables[index]
        if replace:
            table[key] = resource
            kept = resource
        else:
            kept = table.setdefault(key, resource)
        running = self._running.__dict__.get("cells")
        if running and kept is resource:  # outer factories of the key on this thread
            # replace what this one stored (not what another thread stored first)
            for cell in running.get((index, key), ()):
                cell[0] = True
        return kept


def tensor_key_text(key: object) -> str | None:
    """How displays name a key ``get_persistent`` stored: ``'p20' (tensor)`` for
    ``(torch.Tensor, 'p20')``, not ``(<class 'torch.Tensor'>, 'p20')``, and the same for
    such a key read back from a trace's JSON (there ``torch.Tensor`` is a
    :class:`functional_ws.ReprKey` of its ``repr``); ``None`` for any other key.

    Example:
        >>> tensor_key_text((torch.Tensor, ("weights", 3))), tensor_key_text(("weights", 3))
        ("('weights', 3) (tensor)", None)
        >>> from functional_ws import ReprKey
        >>> tensor_key_text((ReprKey(repr(torch.Tensor)), "p20"))
        "'p20' (tensor)"
    """
    if type(key) is not tuple or len(key) != 2:
        return None
    kind = key[0]
    if kind is torch.Tensor or (type(kind) is ReprKey and kind == _READ_BACK):
        return f"{key_text(key[1])} (tensor)"
    return None


#: ``torch.Tensor`` in a key read back from a trace's JSON (:meth:`Trace.to_json` writes
#: it as its ``repr``).
_READ_BACK = ReprKey(repr(torch.Tensor))


install_key_namer(tensor_key_text)


def tensor_factory(
    spec: ViewSpec, device: torch.device, zero_init: bool
) -> Callable[[], torch.Tensor]:
    """A function creating the persistent tensor of ``spec`` on ``device`` (zeroed or not)."""
    make = torch.zeros if zero_init else torch.empty
    shape, dtype = spec.shape, cast(torch.dtype, spec.dtype)

    def factory() -> torch.Tensor:
        with outside_modes():  # kept: a real tensor, whatever the caller's torch modes
            return make(shape, dtype=dtype, device=device)

    return factory


def check_tensor_key(key: object) -> None:
    """Refuse an unhashable ``get_persistent`` key in the caller's words: the tensor is kept
    under ``(torch.Tensor, key)``, which the resource table's refusal would name.

    Raises:
        UnhashableKeyError: (``TypeError``) ``key`` cannot be hashed.
    """
    try:
        hash(key)
    except TypeError:
        raise UnhashableKeyError(f"key must be hashable, got {safe_repr(key)}.") from None


def check_persistent_tensor(
    key: Hashable, tensor: object, shape: object, dtype: torch.dtype
) -> torch.Tensor:
    """``tensor`` if it is a tensor of ``shape`` and ``dtype``; else the original's error.

    Raises:
        PersistentMismatchError: (``ValueError``, "requested shape") the key holds another
            shape or dtype; :class:`PersistentNotTensorError` (an ``AttributeError`` too)
            something that is not a tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise PersistentNotTensorError(
            f"Persistent workspace {safe_repr(key)} has shape={getattr(tensor, 'shape', None)}, "
            f"dtype={getattr(tensor, 'dtype', None)}; requested shape={shape}, dtype={dtype}. "
            f"It holds a {type(tensor).__name__}, not a tensor: a resource was put under "
            f"(torch.Tensor, {safe_repr(key)}), the key get_persistent keeps its tensor under."
        )
    if tensor.shape != shape or tensor.dtype != dtype:
        raise PersistentMismatchError(
            f"Persistent workspace {safe_repr(key)} has shape={getattr(tensor, 'shape', None)}, "
            f"dtype={getattr(tensor, 'dtype', None)}; requested shape={shape}, dtype={dtype}."
        )
    return tensor
