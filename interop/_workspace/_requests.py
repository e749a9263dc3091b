"""How a request may be spelled: the façade's one boundary for its arguments.

Every request a caller makes passes here once. After it, a request is in its canonical
plain form (a ``tuple`` of ``(shape, dtype)`` pairs, each a ``tuple``, each shape a
``tuple`` of ``int`` dims, each dtype a ``torch.dtype``), and everything below the façade
(the core's planning, the memo, carving) sees only that form: "plain" and "memoisable"
mean the same thing everywhere.

Spellings accepted as upstream accepts them, and made canonical here (:func:`canonical`):
a pair or a shape as a ``list``, a shape as a ``torch.Size``, a dim as a NumPy integer (or
anything else with ``__index__``). Refused, with the reason: a dim that is a ``bool`` or a
float (the core says so), and a dim that is a tensor (``int(t)`` is the fix: taking a
CUDA tensor's value is a device sync, which a scratch request must not hide).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from functional_ws import (
    InvalidConfigError,
    InvalidDtypeError,
    InvalidRequestError,
    InvalidShapeError,
    InvalidSpecError,
    ViewSpec,
    WorkspaceLockedError,
)

from .._context import plain_int
from .._device import LARGEST_ITEMSIZE
from .._diagnostics import caller_origin

_DTYPE = torch.dtype
#: NumPy's integer scalar types: a dim of one hashes and compares as the int, so the hot
#: paths serve it from a memoised request as they serve an int.
NUMPY_INTS: frozenset[type] = frozenset(
    (np.byte, np.ubyte, np.short, np.ushort, np.intc, np.uintc, np.int_, np.uint,
     np.longlong, np.ulonglong, np.intp, np.uintp)
)  # fmt: skip


def plain_nbytes(specs: tuple[Any, ...]) -> list[int] | None:
    """The exact bytes of each view of a request in its canonical plain form, or ``None``
    when the request is spelled otherwise (or is not a request at all), or has an empty
    view (the core then checks the view's shape in full).

    Example:
        >>> import torch
        >>> plain_nbytes((((2, 3), torch.float32), ((5,), torch.int8)))
        [24, 5]
        >>> plain_nbytes((([2, 3], torch.float32),)) is None  # a list shape: not plain
        True
    """
    sizes = []
    for spec in specs:
        if type(spec) is not tuple:
            return None
        try:
            shape, dtype = spec
        except ValueError:  # not a pair
            return None
        if type(shape) is not tuple or type(dtype) is not _DTYPE:
            return None
        nbytes = dtype.itemsize
        for dim in shape:
            if type(dim) is not int or dim < 0:
                return None
            nbytes *= dim
        if not nbytes:  # a view of nothing: the core checks what its shape spans
            return None
        sizes.append(nbytes)  # the core refuses views of 2**63 bytes or more
    return sizes


def canonical(specs: tuple[Any, ...], argname: str = "specs") -> tuple[Any, ...]:
    """``specs`` with every accepted spelling made canonical (``specs`` itself when it
    already is); what is not a request is left as it is, for the core to explain.

    Raises:
        InvalidShapeError: a dim that is a tensor (naming it and the fix, ``int(t)``), or
            one whose ``__index__`` refuses, naming ``argname[i] shape[j]``.

    Example:
        >>> import numpy as np, torch
        >>> canonical(([[2, np.int64(3)], torch.float32], (torch.Size([4]), torch.int8)))
        (((2, 3), torch.float32), ((4,), torch.int8))
    """
    pairs = []
    changed = False
    for i, pair in enumerate(specs):
        if isinstance(pair, (tuple, list)) and len(pair) == 2:
            shape = pair[0]
            canon = canonical_shape(shape, f"{argname}[{i}] shape")
            if canon is not shape or type(pair) is not tuple:
                pair, changed = (canon, pair[1]), True
        pairs.append(pair)
    return tuple(pairs) if changed else specs


def canonical_shape(shape: Any, argname: str = "shape") -> Any:
    """``shape`` as a tuple of ints where it is a tuple, list or ``torch.Size`` of ints
    (NumPy integers included), ``shape`` itself when it already is one or is not a shape
    at all (the core explains).

    Raises:
        InvalidShapeError: a dim that is a tensor, or one whose ``__index__`` refuses (a
            NumPy array of one element), naming ``argname[j]``.
    """
    if type(shape) is tuple:
        if plain_shape(shape):
            return shape
    elif isinstance(shape, (tuple, list)):  # torch.Size is a tuple
        dims = tuple(shape)
        if plain_shape(dims):  # a list or a torch.Size of ints: the usual spelling
            return dims
    else:
        return shape
    dims = tuple(_dim(dim, f"{argname}[{j}]") for j, dim in enumerate(shape))
    if type(shape) is tuple and all(a is b for a, b in zip(dims, shape, strict=True)):
        return shape  # nothing to convert (a bool or a float stays, for the core to refuse)
    return dims


def _dim(dim: Any, argname: str) -> Any:
    if type(dim) is int:
        return dim
    if isinstance(dim, torch.Tensor):
        raise InvalidShapeError(
            f"{argname} must be an int, got a tensor ({dim!r}). Pass int(t): the workspace "
            "takes Python ints, because reading a CUDA tensor's value is a device sync that "
            "a scratch request would hide."
        )
    if isinstance(dim, (bool, np.bool_)) or not hasattr(type(dim), "__index__"):
        return dim  # the core refuses it, naming it
    try:
        return operator.index(dim)
    except TypeError as err:  # np.array([3]): an __index__ that refuses
        raise InvalidShapeError(
            f"{argname} must be a non-negative int, got {dim!r} (a {type(dim).__name__} "
            f"with no integer value: {err}). Pass a Python int, such as int(x) of a "
            "one-element array."
        ) from None


def plain_shape(shape: tuple[Any, ...]) -> bool:
    """Whether every dim of ``shape`` is a plain ``int`` (a cached ``(1,)`` equals
    ``(True,)`` and ``(1.0,)``, which must still be refused)."""
    for dim in shape:  # noqa: SIM110 - a loop: hot paths call it
        if type(dim) is not int:
            return False
    return True


def is_plain(specs: tuple[Any, ...]) -> bool:
    """Whether a request the core accepted may be memoised: pairs of plain int tuples.

    Any request equal to such a one is made of pairs of tuples too, so the hot path's
    dimension check cannot fail on it (a cached ``((1,), dtype)`` equals
    ``((True,), dtype)``, which that check sends to the core to refuse).
    """
    for spec in specs:
        if type(spec) is not tuple or type(spec[0]) is not tuple or not plain_shape(spec[0]):
            return False
    return True


def check_torch_dtypes(specs: tuple[Any, ...], name: str | None = None) -> None:
    """Refuse a pair whose dtype is not a ``torch.dtype``, before the core checks the rest.

    The core accepts any dtype with an itemsize; the façade makes torch tensors.

    Raises:
        InvalidSpecError: naming the pair (``shapes_and_dtypes[i] dtype``, or ``name``)
            and the dtype.
    """
    for i, spec in enumerate(specs):
        if type(spec) is tuple and len(spec) == 2 and type(spec[1]) is _DTYPE:
            continue  # the usual request
        if (
            isinstance(spec, (tuple, list))
            and len(spec) == 2
            and not isinstance(spec[1], torch.dtype)
        ):
            what = name or f"shapes_and_dtypes[{i}] dtype"
            raise InvalidDtypeError(
                f"{what} must be a torch.dtype such as torch.float32 (the views are torch "
                f"tensors), got {spec[1]!r}."
            )


def checked_requests(specs: tuple[Any, ...], argname: str) -> list[ViewSpec]:
    """Each pair of a request the façade's slow path serves, validated before the core
    sees it, so that errors name the façade's argument (``argname[i]``: the core names its
    own, ``specs[i]``).

    Raises:
        InvalidSpecError: a pair that is not one, or a bad shape or dtype, naming
            ``argname[i]`` and the value.
    """
    return [_pair_spec(pair, f"{argname}[{i}]") for i, pair in enumerate(specs)]


def torch_specs(pairs: tuple[Any, ...], argname: str) -> list[ViewSpec]:
    """Each ``(shape, dtype)`` pair of a ``reserve`` validated (a torch dtype), named
    ``argname[i]``.

    Raises:
        InvalidSpecError: a bare shape where a pair was meant (with the fix), or a
            malformed pair, naming ``argname[i]``.
    """
    specs = []
    for i, pair in enumerate(pairs):
        if isinstance(pair, tuple) and pair and all(type(d) is int for d in pair):
            raise InvalidSpecError(  # reserve((256, 1024), torch.bfloat16): a bare shape
                f"{argname}[{i}] must be a (shape, dtype) pair, got the shape {pair!r} alone. "
                f"Pass pairs: reserve((({', '.join(map(str, pair))},), dtype), ...)."
                if len(pair) == 1
                else f"{argname}[{i}] must be a (shape, dtype) pair, got the shape {pair!r} "
                f"alone. Pass pairs: reserve(({pair!r}, dtype), ...)."
            )
        specs.append(_pair_spec(pair, f"{argname}[{i}]"))
    return specs


def _pair_spec(pair: Any, name: str) -> ViewSpec:
    """The spec of one ``(shape, dtype)`` pair with a torch dtype, errors naming ``name``."""
    if not isinstance(pair, (tuple, list)):
        raise InvalidRequestError(f"{name} must be a (shape, dtype) pair, got {pair!r}.")
    if len(pair) != 2:
        raise InvalidSpecError(f"{name} must be a (shape, dtype) pair, got {pair!r}.")
    check_torch_dtypes((pair,), f"{name} dtype")
    return ViewSpec.of(pair[0], pair[1], name)


def reserve_requests(requests: Any) -> list[list[ViewSpec]]:
    """``reserve_many``'s ``requests`` (lists of ``(shape, dtype)`` pairs), each checked.

    Raises:
        InvalidSpecError: (``ValueError``) not a list of requests, or a malformed pair
            (naming ``requests[i]``).
    """
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
        raise InvalidSpecError(f"requests must be a list of requests, got {requests!r}.")
    checked = []
    for i, request in enumerate(requests):
        if isinstance(request, (str, bytes)) or not isinstance(request, Iterable):
            raise InvalidSpecError(
                f"requests[{i}] must be a list of (shape, dtype) pairs, got {request!r}."
            )
        pairs = canonical(tuple(request), f"requests[{i}]")
        checked.append(torch_specs(pairs, f"requests[{i}]"))
    return checked


def chosen_slots(slots: Any, lane: int, num_ubatches: int) -> Any:
    """The slots a reservation grows: ``None`` (every ubatch slot of ``lane``), ``"all"``
    (``None`` for the core: every slot) or an iterable of slots, read once here (a
    transition may run again when another thread moved the state; the core checks each).

    Raises:
        InvalidSpecError: (``ValueError``) a string other than ``"all"``.
    """
    if slots is None:
        return tuple((u, lane) for u in range(num_ubatches))
    if isinstance(slots, str):
        if slots != "all":
            raise InvalidSpecError(f"slots must be None, 'all' or a list of slots, got {slots!r}.")
        return None
    return tuple(map(_plain_slot, slots)) if isinstance(slots, Iterable) else slots


def _plain_slot(slot: Any) -> Any:
    """``slot`` with NumPy integers made ``int`` (an index read from an array, taken as
    ``use_workspace_ubatch`` takes it: :func:`interop._context.plain_int`); anything else
    as given, for the core to check."""
    return tuple(map(plain_int, slot)) if type(slot) is tuple else slot


def check_alignment(alignment: int) -> None:
    """Refuse an alignment a torch view could not start at (the core took it: any power of
    two plans bytes; the façade carves torch tensors).

    Raises:
        InvalidConfigError: (``ValueError``) ``alignment`` below :data:`LARGEST_ITEMSIZE`.
    """
    if alignment < LARGEST_ITEMSIZE:
        raise InvalidConfigError(
            f"alignment={alignment!r} is smaller than {LARGEST_ITEMSIZE} bytes, the largest "
            "itemsize of a torch dtype (complex128): a view of such a dtype could not start "
            "at every offset a layout gives it (torch needs an element's offset to be a "
            f"multiple of its itemsize). Use alignment >= {LARGEST_ITEMSIZE} (the default is "
            "256)."
        )


#: Key types whose ``__hash__`` and ``__eq__`` are the interpreter's own (no caller's code).
_PLAIN_KEYS = (str, int, float, bytes, bool, type(None), torch.dtype)


def user_code_of_key(key: object) -> str | None:
    """What of the caller's code a key runs when it is hashed and compared: ``None`` for
    the interpreter's own types (tuples of them included), else a description naming the
    key's type, for the error a call raises when that code keeps changing the workspace.

    Example:
        >>> user_code_of_key(("deepseek", 3)) is None
        True
        >>> class Key:
        ...     pass
        >>> user_code_of_key(("layer", Key()))
        "the key's __hash__ and __eq__ (a Key in ('layer', <...Key object at 0x...>))"
        >>> import torch
        >>> user_code_of_key(torch.Size([2, 3]))
        "the key's __hash__ and __eq__ (a Size in torch.Size([2, 3]))"
    """
    if _is_plain_key(key):
        return None
    try:
        shown = repr(key)
    except Exception:  # a repr that raises: the type names it
        shown = f"a {type(key).__name__}"
    inner = key  # a tuple's first element that is not plain, else the tuple (a subclass)
    if isinstance(key, tuple):
        inner = next((k for k in key if not _is_plain_key(k)), key)
    return f"the key's __hash__ and __eq__ (a {type(inner).__name__} in {shown})"


def _is_plain_key(key: object) -> bool:
    if type(key) is tuple:
        return all(_is_plain_key(k) for k in key)
    return type(key) in _PLAIN_KEYS


def worded(err: WorkspaceLockedError, refused_by: object = None) -> WorkspaceLockedError:
    """The core's lock refusal, worded as the original's: with the caller's
    ``file:line:function`` (the engine rewords every refusal here, once), and marked as
    ``refused_by`` (the engine whose state refused: ``try_get_simultaneous`` returns
    ``None`` only for its own manager's refusal)."""
    refusal = WorkspaceLockedError.for_request(err.slot, err.required, err.current, caller_origin())
    refusal.refused_by = refused_by
    return refusal
