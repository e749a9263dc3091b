"""Presentation: the workspace as text, HTML and pictures, drawn from explicit inputs.

Everything here reads a :class:`~functional_ws.WorkspaceState` (and, optionally, the last
:class:`~functional_ws.Layout` and :class:`~functional_ws.Span` per slot that a shell
remembers) and never changes it. One picture model (:func:`slot_pictures`) feeds every
renderer, so the HTML and the matplotlib figure always agree. Importing this package makes
``str(state)`` and a notebook's display of a state use :func:`render` and
:func:`render_html` (the state module sits below this package and does not import it).

Example:
    >>> import numpy as np
    >>> import functional_ws as fws
    >>> from functional_ws.display import slot_pictures
    >>> s, layout = fws.acquire(fws.initial_state(), (0, 0), ((100,), np.dtype("float32")))
    >>> [g.kind for g in slot_pictures(s, {(0, 0): layout})[0].segments]
    ['view', 'padding']
"""

from .._state import install_presenter
from ._html import render_html as render_html
from ._picture import COLOURS as COLOURS
from ._picture import Segment as Segment
from ._picture import SlotPicture as SlotPicture
from ._picture import dtype_colour as dtype_colour
from ._picture import slot_pictures as slot_pictures
from ._plot import plot as plot
from ._text import format_bytes as format_bytes
from ._text import render as render

install_presenter("text", render)
install_presenter("html", render_html)

__all__ = [
    "COLOURS",
    "Segment",
    "SlotPicture",
    "dtype_colour",
    "format_bytes",
    "plot",
    "render",
    "render_html",
    "slot_pictures",
]
