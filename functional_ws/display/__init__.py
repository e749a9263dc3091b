"""Presentation: the workspace as text, HTML and pictures, drawn from explicit inputs.

Everything here reads a :class:`~functional_ws.WorkspaceState` (and, optionally, the last
:class:`~functional_ws.Layout` and :class:`~functional_ws.Span` per slot that a shell
remembers) and never changes it. One picture model (:func:`slot_pictures`) feeds every
renderer, so the HTML and the matplotlib figure always agree. Importing this package makes
``str()`` and a notebook's display of a state, a layout, a span and a diff use the renderers
here (the value modules sit below this package and do not import it).

Example:
    >>> import numpy as np
    >>> import functional_ws as fws
    >>> from functional_ws.display import slot_pictures
    >>> s, layout = fws.acquire(fws.initial_state(), (0, 0), ((100,), np.dtype("float32")))
    >>> [g.kind for g in slot_pictures(s, {(0, 0): layout})[0].segments]
    ['view', 'padding']
"""

from .. import _public
from .._diff import Change, Diff
from .._layout import Layout, Span
from .._presenters import install_presenter
from .._sizing import Shortfall
from .._state import WorkspaceState
from .._trace import Trace
from .._trace_events import TraceEvent
from ._html import render_html as render_html
from ._picture import COLOURS as COLOURS
from ._picture import Segment as Segment
from ._picture import SlotPicture as SlotPicture
from ._picture import dtype_colour as dtype_colour
from ._picture import slot_pictures as slot_pictures
from ._plot import plot as plot
from ._sizing import event_text, shortfall_html, shortfall_text, trace_html, trace_text
from ._text import counted as counted
from ._text import exact_bytes as exact_bytes
from ._text import format_bytes as format_bytes
from ._text import render as render
from ._timeline import plot_timeline as plot_timeline
from ._timeline import timeline_html as timeline_html
from ._values import (
    change_text,
    diff_html,
    diff_text,
    layout_html,
    layout_text,
    span_html,
    span_text,
)

install_presenter(WorkspaceState, "text", render)
install_presenter(WorkspaceState, "html", render_html)
install_presenter(Layout, "text", layout_text)
install_presenter(Layout, "html", layout_html)
install_presenter(Span, "text", span_text)
install_presenter(Span, "html", span_html)
install_presenter(Change, "text", change_text)
install_presenter(Diff, "text", diff_text)
install_presenter(Diff, "html", diff_html)
install_presenter(Trace, "text", trace_text)
install_presenter(Trace, "html", trace_html)
install_presenter(TraceEvent, "text", event_text)
install_presenter(Shortfall, "text", shortfall_text)
install_presenter(Shortfall, "html", shortfall_html)

__all__ = [
    "COLOURS",
    "Segment",
    "SlotPicture",
    "counted",
    "dtype_colour",
    "exact_bytes",
    "format_bytes",
    "plot",
    "plot_timeline",
    "render",
    "render_html",
    "slot_pictures",
    "timeline_html",
]

_public.publish(__name__, globals(), __all__)
