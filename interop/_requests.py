"""How a request may be spelled: the façade's one boundary for its arguments.

Every request a caller makes passes here once. After it, a request is in its canonical
plain form (a ``tuple`` of ``(shape, dtype)`` pairs, each a ``tuple``, each shape a
``tuple`` of ``int`` dims, each dtype a ``torch.dtype``), and everything below the façade
(the core's planning, the memo, carving) sees only that form: "plain" and "memoisable"
mean the same thing everywhere.
"""

from __future__ import annotations

from typing import Any

import torch

from functional_ws._spec import MAX_BYTES

_DTYPE = torch.dtype


def plain_nbytes(specs: tuple[Any, ...]) -> list[int] | None:
    """The exact bytes of each view of a request in its canonical plain form, or ``None``
    when the request is spelled otherwise (or is not a request at all).

    Example:
        >>> import torch
        >>> plain_nbytes((((2, 3), torch.float32), ((5,), torch.int8)))
        [24, 5]
        >>> plain_nbytes((([2, 3], torch.float32),)) is None  # a list shape: not plain
        True
    """
    sizes = []
    for spec in specs:
        if type(spec) is not tuple or len(spec) != 2:
            return None
        shape, dtype = spec
        if type(shape) is not tuple or type(dtype) is not _DTYPE:
            return None
        nbytes = dtype.itemsize
        for dim in shape:
            if type(dim) is not int or dim < 0:
                return None
            nbytes *= dim
        if nbytes >= MAX_BYTES:
            return None
        sizes.append(nbytes)
    return sizes
