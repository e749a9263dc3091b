"""``make demo``: a warm-up of a realistic workload on the default device, then lock, the
layout (as text, and as a picture where matplotlib is installed), the JAX handoff with its
zero-copy check, and statistics.

This module plays a user of the library: the refusal it provokes names its own line
(``interop._diagnostics`` counts it as the user's code).
"""

from __future__ import annotations

import importlib.util
import os
import string
import tempfile
from pathlib import Path
from typing import Any

import torch

import functional_ws as fws
from functional_ws.display import format_bytes, slot_pictures

from ._context import use_workspace_ubatch
from ._workspace._facade import WorkspaceManager

#: What to install for the picture; printed where matplotlib is missing.
PLOT_HINT = "pip install 'functional-ws[plot]'"
#: One character per segment kind in the text picture; views get letters A, B, C, ...
TEXT_MARKS = {"padding": "~", "requested": ":", "free": ".", "retained": "R", "clobbered": "X"}


def default_device() -> torch.device:
    """``cuda`` when torch sees a GPU, else ``cpu``.

    Example:
        >>> default_device().type in {"cuda", "cpu"}
        True
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def run_demo(
    device: torch.device | None = None, png: str | os.PathLike[str] | None = None
) -> Path | None:
    """Print the demo and write the layout picture.

    Args:
        device: where the workspace lives; :func:`default_device` when ``None``.
        png: where to write the picture; a file in the temporary directory when ``None``.
            A path without a suffix gets ``.png`` (the returned path says so).

    Returns:
        The PNG's path, or ``None`` when matplotlib is not installed (the demo then says
        how to install it; everything else runs as usual).

    Raises:
        ValueError: ``png`` names no ``.png`` file (another suffix, an existing folder, a
            folder that does not exist), before the demo runs.
    """
    png = None if png is None else png_path(png)
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
    ws.reserve(*moe, tail)
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
    print("\n" + text_picture(ws))
    return _write_picture(ws, png)


def text_picture(ws: WorkspaceManager, width: int = 64) -> str:
    """The layout picture in characters: a bar per slot, to scale, and what each letter is.

    Args:
        ws: the manager to draw (its state and the last request per slot).
        width: characters per bar; the widest slot fills it.

    Returns:
        A few lines per slot.

    Example:
        >>> ws = WorkspaceManager("cpu")
        >>> _ = ws.get_simultaneous(((100,), torch.float32), ((64,), torch.int8))
        >>> print(text_picture(ws, width=24))
        layout (one character = 32 B; ~ padding, : requested, . free, R retained, X clobbered):
          slot (0, 0) |AAAAAAAAAAAA~~~~BB~~~~~~| 768 B
            A torch.float32[100] @0
            B torch.int8[64] @512
    """
    pictures = slot_pictures(ws.state, ws.last_layouts, ws.last_spans)
    widest = max([p.capacity for p in pictures] + [1])
    legend = ", ".join(f"{mark} {kind}" for kind, mark in TEXT_MARKS.items())
    lines = [f"layout (one character = {format_bytes(-(-widest // width))}; {legend}):"]
    for p in pictures:
        views = [s for s in p.segments if s.kind == "view"]
        letters = {id(s): string.ascii_uppercase[i % 26] for i, s in enumerate(views)}
        marks = [letters.get(id(s)) or TEXT_MARKS[s.kind] for s in p.segments]
        cells = []
        for cell in range(round(width * p.capacity / widest)):
            middle = (cell + 0.5) * widest / width
            covering = [
                m for s, m in zip(p.segments, marks, strict=True) if s.start <= middle < s.end
            ]
            cells.append(covering[-1] if covering else " ")
        for view in views:  # a view narrower than a character still gets one
            if cells and letters[id(view)] not in cells:
                cells[min(view.start * width // widest, len(cells) - 1)] = letters[id(view)]
        lines.append(f"  slot {p.slot} |{''.join(cells)}| {format_bytes(p.capacity)}")
        lines.extend(f"    {letters[id(s)]} {s.label}" for s in views)
    return "\n".join(lines)


def figure_summary(figure: Any) -> str:
    """What a matplotlib figure shows, in words: titles, bars, lines, texts and legend.

    The data coordinates and colours the drawing code chose, not pixels, so two renderings
    of the same picture by different matplotlib versions summarise alike. The demo stores
    it in its PNG (the ``Description`` text chunk); ``tests/docs/test_demo.py`` compares it with
    a fresh drawing to tell that ``docs/layout.png`` is current.

    Args:
        figure: a matplotlib ``Figure``.

    Returns:
        One line per element.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> print(figure_summary(fws.plot(fws.initial_state())))
        axes "WorkspaceState: 1 ubatch x 1 lane, alignment 256, growth 'slot', unlocked" x=...
          yticks ['slot (0, 0)']
          bar 0 -0.3 0 0.6 #ffffff None
          text ' 0 B' at (0, 0) #000000
          legend ...
    """
    from matplotlib.colors import to_hex

    lines = []
    for ax in figure.axes:
        lines.append(f"axes {ax.get_title()!r} x={ax.get_xlabel()!r}")
        lines.append(f"  yticks {[t.get_text() for t in ax.get_yticklabels()]}")
        lines.extend(
            f"  bar {p.get_x():g} {p.get_y():g} {p.get_width():g} {p.get_height():g} "
            f"{to_hex(p.get_facecolor())} {p.get_hatch()}"
            for p in ax.patches
        )
        lines.extend(
            f"  line {[float(x) for x in line.get_xdata()]} {[float(y) for y in line.get_ydata()]}"
            f" {to_hex(line.get_color())}"
            for line in ax.lines
        )
        lines.extend(
            f"  text {t.get_text()!r} at ({t.get_position()[0]:g}, {t.get_position()[1]:g})"
            f" {to_hex(t.get_color())}"
            for t in ax.texts
        )
        legend = ax.get_legend()
        if legend is not None:
            for handle, label in zip(legend.legend_handles, legend.get_texts(), strict=True):
                colour = handle.get_facecolor() if hasattr(handle, "get_facecolor") else None
                colour = handle.get_color() if colour is None else colour
                lines.append(f"  legend {label.get_text()!r} {to_hex(colour)}")
    return "\n".join(lines)


def png_path(png: str | os.PathLike[str]) -> Path:
    """Where the picture goes for ``png``: ``.png`` added to a path without a suffix.

    Raises:
        ValueError: another suffix, an empty path, an existing folder, a folder that does
            not exist, or a file that cannot be written there, naming ``png``.
    """
    text = os.fspath(png)
    path = Path(text)
    if not text or text.endswith(("/", os.sep)) or path.is_dir():
        raise ValueError(f"png must name a file, got {text!r} (empty, or a folder).")
    if not path.suffix:
        path = path.with_suffix(".png")
    if path.suffix.lower() != ".png":
        raise ValueError(f"png must name a .png file, got {text!r}.")
    if not path.parent.is_dir():
        raise ValueError(f"png {text!r}: the folder {str(path.parent)!r} does not exist.")
    # Asked now, not after the demo ran; nothing there is opened or lost.
    if os.path.lexists(path):
        if not path.is_file():
            raise ValueError(
                f"png {text!r}: not a regular file (a link to nowhere, a pipe or a device)."
            )
        if not os.access(path, os.W_OK):
            raise ValueError(f"png {text!r}: the file cannot be written (no permission).")
        return path
    try:  # a new file: made and removed again
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise ValueError(f"png {text!r}: the file cannot be written there ({why}).") from None
    path.unlink(missing_ok=True)
    return path


def _write_picture(ws: WorkspaceManager, png: str | os.PathLike[str] | None) -> Path | None:
    if importlib.util.find_spec("matplotlib") is None:
        print(f"\nno layout picture: matplotlib is not installed ({PLOT_HINT})")
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no window on a desktop
    import matplotlib.pyplot as plt

    path = Path(png) if png is not None else Path(tempfile.gettempdir()) / "functional_ws.png"
    figure = ws.plot()
    figure.savefig(path, dpi=120, metadata={"Description": figure_summary(figure)})
    plt.close(figure)
    print(f"\nlayout picture written to {path}")
    return path


def _jax_handoff(ws: WorkspaceManager) -> None:
    import jax.numpy as jnp

    from ._bridge._handoff import to_jax

    with use_workspace_ubatch(1):
        (x,) = ws.get_simultaneous(((4, 1024), torch.float32))
    x.copy_(torch.arange(x.numel(), dtype=torch.float32).reshape(x.shape))
    array = to_jax(x)
    same = array.unsafe_buffer_pointer() == x.data_ptr()
    aligned = "aligned to 256" if x.data_ptr() % 256 == 0 else "NOT aligned to 256"
    print(f"\nJAX handoff: to_jax(view) shares the view's memory: {same} ({aligned})")
    print(f"  sum in JAX {float(jnp.sum(array)):.0f}, sum in torch {float(x.sum()):.0f}")
