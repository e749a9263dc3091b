"""The shell's fast paths: a plan replayed, a new request planned in plain values.

A plan is a pure function of (state, slot, request), so a shell can keep the
:class:`~functional_ws.Layout` (or :class:`~functional_ws.Span`) of a request and, on the
next identical request, replay it against the current state instead of validating and
laying the request out again. The replay equals the full transition on every state (a
property test pins this); it is only cheaper.

The identity protocol:

* a replay that changes nothing returns the very state object it was given;
* a replay whose slot already fits returns the very plan object it was given (when that
  plan carries no growth): **the same plan object means no growth** and the same offsets,
  so the views a shell made for it are still good;
* otherwise it returns a new plan (with the growth to carry out, or a moved span).

And for a request never seen before, :func:`fit` plans views from their byte counts alone:
it is the body of :func:`functional_ws.acquire` (which validates ``(shape, dtype)`` pairs
and then calls it), for a shell that validated its requests itself and carves views it
will not keep. :func:`fit_plain` adds the :class:`~functional_ws.Layout` for a request the
shell validated and will keep (the plan a replay needs).

Example:
    >>> import numpy as np
    >>> import functional_ws as fws
    >>> from functional_ws.fast_paths import replay_acquire
    >>> s, layout = fws.acquire(fws.initial_state(), (0, 0), ((16,), np.dtype("int8")))
    >>> layout = layout.without_growth()
    >>> again, same = replay_acquire(s, layout)
    >>> again is s, same is layout
    (True, True)
"""

from . import _public
from ._ops import fit as fit
from ._ops import fit_plain as fit_plain
from ._ops import interchangeable_keys as interchangeable_keys
from ._ops import layout_of as layout_of
from ._ops import replay_acquire as replay_acquire
from ._ops import replay_retain as replay_retain

__all__ = [
    "fit",
    "fit_plain",
    "interchangeable_keys",
    "layout_of",
    "replay_acquire",
    "replay_retain",
]

_public.publish(__name__, globals(), __all__)
