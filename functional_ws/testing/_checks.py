"""Eager argument checks for the kits' public functions, in Hypothesis's ``check_argument`` style.

A strategy is built lazily: a bad argument to ``st.lists`` surfaces only when the first
example is drawn, in Hypothesis's words about Hypothesis's arguments. The kits check their own
arguments when called instead, and the message names the kit's function, the argument and
its value. A value of the wrong kind is a ``TypeError``; a value of the right kind out of
range, a ``ValueError`` (what counts as an int is the library's one rule,
:func:`functional_ws._checks.is_int`: a ``bool`` does not).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from .._checks import is_int


def check_count(where: str, name: str, value: object, *, floor: int) -> int:
    """``value`` as an int of at least ``floor``.

    Args:
        where: the public function, as the message names it (``"shapes"``).
        name: its argument.
        value: what the caller passed.
        floor: the smallest allowed value.

    Returns:
        ``value``.

    Raises:
        TypeError: ``value`` is not an int (or is a bool).
        ValueError: ``value`` is below ``floor``.

    Example:
        >>> check_count("slots", "num_lanes", 2, floor=1)
        2
        >>> check_count("slots", "num_lanes", 0, floor=1)
        Traceback (most recent call last):
        ...
        ValueError: slots(num_lanes=0): num_lanes must be at least 1
    """
    if not is_int(value):
        raise TypeError(f"{where}({name}={value!r}): {name} must be an int, not {_kind(value)}")
    if value < floor:
        raise ValueError(f"{where}({name}={value!r}): {name} must be at least {floor}")
    return value


def order_check(where: str, low_name: str, low: int, high_name: str, high: int) -> None:
    """``low <= high`` (both already checked as ints).

    Args:
        where: the public function.
        low_name: the argument that bounds from below.
        low: its value.
        high_name: the argument that bounds from above.
        high: its value.

    Raises:
        ValueError: ``low > high``.

    Example:
        >>> order_check("spec_lists", "min_size", 3, "max_size", 1)
        Traceback (most recent call last):
        ...
        ValueError: spec_lists(min_size=3, max_size=1): min_size must not exceed max_size
    """
    if low > high:
        raise ValueError(
            f"{where}({low_name}={low!r}, {high_name}={high!r}): "
            f"{low_name} must not exceed {high_name}"
        )


def check_pool(where: str, name: str, pool: object) -> list[Any]:
    """A non-empty sequence (not a string) to sample from, as a list.

    Args:
        where: the public function.
        name: its argument.
        pool: what the caller passed.

    Returns:
        The pool's elements, in order.

    Raises:
        TypeError: ``pool`` is a string or not a sequence.
        ValueError: ``pool`` is empty.

    Example:
        >>> check_pool("keys", "names", ("a", "b"))
        ['a', 'b']
        >>> check_pool("keys", "names", ())
        Traceback (most recent call last):
        ...
        ValueError: keys(names=()): names must not be empty
    """
    if isinstance(pool, (str, bytes)) or not isinstance(pool, Sequence):
        raise TypeError(
            f"{where}({name}={pool!r}): {name} must be a sequence such as a tuple or list, "
            f"not {_kind(pool)}"
        )
    if not pool:
        raise ValueError(f"{where}({name}={pool!r}): {name} must not be empty")
    return list(pool)


def check_dtype_pool(where: str, name: str, pool: object) -> list[Any]:
    """A non-empty sequence of dtypes: objects with a positive int ``itemsize``.

    Args:
        where: the public function.
        name: its argument.
        pool: what the caller passed.

    Returns:
        The dtypes, in order.

    Raises:
        TypeError: not a sequence, or an element has no int ``itemsize``.
        ValueError: empty, or an element's ``itemsize`` is not positive.

    Example:
        >>> check_dtype_pool("dtypes", "pool", ["int8"])
        Traceback (most recent call last):
        ...
        TypeError: dtypes(pool=['int8']): pool[0]='int8' is not a dtype (it has no int itemsize)
    """
    elements = check_pool(where, name, pool)
    for i, dtype in enumerate(elements):
        size = getattr(dtype, "itemsize", None)
        if not is_int(size):
            raise TypeError(
                f"{where}({name}={pool!r}): {name}[{i}]={dtype!r} is not a dtype "
                "(it has no int itemsize)"
            )
        if size < 1:
            raise ValueError(f"{where}({name}={pool!r}): {name}[{i}]={dtype!r} has itemsize {size}")
    return elements


def check_hashables(where: str, name: str, pool: object) -> list[Hashable]:
    """A non-empty sequence of hashable keys.

    Args:
        where: the public function.
        name: its argument.
        pool: what the caller passed.

    Returns:
        The keys, in order.

    Raises:
        TypeError: not a sequence, or an element is unhashable.
        ValueError: empty.

    Example:
        >>> check_hashables("keys", "names", [["a"]])
        Traceback (most recent call last):
        ...
        TypeError: keys(names=[['a']]): names[0]=['a'] is not hashable
    """
    elements = check_pool(where, name, pool)
    for i, key in enumerate(elements):
        try:
            hash(key)
        except TypeError:
            raise TypeError(
                f"{where}({name}={pool!r}): {name}[{i}]={key!r} is not hashable"
            ) from None
    return elements


def _kind(value: object) -> str:
    return type(value).__name__
