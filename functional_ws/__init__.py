"""functional_ws: the pure core of a functional port of vLLM's ``WorkspaceManager``.

The manager's whole state is an immutable pytree (:class:`WorkspaceState`); pure functions
take a state and return a new state plus a layout (byte offsets and the growth a shell must
carry out). Nothing here imports torch, touches device memory or keeps globals. The torch
shell lives in the ``interop`` package.

Example:
    >>> import numpy as np
    >>> import functional_ws as fws
    >>> s = fws.initial_state()
    >>> s, layout = fws.acquire(s, (0, 0), ((64,), np.dtype("float32")), ((3,), np.dtype("int8")))
    >>> layout.offsets, s.capacity((0, 0))
    ((0, 256), 512)
"""

from ._diff import Change as Change
from ._diff import Diff as Diff
from ._diff import diff as diff
from ._errors import InvalidSlotError as InvalidSlotError
from ._errors import InvalidSpecError as InvalidSpecError
from ._errors import LaneNotConfiguredError as LaneNotConfiguredError
from ._errors import NotInitializedError as NotInitializedError
from ._errors import PersistentKeyLockedError as PersistentKeyLockedError
from ._errors import PersistentMismatchError as PersistentMismatchError
from ._errors import UbatchNotConfiguredError as UbatchNotConfiguredError
from ._errors import WorkspaceError as WorkspaceError
from ._errors import WorkspaceLockedError as WorkspaceLockedError
from ._html import render_html as render_html
from ._layout import Growth as Growth
from ._layout import Layout as Layout
from ._layout import Span as Span
from ._ops import acquire as acquire
from ._ops import claim as claim
from ._ops import growth_between as growth_between
from ._ops import initial_state as initial_state
from ._ops import lock as lock
from ._ops import replay_acquire as replay_acquire
from ._ops import replay_retain as replay_retain
from ._ops import reserve as reserve
from ._ops import retain as retain
from ._ops import unlock as unlock
from ._picture import Segment as Segment
from ._picture import SlotPicture as SlotPicture
from ._picture import slot_pictures as slot_pictures
from ._plan import from_dict as from_dict
from ._plan import to_dict as to_dict
from ._plot import plot as plot
from ._render import format_bytes as format_bytes
from ._render import render as render
from ._spec import ViewSpec as ViewSpec
from ._spec import make_spec as make_spec
from ._spec import round_down as round_down
from ._spec import round_up as round_up
from ._state import GrowthPolicy as GrowthPolicy
from ._state import Slot as Slot
from ._state import SlotState as SlotState
from ._state import WorkspaceState as WorkspaceState

__all__ = [
    "Change",
    "Diff",
    "Growth",
    "GrowthPolicy",
    "InvalidSlotError",
    "InvalidSpecError",
    "LaneNotConfiguredError",
    "Layout",
    "NotInitializedError",
    "PersistentKeyLockedError",
    "PersistentMismatchError",
    "Segment",
    "Slot",
    "SlotPicture",
    "SlotState",
    "Span",
    "UbatchNotConfiguredError",
    "ViewSpec",
    "WorkspaceError",
    "WorkspaceLockedError",
    "WorkspaceState",
    "acquire",
    "claim",
    "diff",
    "format_bytes",
    "from_dict",
    "growth_between",
    "initial_state",
    "lock",
    "make_spec",
    "plot",
    "render",
    "render_html",
    "replay_acquire",
    "replay_retain",
    "reserve",
    "retain",
    "round_down",
    "round_up",
    "slot_pictures",
    "to_dict",
    "unlock",
]
