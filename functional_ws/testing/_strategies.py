"""Hypothesis strategies for workspace requests: shapes, dtypes, specs, slots and keys.

Small sizes by default so that shrinking ends on readable examples.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .._state import Slot

#: NumPy dtypes with 1, 2, 4, 8 and 16 byte items.
DEFAULT_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(name)
    for name in ("uint8", "int8", "float16", "int32", "float32", "float64", "complex128")
)


def dtypes(pool: Sequence[Any] = DEFAULT_DTYPES) -> st.SearchStrategy[Any]:
    """Dtypes drawn from ``pool`` (any objects with an ``itemsize``: torch dtypes too)."""
    return st.sampled_from(list(pool))


def shapes(*, max_dims: int = 3, max_side: int = 40) -> st.SearchStrategy[tuple[int, ...]]:
    """Tuples of non-negative ints, zero-sized dimensions included."""
    return st.lists(st.integers(0, max_side), min_size=0, max_size=max_dims).map(tuple)


def specs(
    *, dtype_pool: Sequence[Any] = DEFAULT_DTYPES, max_dims: int = 3, max_side: int = 40
) -> st.SearchStrategy[tuple[tuple[int, ...], Any]]:
    """``(shape, dtype)`` pairs, as ``get_simultaneous`` takes them."""
    return st.tuples(shapes(max_dims=max_dims, max_side=max_side), dtypes(dtype_pool))


def spec_lists(
    *, min_size: int = 1, max_size: int = 4, **kwargs: Any
) -> st.SearchStrategy[list[tuple[tuple[int, ...], Any]]]:
    """The argument list of one ``get_simultaneous`` call."""
    return st.lists(specs(**kwargs), min_size=min_size, max_size=max_size)


def slots(num_ubatches: int, num_lanes: int) -> st.SearchStrategy[Slot]:
    """``(ubatch, lane)`` pairs of a workspace with the given counts."""
    return st.tuples(st.integers(0, num_ubatches - 1), st.integers(0, num_lanes - 1))


def keys(names: Sequence[Hashable] = ("a", "b", "c")) -> st.SearchStrategy[Hashable]:
    """Keys for retained spans and persistent resources, from a small pool (so they repeat)."""
    return st.sampled_from(list(names))
