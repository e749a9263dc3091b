"""Helpers of the JAX interop tests (workspace-like views, both handoff paths), tested."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch

import interop
from interop._bridge import _dlpack

ALIGNMENT = 256


def workspace_manager() -> Any:
    """The façade's ``WorkspaceManager`` class, or ``None`` where it does not exist yet."""
    manager_cls = getattr(interop, "WorkspaceManager", None)
    if manager_cls is None:
        try:
            from interop._workspace._facade import WorkspaceManager as manager_cls
        except ImportError:
            return None
    return manager_cls


def carve(specs: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> list[torch.Tensor]:
    """Views carved back to back at 256-byte-aligned addresses, as the workspace does.

    Uses the workspace manager's ``get_simultaneous`` when the façade exists, so the views
    are the real thing; otherwise plain aligned slices of one buffer (same layout rules).
    """
    manager_cls = workspace_manager()
    if manager_cls is not None:
        return list(manager_cls("cpu").get_simultaneous(*specs))
    sizes = [
        math.prod(shape) * torch.empty((), dtype=dtype).element_size() for shape, dtype in specs
    ]
    rounded = [-(-size // ALIGNMENT) * ALIGNMENT for size in sizes]
    buf = torch.empty(sum(rounded) + ALIGNMENT, dtype=torch.uint8)
    offset = (-buf.data_ptr()) % ALIGNMENT
    views = []
    for (shape, dtype), size, step in zip(specs, sizes, rounded, strict=True):
        views.append(buf[offset : offset + size].view(dtype).reshape(shape))
        offset += step
    return views


def fill_random(view: torch.Tensor, seed: int) -> None:
    """Random bytes (0/1 for bool, whose other bytes are not valid values)."""
    raw = view.reshape(-1).view(torch.uint8)
    generator = torch.Generator().manual_seed(seed)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=generator))
    if view.dtype == torch.bool:
        raw.bitwise_and_(1)


#: The fast private path or the public fallback inside a ``with`` block.
handoff_path = _dlpack.forced_path


def test_carved_views_are_aligned_and_disjoint():
    views = carve([((3,), torch.float32), ((0,), torch.int8), ((5, 7), torch.bfloat16)])
    spans = sorted((v.data_ptr(), v.data_ptr() + v.nbytes) for v in views if v.numel())
    assert all(start % ALIGNMENT == 0 for start, _ in spans)
    assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans))
    assert [tuple(v.shape) for v in views] == [(3,), (0,), (5, 7)]


def test_handoff_path_restores_the_switch():
    saved = _dlpack.use_private_path
    with handoff_path(private=False):
        assert _dlpack.use_private_path is False
    assert _dlpack.use_private_path is saved


def test_a_copy_where_dlpack_promised_an_alias_is_refused_both_ways(monkeypatch):
    """Should a DLPack import or a host view ever copy, the handoff refuses the copy (import)
    or aliases the buffer another way (export): zero-copy is what it promises."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    real = jax.dlpack.from_dlpack
    monkeypatch.setattr(jax.dlpack, "from_dlpack", lambda t, copy=False: jnp.array(real(t)))
    with handoff_path(private=False):
        try:
            interop.to_jax(torch.ones(8))
        except interop.errors.ZeroCopyError as err:
            assert "returned a copy" in str(err)
        else:
            raise AssertionError("a copied import was handed out as an alias")
    monkeypatch.undo()
    array = jnp.arange(8.0)
    monkeypatch.setattr(np, "asarray", lambda a, *args, **kw: np.array(a, copy=True))
    with handoff_path(private=False):
        tensor = interop.to_torch(array)
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()  # the buffer itself, not a copy
