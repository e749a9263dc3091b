"""functional_ws: the pure core of a functional port of vLLM's ``WorkspaceManager``.

The manager's whole state is an immutable pytree with no leaves (:class:`WorkspaceState`);
pure functions take a state and return a new state plus a plan (byte offsets and the
growth a shell must carry out). Nothing here imports torch, touches device memory or
keeps globals. The torch shell lives in the ``interop`` package.

Submodules: :mod:`functional_ws.display` (text, HTML, pictures),
:mod:`functional_ws.fast_paths`
(the memoised hot path for shells) and :mod:`functional_ws.testing` (Hypothesis strategies
and a state machine; needs the ``testing`` extra).

Example:
    >>> import numpy as np
    >>> import functional_ws as fws
    >>> s = fws.initial_state()
    >>> s, layout = fws.acquire(s, (0, 0), ((64,), np.dtype("float32")), ((3,), np.dtype("int8")))
    >>> layout.offsets, s.capacity((0, 0))
    ((0, 256), 512)
"""

from . import _public
from . import display as display
from . import fast_paths as fast_paths
from ._diff import Change as Change
from ._diff import Diff as Diff
from ._diff import diff as diff
from ._errors import CapacityLimitError as CapacityLimitError
from ._errors import InvalidConfigError as InvalidConfigError
from ._errors import InvalidConfigTypeError as InvalidConfigTypeError
from ._errors import InvalidDtypeError as InvalidDtypeError
from ._errors import InvalidPlanError as InvalidPlanError
from ._errors import InvalidRequestError as InvalidRequestError
from ._errors import InvalidShapeError as InvalidShapeError
from ._errors import InvalidSlotError as InvalidSlotError
from ._errors import InvalidSlotTypeError as InvalidSlotTypeError
from ._errors import InvalidSpecError as InvalidSpecError
from ._errors import InvalidTraceError as InvalidTraceError
from ._errors import LaneNotConfiguredError as LaneNotConfiguredError
from ._errors import NegativeDimError as NegativeDimError
from ._errors import PersistentKeyLockedError as PersistentKeyLockedError
from ._errors import TraceMismatchError as TraceMismatchError
from ._errors import TraceTypeError as TraceTypeError
from ._errors import UbatchNotConfiguredError as UbatchNotConfiguredError
from ._errors import UnhashableKeyError as UnhashableKeyError
from ._errors import WorkspaceError as WorkspaceError
from ._errors import WorkspaceLockedError as WorkspaceLockedError
from ._growth import after_failed_growth as after_failed_growth
from ._growth import apply_plan as apply_plan
from ._growth import rebase as rebase
from ._growth import reserve as reserve
from ._layout import Growth as Growth
from ._layout import Layout as Layout
from ._layout import Span as Span
from ._ops import acquire as acquire
from ._ops import claim as claim
from ._ops import forget_retained as forget_retained
from ._ops import initial_state as initial_state
from ._ops import lock as lock
from ._ops import retain as retain
from ._ops import unlock as unlock
from ._plan import from_dict as from_dict
from ._plan import to_dict as to_dict
from ._sizing import Shortfall as Shortfall
from ._sizing import replay as replay
from ._sizing import worst_case as worst_case
from ._spec import ViewSpec as ViewSpec
from ._state import GrowthPolicy as GrowthPolicy
from ._state import Slot as Slot
from ._state import SlotState as SlotState
from ._state import WorkspaceState as WorkspaceState
from ._trace import Trace as Trace
from ._trace_events import ReprKey as ReprKey
from ._trace_events import TraceEvent as TraceEvent
from .display import plot as plot
from .display import render as render
from .display import render_html as render_html

__all__ = [
    "CapacityLimitError",
    "Change",
    "Diff",
    "Growth",
    "GrowthPolicy",
    "InvalidConfigError",
    "InvalidConfigTypeError",
    "InvalidDtypeError",
    "InvalidPlanError",
    "InvalidRequestError",
    "InvalidShapeError",
    "InvalidSlotError",
    "InvalidSlotTypeError",
    "InvalidSpecError",
    "InvalidTraceError",
    "LaneNotConfiguredError",
    "Layout",
    "NegativeDimError",
    "PersistentKeyLockedError",
    "ReprKey",
    "Shortfall",
    "Slot",
    "SlotState",
    "Span",
    "Trace",
    "TraceEvent",
    "TraceMismatchError",
    "TraceTypeError",
    "UbatchNotConfiguredError",
    "UnhashableKeyError",
    "ViewSpec",
    "WorkspaceError",
    "WorkspaceLockedError",
    "WorkspaceState",
    "acquire",
    "after_failed_growth",
    "apply_plan",
    "claim",
    "diff",
    "display",
    "fast_paths",
    "forget_retained",
    "from_dict",
    "initial_state",
    "lock",
    "plot",
    "rebase",
    "render",
    "render_html",
    "replay",
    "reserve",
    "retain",
    "to_dict",
    "unlock",
    "worst_case",
]

_public.publish(__name__, globals(), __all__)
