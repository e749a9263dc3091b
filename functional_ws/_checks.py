"""The one rule for integer arguments: a plain ``int`` (not a ``bool``), within bounds.

Counts, indices and byte sizes all go through :func:`check_int`, so every such error reads
the same way and names the argument and its value. And the one rule for a JSON object
read from a file (a trace, a plan): no field written twice (:func:`unique_fields`).
"""

from __future__ import annotations

from typing import Any, TypeGuard


def is_int(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` and not a ``bool`` (NumPy integers do not count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(
    value: Any,
    name: str,
    *,
    minimum: int = 0,
    maximum: int | None = None,
    error: type[Exception] = ValueError,
    type_error: type[Exception] | None = None,
) -> int:
    """``value`` as a plain ``int`` if it is an ``int`` (not a ``bool``) in ``[minimum,
    maximum]``; else raise.

    Args:
        value: what the caller passed.
        name: how the message names it (``"num_lanes"``, ``"Workspace lane"``, ``"plan['x']"``).
        minimum: the smallest value allowed; 0 reads "non-negative", 1 "at least one".
        maximum: the largest value allowed, or ``None``.
        error: the exception class to raise.
        type_error: the class to raise where ``value`` is not an ``int`` at all (the
            original's ``TypeError`` cases); ``None``: ``error``.

    Returns:
        ``int(value)``: an ``int`` subclass (an ``IntEnum`` member) comes back a plain
        ``int``, so states and traces hold plain values.

    Raises:
        ``error``: naming ``name`` and the value.

    Example:
        >>> check_int(2, "num_lanes", minimum=1)
        2
        >>> check_int(0, "num_lanes", minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: num_lanes must be at least one, got 0.
        >>> check_int(True, "lane")
        Traceback (most recent call last):
        ...
        ValueError: lane must be an int, got True.
    """
    if not is_int(value):
        raise (type_error or error)(f"{name} must be an int, got {value!r}.")
    if value < minimum:
        bound = {0: "non-negative", 1: "at least one"}.get(minimum, f"at least {minimum}")
        raise error(f"{name} must be {bound}, got {value}.")
    if maximum is not None and value > maximum:
        raise error(f"{name} must be at most {maximum}, got {value}.")
    return int(value)


def unique_fields(pairs: list[tuple[str, Any]], error: type[Exception]) -> dict[str, Any]:
    """A JSON object's fields (``json``'s ``object_pairs_hook``), refusing one written twice
    with ``error``: JSON would keep the last silently, and a file edited by hand could claim
    4 B where it said 4 MB first.

    Example:
        >>> unique_fields([("a", 1), ("b", 2)], ValueError)
        {'a': 1, 'b': 2}
        >>> unique_fields([("a", 1), ("a", 2)], ValueError)
        Traceback (most recent call last):
        ...
        ValueError: text has the field 'a' twice in one object.
    """
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise error(f"text has the field {name!r} twice in one object.")
            seen.add(name)
    return data
