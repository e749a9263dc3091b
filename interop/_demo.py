"""``make demo``: a warm-up of a realistic workload on the default device, then lock, the
picture, the JAX handoff with its zero-copy check, and statistics."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

import functional_ws as fws

from ._context import use_workspace_ubatch
from ._manager import WorkspaceManager


def default_device() -> torch.device:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def run_demo(device: torch.device | None = None, png: str | os.PathLike[str] | None = None) -> Path:
    """Print the demo and write the layout picture.

    Args:
        device: where the workspace lives; :func:`default_device` when ``None``.
        png: where to write the picture; a file in the temporary directory when ``None``.

    Returns:
        The PNG's path.
    """
    device = default_device() if device is None else device
    # An MoE layer's two scratch tensors (DeepSeek-V3 sizes: 8192 tokens x 7168 hidden, top-8),
    # an attention scratch and the sampler's logits kept in a retained tail; 16x fewer
    # tokens on CPU.
    tokens = 8192 if device.type == "cuda" else 512
    hidden, topk, heads, head_dim, vocab = 7168, 8, 16, 128, 129280
    moe = (((tokens, hidden), torch.bfloat16), ((tokens, topk), torch.int32))
    attention = (((tokens, heads * head_dim), torch.bfloat16),)
    tail = ((vocab,), torch.float32)
    ws = WorkspaceManager(device, num_ubatches=2)
    print(f"== functional-ws demo on {device}: 2 ubatches, {tokens} tokens each ==")

    def step(number: int) -> None:
        for ubatch in (0, 1):
            with use_workspace_ubatch(ubatch):
                hidden_states, _ids = ws.get_simultaneous(*moe)
                hidden_states.zero_()
                ws.get_simultaneous(*attention)
                logits, intact = ws.get_retained("sampler", *tail)
                if not intact:
                    logits.fill_(float(number))
        print(f"  step {number}: the sampler's tail survived the step: {intact}")

    print("warm-up without a reservation: the MoE scratch overwrites the tail each step")
    for number in range(2):
        step(number)
    print("reserve the MoE scratch and the tail side by side in every slot, then lock")
    print("(the reservation reallocates, so the first step after it writes the tail afresh)")
    ws.reserve([*moe, tail])
    ws.lock()
    for number in range(2, 4):
        step(number)
    print()
    print(fws.render(ws.state))
    try:
        with use_workspace_ubatch(0):
            ws.get_simultaneous(((2 * tokens, hidden), torch.bfloat16))
    except AssertionError as err:
        print(f"\nrefused while locked ({type(err).__name__}):\n  {err}")
    _jax_handoff(ws)
    print("\n" + str(ws.stats()))
    path = Path(png) if png is not None else Path(tempfile.gettempdir()) / "functional_ws.png"
    import matplotlib

    matplotlib.use("Agg")
    fws.plot(ws).savefig(path, dpi=120)
    print(f"\nlayout picture written to {path}")
    return path


def _jax_handoff(ws: WorkspaceManager) -> None:
    import jax.numpy as jnp

    from ._jax import to_jax

    with use_workspace_ubatch(1):
        (x,) = ws.get_simultaneous(((4, 1024), torch.float32))
    x.copy_(torch.arange(x.numel(), dtype=torch.float32).reshape(x.shape))
    array = to_jax(x)
    same = array.unsafe_buffer_pointer() == x.data_ptr()
    aligned = "aligned to 256" if x.data_ptr() % 256 == 0 else "NOT aligned to 256"
    print(f"\nJAX handoff: to_jax(view) shares the view's memory: {same} ({aligned})")
    print(f"  sum in JAX {float(jnp.sum(array)):.0f}, sum in torch {float(x.sum()):.0f}")
