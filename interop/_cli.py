"""The command line: ``python -m interop`` and the ``functional-ws`` console script.

Both run the demo (:func:`interop._demo.run_demo`). The benchmarks are not offered here: they
live in the repository's ``benchmarks/`` folder, not in the installed package; in a clone,
``make bench`` runs them.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

DESCRIPTION = """\
The functional-ws demo: an MoE-style workload warms up a workspace of two ubatch slots,
reserves the worst case, locks, shows the layout and a refused growth, hands a view to JAX
(checking it is zero-copy) and prints statistics.

examples:
  %(prog)s
      the demo on cuda when torch sees a GPU, else on cpu
  %(prog)s --device cpu --png layout.png
      on the CPU, with the layout picture in layout.png
"""

EPILOG = """\
The picture needs matplotlib (pip install 'functional-ws[plot]'); without it the demo
prints the layout as text. The benchmarks live in the repository: run make bench in a clone.
"""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The demo's argument parser.

    Args:
        prog: the command's name in ``--help``; ``None`` takes it from ``sys.argv[0]`` (the
            console script's name, ``functional-ws``).

    Returns:
        A parser whose help keeps the example lines as written.

    Example:
        >>> build_parser("python -m interop").parse_args(["--device", "cpu"])
        Namespace(device=device(type='cpu'), png=None)
    """
    parser = argparse.ArgumentParser(
        prog=prog if prog is not None else os.path.basename(sys.argv[0]),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--device",
        default=None,
        type=_torch_device,
        help="torch device for the workspace (default: cuda, else cpu)",
    )
    parser.add_argument(
        "--png",
        default=None,
        type=_png,
        metavar="PATH",
        help="where to write the layout picture, a .png file (default: a file in the "
        "temporary directory)",
    )
    return parser


def _torch_device(value: str) -> Any:
    import torch

    try:
        device = torch.device(value)
    except RuntimeError as err:
        raise argparse.ArgumentTypeError(f"{value!r} is not a torch device ({err})") from None
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{value!r}: the demo runs on cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{value!r}: this torch sees no CUDA device")
    return device


def _png(value: str) -> Any:
    from ._demo import png_path

    try:
        return png_path(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the demo from the command line.

    Args:
        argv: the arguments; ``None`` reads ``sys.argv[1:]``.
        prog: the command's name in ``--help`` and errors (see :func:`build_parser`).

    Returns:
        The exit status: 0 when the demo ran to the end and wrote what was asked, 1 when
        ``--png`` was given but matplotlib is missing (the rest of the demo still runs).

    Raises:
        SystemExit: for ``--help`` and for bad arguments (status 2), as argparse does.
    """
    args = build_parser(prog).parse_args(argv)
    from ._demo import run_demo

    picture = run_demo(args.device, args.png)
    if picture is None and args.png is not None:
        print(f"{build_parser(prog).prog}: no picture written to {args.png}", file=sys.stderr)
        return 1
    return 0
