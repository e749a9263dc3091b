"""``python -m interop``: the demo (see :mod:`interop._cli`)."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m interop"))
