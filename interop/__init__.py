"""interop: the imperative shell of functional-ws (torch façade, JAX handoff).

It holds a :class:`functional_ws.WorkspaceState` and the device buffers, carries out the
growth the pure core plans, and hands out typed views.
"""

import sys as _sys

from functional_ws import CapacityLimitError as CapacityLimitError
from functional_ws import InvalidSpecError as InvalidSpecError
from functional_ws import WorkspaceError as WorkspaceError
from functional_ws import WorkspaceLockedError as WorkspaceLockedError
from functional_ws import _public

from . import _context, _module_api
from . import errors as errors
from ._bridge._handoff import to_jax as to_jax
from ._bridge._handoff import to_torch as to_torch
from ._bridge._jax_call import jax_call as jax_call
from ._bridge._jax_config import configure_jax_for_sharing as configure_jax_for_sharing
from ._bridge._torch_call import torch_call as torch_call
from ._context import current_slot as current_slot
from ._context import dbo_current_ubatch_id as dbo_current_ubatch_id
from ._context import set_ubatch_provider as set_ubatch_provider
from ._context import use_workspace_lane as use_workspace_lane
from ._context import use_workspace_ubatch as use_workspace_ubatch
from ._context import use_workspace_ubatch_id as use_workspace_ubatch_id
from ._errors import HandoffError as HandoffError
from ._module_api import _VIEW_ALIGNMENT as _VIEW_ALIGNMENT
from ._module_api import current_workspace_manager as current_workspace_manager
from ._module_api import init_workspace_manager as init_workspace_manager
from ._module_api import is_workspace_manager_initialized as is_workspace_manager_initialized
from ._module_api import lock_workspace as lock_workspace
from ._module_api import reserve_workspace as reserve_workspace
from ._module_api import reset_workspace_manager as reset_workspace_manager
from ._module_api import unlock_workspace as unlock_workspace
from ._workspace._facade import WorkspaceManager as WorkspaceManager
from ._workspace._history import History as History
from ._workspace._history import Record as Record
from ._workspace._stats import SlotStats as SlotStats
from ._workspace._stats import WorkspaceStats as WorkspaceStats

__all__ = [
    "CapacityLimitError",
    "HandoffError",
    "History",
    "InvalidSpecError",
    "Record",
    "SlotStats",
    "WorkspaceError",
    "WorkspaceLockedError",
    "WorkspaceManager",
    "WorkspaceStats",
    "configure_jax_for_sharing",
    "current_slot",
    "current_workspace_manager",
    "dbo_current_ubatch_id",
    "errors",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "jax_call",
    "lock_workspace",
    "reserve_workspace",
    "reset_workspace_manager",
    "set_ubatch_provider",
    "to_jax",
    "to_torch",
    "torch_call",
    "unlock_workspace",
    "use_workspace_lane",
    "use_workspace_ubatch",
    "use_workspace_ubatch_id",
]

_public.publish(__name__, globals(), __all__)

#: The process-wide manager (vLLM's module attribute: its tests patch it). The module-level
#: functions read it when called; ``init_workspace_manager`` sets it.
_manager: WorkspaceManager | None = None
#: vLLM's module attribute of the same name (a ``ContextVar`` of the lane; its tests read it).
_workspace_lane = _context.workspace_lane

# The package's class tells the slot selection when dbo_current_ubatch_id is replaced.
_sys.modules[__name__].__class__ = _module_api.WorkspaceModule
