"""Cheap checks of requests, for the hot paths and for what the core cannot know (torch)."""

from __future__ import annotations

from typing import Any

import torch

from functional_ws import InvalidSpecError, ViewSpec


def plain_dims(specs: tuple[Any, ...]) -> bool:
    """Whether every dimension of every ``(shape, dtype)`` pair is a plain ``int``.

    A memoised ``((1,), dtype)`` compares (and hashes) equal to ``((True,), dtype)`` and
    ``((1.0,), dtype)``, which the core refuses; so only plain requests are memoised, and a
    request that hits a memo is checked the same way (``get_simultaneous`` inlines this
    loop) before the memo is used.
    """
    for shape, _ in specs:
        for dim in shape:
            if type(dim) is not int:
                return False
    return True


def plain_shape(shape: tuple[int, ...]) -> bool:
    """Whether every dimension of ``shape`` is a plain ``int`` (a loop: hot paths call it)."""
    for dim in shape:  # noqa: SIM110
        if type(dim) is not int:
            return False
    return True


def memoisable(specs: tuple[Any, ...]) -> bool:
    """Whether a request the core accepted may be memoised: pairs of plain int tuples.

    Any request equal to such a one is made of pairs of tuples too, so the hot path's
    dimension check cannot fail on it.
    """
    return all(
        type(spec) is tuple and len(spec) == 2 and isinstance(spec[0], tuple) for spec in specs
    ) and plain_dims(specs)


def check_torch_dtype(spec: ViewSpec, argname: str) -> None:
    """Refuse a dtype that is not a ``torch.dtype`` (the core accepts any with an itemsize).

    Raises:
        InvalidSpecError: (``ValueError``) naming ``argname`` and the dtype.
    """
    if not isinstance(spec.dtype, torch.dtype):
        raise InvalidSpecError(
            f"{argname} must be a torch.dtype (the views are torch tensors), got {spec.dtype!r}."
        )
