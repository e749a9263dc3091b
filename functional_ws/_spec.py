"""View requests: ``(shape, dtype)`` pairs, validated once and reduced to byte counts.

A dtype is anything with a positive integer ``itemsize``: torch, NumPy and JAX dtypes and
JAX/NumPy scalar types all qualify. Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Hashable
from typing import Any

import numpy as np

from ._errors import InvalidSpecError

#: Byte counts at or above this are refused (they cannot index memory).
MAX_BYTES = 2**63


def round_up(n: int, alignment: int) -> int:
    """Smallest multiple of ``alignment`` (a power of two) that is ``>= n``."""
    return (n + alignment - 1) & -alignment


def round_down(n: int, alignment: int) -> int:
    """Largest multiple of ``alignment`` (a power of two) that is ``<= n``."""
    return n & -alignment


@dataclasses.dataclass(frozen=True)
class ViewSpec:
    """One validated view request.

    Attributes:
        shape: the view's shape, a tuple of Python ints.
        dtype: the dtype object exactly as the caller gave it (the shell builds views with it).
        itemsize: bytes per element.
        nbytes: ``prod(shape) * itemsize``.
    """

    shape: tuple[int, ...]
    dtype: Hashable
    itemsize: int
    nbytes: int


def itemsize_of(dtype: Any, argname: str = "dtype") -> int:
    """Bytes per element of ``dtype``, or :class:`InvalidSpecError` naming ``argname``."""
    size = getattr(dtype, "itemsize", None)
    if not _is_int(size):
        inner = getattr(dtype, "dtype", None)  # JAX scalar types: jnp.float32.dtype
        size = getattr(inner, "itemsize", None)
    if not _is_int(size) and isinstance(dtype, type):
        try:  # NumPy scalar types such as np.float32
            size = np.dtype(dtype).itemsize
        except TypeError:
            size = None
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size <= 0:
        raise InvalidSpecError(
            f"{argname} must be a dtype with a positive integer itemsize (a torch, NumPy or "
            f"JAX dtype), got {dtype!r}."
        )
    return int(size)


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def normalize_shape(shape: Any, argname: str = "shape") -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative Python ints, or :class:`InvalidSpecError`."""
    if not isinstance(shape, tuple):
        raise InvalidSpecError(
            f"{argname} must be a tuple of non-negative ints, got {type(shape).__name__} "
            f"{shape!r}. Write ({shape!r},) for a 1-D view."
            if isinstance(shape, numbers.Number)
            else f"{argname} must be a tuple of non-negative ints, got "
            f"{type(shape).__name__} {shape!r}."
        )
    for i, dim in enumerate(shape):
        if not _is_int(dim) or dim < 0:
            raise InvalidSpecError(
                f"{argname}[{i}] must be a non-negative int, got {dim!r} in {argname}={shape!r}."
            )
    return tuple(int(d) for d in shape)


def make_spec(shape: Any, dtype: Any, argname: str = "spec") -> ViewSpec:
    """Validate one request and compute its byte count.

    Args:
        shape: a tuple of non-negative ints (``torch.Size`` qualifies).
        dtype: anything with a positive integer ``itemsize``.
        argname: how error messages name the request.

    Returns:
        The :class:`ViewSpec`.

    Raises:
        InvalidSpecError: (a ``ValueError``) for a non-tuple shape, a bool, float or
            negative dimension, a dtype without ``itemsize``, or a byte count ``>= 2**63``.

    Example:
        >>> import numpy as np
        >>> make_spec((2, 3), np.dtype("float32")).nbytes
        24
    """
    dims = normalize_shape(shape, f"{argname} shape")
    itemsize = itemsize_of(dtype, f"{argname} dtype")
    nbytes = itemsize
    for d in dims:
        nbytes *= d
    if nbytes >= MAX_BYTES:
        raise InvalidSpecError(
            f"{argname}: shape={dims!r} with itemsize {itemsize} needs {nbytes} bytes, "
            f"which is not below 2**63."
        )
    return ViewSpec(dims, dtype, itemsize, nbytes)


def as_spec(request: Any, argname: str = "spec") -> ViewSpec:
    """Validate a ``(shape, dtype)`` pair (or pass a :class:`ViewSpec` through)."""
    if isinstance(request, ViewSpec):
        return request
    if not isinstance(request, (tuple, list)) or len(request) != 2:
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
