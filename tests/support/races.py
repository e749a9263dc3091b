"""A JAX computation slow enough for torch to write while it still reads: the races the
handoff's stream ordering must win (``tests/bridge/test_jax_call.py`` and the JAX
allocator's tests in ``tests/workspace/test_manager_allocators.py``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: Rounds of each race.
TRIALS = 20


def _slow_sum(x: jax.Array) -> jax.Array:
    """About 20 ms on a 2-core CPU: long enough for torch to write while JAX still reads."""
    return jax.lax.fori_loop(0, 20, lambda i, acc: acc + jnp.sin(x * i).sum(), 0.0)


slow_sum = jax.jit(_slow_sum)
