"""View requests: ``(shape, dtype)`` pairs, validated once and reduced to byte counts.

A dtype is anything with a positive integer ``itemsize``: torch, NumPy and JAX dtypes and
JAX/NumPy scalar types all qualify. Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Hashable
from typing import Any

import jax
import numpy as np

from ._build import fast_constructor
from ._checks import is_int
from ._errors import (
    InvalidDtypeError,
    InvalidRequestError,
    InvalidShapeError,
    InvalidSpecError,
    NegativeDimError,
)

#: Byte counts at or above this are refused (they cannot index memory).
MAX_BYTES = 2**63


def round_up(n: int, alignment: int) -> int:
    """Smallest multiple of ``alignment`` (a power of two) that is ``>= n``."""
    return (n + alignment - 1) & -alignment


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class ViewSpec:
    """One validated view request; its fields always agree with each other.

    Construction checks that ``shape`` is a tuple of non-negative ints, that ``itemsize``
    is ``dtype``'s and that ``nbytes`` is ``prod(shape) * itemsize`` (below ``2**63``), so
    a hand-made spec cannot claim fewer bytes than its view covers.

    Attributes:
        shape: the view's shape, a tuple of Python ints.
        dtype: the dtype object exactly as the caller gave it (the shell builds views with it).
        itemsize: bytes per element.
        nbytes: ``prod(shape) * itemsize``.

    Example:
        >>> import numpy as np
        >>> ViewSpec((2, 3), np.dtype("float32"), 4, 24).nbytes
        24
        >>> ViewSpec((2**40,), np.dtype("uint8"), 1, 16)
        Traceback (most recent call last):
        ...
        functional_ws.InvalidSpecError: ViewSpec: nbytes=16 does not match shape=(109... ...
    """

    shape: tuple[int, ...]
    dtype: Hashable
    itemsize: int
    nbytes: int

    def __post_init__(self) -> None:
        checked = make_spec(self.shape, self.dtype, "ViewSpec")
        if self.itemsize != checked.itemsize or not is_int(self.itemsize):
            raise InvalidSpecError(
                f"ViewSpec: itemsize={self.itemsize!r} does not match dtype {self.dtype!r} "
                f"(itemsize {checked.itemsize})."
            )
        if self.nbytes != checked.nbytes or not is_int(self.nbytes):
            raise InvalidSpecError(
                f"ViewSpec: nbytes={self.nbytes!r} does not match shape={checked.shape!r} and "
                f"itemsize {checked.itemsize} ({checked.nbytes} bytes)."
            )
        if type(self.shape) is not tuple:
            object.__setattr__(self, "shape", checked.shape)

    @classmethod
    def of(cls, shape: Any, dtype: Any, argname: str = "spec") -> ViewSpec:
        """The validated spec of one ``(shape, dtype)`` request (what ``acquire`` builds).

        Raises:
            InvalidSpecError: naming ``argname``, as :func:`make_spec`.

        Example:
            >>> import numpy as np
            >>> ViewSpec.of((2, 3), np.dtype("int16")).nbytes
            12
        """
        return make_spec(shape, dtype, argname)


#: A :class:`ViewSpec` from fields this module has just validated (skips re-checking).
_checked_spec = fast_constructor(ViewSpec)


def itemsize_of(dtype: Any, argname: str = "dtype") -> int:
    """Bytes per element of ``dtype``, or :class:`InvalidSpecError` naming ``argname``."""
    size = getattr(dtype, "itemsize", None)
    if not _is_integer(size):
        inner = getattr(dtype, "dtype", None)  # JAX scalar types: jnp.float32.dtype
        size = getattr(inner, "itemsize", None)
    if not _is_integer(size) and isinstance(dtype, type):
        try:  # NumPy scalar types such as np.float32
            size = np.dtype(dtype).itemsize
        except TypeError:
            size = None
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size <= 0:
        raise InvalidDtypeError(
            f"{argname} must be a dtype with a positive integer itemsize (a torch, NumPy or "
            f"JAX dtype such as torch.float32 or np.float32), got {dtype!r}."
        )
    return int(size)


def _is_integer(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def normalize_shape(shape: Any, argname: str = "shape") -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative Python ints, or :class:`InvalidSpecError`."""
    if not isinstance(shape, tuple):
        hint = f" Write ({shape!r},) for a 1-D view." if isinstance(shape, numbers.Number) else ""
        raise InvalidShapeError(
            f"{argname} must be a tuple of non-negative ints, got {type(shape).__name__} "
            f"{shape!r}.{hint}"
        )
    for i, dim in enumerate(shape):
        if not _is_integer(dim) or dim < 0:
            error = NegativeDimError if _is_integer(dim) else InvalidShapeError
            raise error(
                f"{argname}[{i}] must be a non-negative int, got {dim!r} in {argname}={shape!r}."
            )
    return tuple(int(d) for d in shape)


def make_spec(shape: Any, dtype: Any, argname: str = "spec") -> ViewSpec:
    """Validate one request and compute its byte count.

    The usual request (a plain tuple of plain ints, a dtype with an int ``itemsize``) takes
    a short path that does the original's arithmetic and no more; anything else is checked
    field by field, and the error names the argument and its value.

    Args:
        shape: a tuple of non-negative ints (``torch.Size`` qualifies).
        dtype: anything with a positive integer ``itemsize``.
        argname: how error messages name the request (``""``: the fields alone, ``shape``
            and ``dtype``, for an API whose arguments they are).

    Returns:
        The :class:`ViewSpec`.

    Raises:
        InvalidSpecError: (a ``ValueError``) for a non-tuple shape, a bool, float or
            negative dimension, or a byte count ``>= 2**63`` (:class:`InvalidShapeError`,
            a ``TypeError`` too); a dtype without ``itemsize`` (:class:`InvalidDtypeError`,
            a ``TypeError`` and an ``AttributeError`` too).

    Example:
        >>> import numpy as np
        >>> make_spec((2, 3), np.dtype("float32")).nbytes
        24
    """
    spec = quick_spec((shape, dtype))
    if spec is not None:
        return spec
    prefix = f"{argname} " if argname else ""
    dims = normalize_shape(shape, f"{prefix}shape")
    itemsize = itemsize_of(dtype, f"{prefix}dtype")
    nbytes = itemsize
    for d in dims:
        nbytes *= d
    if nbytes >= MAX_BYTES:
        raise InvalidShapeError(
            f"{argname or 'the view'}: shape={dims!r} with itemsize {itemsize} needs {nbytes} "
            "bytes, which is not below 2**63."
        )
    extent = 1
    for d in dims:  # what a 64-bit index must reach, a zero dim counted as one
        extent *= max(d, 1)
    if extent >= MAX_BYTES:
        raise InvalidShapeError(
            f"{argname or 'the view'}: shape={dims!r} spans {extent} elements (its zero dims "
            "counted as one), which no 64-bit index can address (not below 2**63): a view of "
            "it cannot be made, even empty."
        )
    return _checked_spec(dims, dtype, itemsize, nbytes)


def quick_nbytes(request: Any) -> int | None:
    """The bytes of a request in its simplest form (a ``tuple`` of a ``tuple`` of ``int``
    dims and a dtype with an ``int`` ``itemsize``), or ``None`` when :func:`as_spec` must
    look closer.

    The cheap check every usual request passes: the original's own arithmetic, plus a type
    test per field. Whatever it accepts, :func:`as_spec` accepts with the same byte count
    (a property test pins this). A request of zero bytes is left to :func:`as_spec`, which
    checks its shape's extent too.
    """
    if type(request) is not tuple or len(request) != 2:
        return None
    shape, dtype = request
    nbytes = getattr(dtype, "itemsize", None)
    if type(shape) is not tuple or type(nbytes) is not int or nbytes <= 0:
        return None
    for dim in shape:
        if type(dim) is not int or dim < 0:
            return None
        nbytes *= dim
    return nbytes if 0 < nbytes < MAX_BYTES else None


def quick_spec(request: Any) -> ViewSpec | None:
    """The spec of a request its cheap check accepts (see :func:`quick_nbytes`), or
    ``None``."""
    nbytes = quick_nbytes(request)
    if nbytes is None:
        return None
    shape, dtype = request
    return _checked_spec(shape, dtype, dtype.itemsize, nbytes)


def as_spec(request: Any, argname: str = "spec") -> ViewSpec:
    """Validate a ``(shape, dtype)`` pair (or pass a :class:`ViewSpec` through)."""
    if type(request) is tuple and len(request) == 2:
        return make_spec(request[0], request[1], argname)
    if isinstance(request, ViewSpec):
        return request  # consistent by construction
    if not isinstance(request, (tuple, list)):
        raise InvalidRequestError(f"{argname} must be a (shape, dtype) pair, got {request!r}.")
    if len(request) != 2:
        raise InvalidSpecError(f"{argname} must be a (shape, dtype) pair, got {request!r}.")
    return make_spec(request[0], request[1], argname)


def is_spec_like(request: Any) -> bool:
    """Whether ``request`` looks like one ``(shape, dtype)`` pair rather than a list of them."""
    if isinstance(request, ViewSpec):
        return True
    return (
        isinstance(request, (tuple, list))
        and len(request) == 2
        and not isinstance(request[1], (tuple, list, ViewSpec))
    )
