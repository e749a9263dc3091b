"""What torch_call's tests share: the fixture that runs a test through each way in."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from interop._bridge import _torch_callback

F32 = jnp.float32


@pytest.fixture(params=["buffer_callback", "pure_callback"])
def path(request, monkeypatch):
    """Run the test through each way in: buffer_callback (zero-copy) and the fallback.

    Use it as ``@pytest.mark.usefixtures("path")`` after importing it into the module.
    """
    if request.param == "buffer_callback" and not _torch_callback.BUFFERS_AVAILABLE:
        pytest.skip("this jax has no usable jax.experimental.buffer_callback")
    monkeypatch.setattr(_torch_callback, "use_buffers", request.param == "buffer_callback")
    return request.param


def spec(shape, dtype=F32):
    """``jax.ShapeDtypeStruct(shape, dtype)``, float32 unless told."""
    return jax.ShapeDtypeStruct(shape, dtype)
