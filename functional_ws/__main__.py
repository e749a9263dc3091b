"""``python -m functional_ws``: the demo (``make demo``)."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Run the demo."""
    parser = argparse.ArgumentParser(prog="python -m functional_ws", description=__doc__)
    parser.parse_args(argv)
    from ._demo import core_demo

    core_demo()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
