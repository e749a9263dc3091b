"""Figures that are shown once: made without pyplot, displayed by their own PNG.

A figure made with ``pyplot`` stays on pyplot's list of open figures, and Jupyter's inline
backend shows every figure on that list at the end of a cell: a plotting function that
returns such a figure as the cell's last line is shown twice. These figures are not on the
list; in a notebook they show once, as the cell's result, through ``_repr_png_`` (or the
inline backend's formatter for figures, where one is installed), whatever the backend; in a
script they are saved with ``fig.savefig(path)``.
"""

from __future__ import annotations

import functools
import io
from typing import Any

PLOT_EXTRA = "pip install 'functional-ws[plot]'"


def literal(text: str) -> str:
    """``text`` as matplotlib draws it literally: its ``$`` escaped, so that a key or a
    call's text is never read as mathtext (``'$x$'`` drawn as an italic x, ``'$^$'`` an
    error).

    Example:
        >>> print(literal("get_retained('$^$', ...)"))
        get_retained('\\$^\\$', ...)
    """
    return text.replace("$", r"\$")


def new_figure(figsize: tuple[float, float], who: str) -> Any:
    """A matplotlib ``Figure`` of ``figsize`` inches that pyplot does not know.

    Args:
        figsize: width and height in inches.
        who: the function asking, named in the error when matplotlib is missing.

    Returns:
        A :class:`matplotlib.figure.Figure` (a subclass that displays itself as a PNG).

    Raises:
        ImportError: matplotlib is not installed (naming the extra to install).

    Example:
        >>> fig = new_figure((4, 2), "example")
        >>> import matplotlib.pyplot as plt
        >>> fig in [plt.figure(n) for n in plt.get_fignums()]
        False
        >>> fig._repr_png_()[:4]
        b'\\x89PNG'
    """
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError as err:
        raise ImportError(f"{who} needs matplotlib, which is not installed: {PLOT_EXTRA}") from err
    return _figure_class()(figsize=figsize)


@functools.cache
def _figure_class() -> type:
    """The Figure subclass, made once (matplotlib is imported only when a figure is)."""
    from matplotlib.figure import Figure

    class ShownFigure(Figure):
        """A matplotlib figure that a notebook shows as a PNG, once."""

        def _repr_png_(self) -> bytes:
            buffer = io.BytesIO()
            self.savefig(buffer, format="png", dpi=100)
            return buffer.getvalue()

    return ShownFigure
