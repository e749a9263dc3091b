"""What torch_call's tests share: the fixture that runs a test through each way in."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

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


def bridge_tensor_locals(err: BaseException) -> list[str]:
    """The names of tensors held by a frame of the library that ``err``'s traceback
    reaches (its frames, and the frames that called them): what a failure kept, or read in
    a debugger, leads to (tensors over XLA's buffers, which XLA reuses, must not be)."""
    frames, tb = [], err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    found: list[str] = []
    seen: set[int] = set()
    for frame in frames:
        while frame is not None and id(frame) not in seen:
            seen.add(id(frame))
            if "interop" in frame.f_code.co_filename:
                found += [
                    f"{frame.f_code.co_name}:{name}"
                    for name, value in frame.f_locals.items()
                    if isinstance(value, torch.Tensor)
                    or (
                        isinstance(value, (list, tuple))
                        and any(isinstance(v, torch.Tensor) for v in value)
                    )
                ]
            frame = frame.f_back
    return found
