"""The ``"jax"`` provider of ``WorkspaceManager(allocator="jax")``: each slot's buffer is a
JAX ``uint8`` array, seen by torch zero-copy through DLPack.

It implements the manager's allocator interface (``interop/_workspace/_providers.py``:
:class:`SlotAllocator`, :class:`Allocation`, :func:`check_allocation`), the one place the
bridge imports the manager's internals; the manager imports this module only when a
manager is made with ``allocator="jax"``, so a torch-only manager never imports JAX.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from .._device import aligned_block
from .._workspace._providers import Allocation, InUse, SlotAllocator, check_allocation
from ._dlpack import device_target
from ._handoff import to_torch

#: The alignment JAX's allocators give: 64 bytes on CPU, 256 on GPU (XLA's BFC allocator).
JAX_ALIGNMENT = {"cpu": 64, "cuda": 256}


def jax_block(nbytes: int, device: Any) -> jax.Array:
    """``nbytes`` zeroed bytes from JAX's allocator on JAX ``device`` (a ``uint8`` array)."""
    return jnp.zeros((nbytes,), dtype=jnp.uint8, device=device)


class JaxAllocator(SlotAllocator):
    """Each buffer is a JAX ``uint8`` array on the matching JAX device, seen through DLPack.

    The memory comes out of JAX's pool (on a GPU where JAX preallocated, out of the memory
    JAX already holds, not torch's caching allocator); torch sees it zero-copy through
    :func:`interop.to_torch`, which orders torch after the fill that created it, and whose
    tensor keeps the bytes alive even if the array is deleted.
    """

    name = "jax"

    def __init__(self, device: torch.device) -> None:
        self.jax_device = device_target(device).device  # refuses a device JAX cannot see

    def allocate(
        self,
        nbytes: int,
        device: torch.device,
        alignment: int,
        *,
        in_use: InUse = (),
        slot: tuple[int, int] | None = None,
        previous: int = 0,
    ) -> Allocation:
        arrays: list[jax.Array] = []

        def raw(n: int) -> torch.Tensor:
            arrays.clear()  # a retry lets the first array go before asking for the next
            arrays.append(jax_block(n, self.jax_device))
            return check_allocation(to_torch(arrays[0]), n, device, self, in_use=in_use)

        buffer = aligned_block(
            raw, nbytes, alignment, provider_alignment=JAX_ALIGNMENT.get(device.type)
        )
        return Allocation(buffer, nbytes, owner=arrays[0])  # the array behind it kept
