"""interop: the imperative shell of functional-ws (torch façade, JAX handoff).

It holds a :class:`functional_ws.WorkspaceState` and the device buffers, carries out the
growth the pure core plans, and hands out typed views.
"""

from functional_ws import InvalidSlotError as InvalidSlotError
from functional_ws import InvalidSpecError as InvalidSpecError
from functional_ws import LaneNotConfiguredError as LaneNotConfiguredError
from functional_ws import NotInitializedError as NotInitializedError
from functional_ws import PersistentKeyLockedError as PersistentKeyLockedError
from functional_ws import PersistentMismatchError as PersistentMismatchError
from functional_ws import UbatchNotConfiguredError as UbatchNotConfiguredError
from functional_ws import WorkspaceError as WorkspaceError
from functional_ws import WorkspaceLockedError as WorkspaceLockedError

from ._allocators import AllocationTypeError as AllocationTypeError
from ._allocators import AllocationValueError as AllocationValueError
from ._allocators import AllocatorError as AllocatorError
from ._allocators import AllocatorNotCallableError as AllocatorNotCallableError
from ._allocators import UnknownAllocatorError as UnknownAllocatorError
from ._context import current_slot as current_slot
from ._context import set_ubatch_provider as set_ubatch_provider
from ._context import use_workspace_lane as use_workspace_lane
from ._context import use_workspace_ubatch as use_workspace_ubatch
from ._device import GrowthDuringCaptureError as GrowthDuringCaptureError
from ._history import History as History
from ._history import Record as Record
from ._jax import jax_call as jax_call
from ._jax import to_jax as to_jax
from ._jax import to_torch as to_torch
from ._jax_config import configure_jax_for_sharing as configure_jax_for_sharing
from ._jax_config import warn_if_jax_preallocates as warn_if_jax_preallocates
from ._jax_errors import DeviceNotVisibleError as DeviceNotVisibleError
from ._jax_errors import GradientTrackedError as GradientTrackedError
from ._jax_errors import HandoffError as HandoffError
from ._jax_errors import JaxAlreadyStartedError as JaxAlreadyStartedError
from ._jax_errors import JaxPreallocationWarning as JaxPreallocationWarning
from ._jax_errors import JaxSettingError as JaxSettingError
from ._jax_errors import LazyViewError as LazyViewError
from ._jax_errors import MisalignedViewError as MisalignedViewError
from ._jax_errors import ShardedArrayError as ShardedArrayError
from ._jax_errors import UnsupportedDtypeError as UnsupportedDtypeError
from ._jax_errors import UnsupportedLayoutError as UnsupportedLayoutError
from ._jax_errors import X64DisabledError as X64DisabledError
from ._jax_errors import ZeroCopyError as ZeroCopyError
from ._manager import WorkspaceManager as WorkspaceManager
from ._module_api import current_workspace_manager as current_workspace_manager
from ._module_api import init_workspace_manager as init_workspace_manager
from ._module_api import is_workspace_manager_initialized as is_workspace_manager_initialized
from ._module_api import lock_workspace as lock_workspace
from ._module_api import reset_workspace_manager as reset_workspace_manager
from ._module_api import unlock_workspace as unlock_workspace
from ._stats import SlotStats as SlotStats
from ._stats import WorkspaceStats as WorkspaceStats

__all__ = [
    "AllocationTypeError",
    "AllocationValueError",
    "AllocatorError",
    "AllocatorNotCallableError",
    "DeviceNotVisibleError",
    "GradientTrackedError",
    "GrowthDuringCaptureError",
    "HandoffError",
    "History",
    "InvalidSlotError",
    "InvalidSpecError",
    "JaxAlreadyStartedError",
    "JaxPreallocationWarning",
    "JaxSettingError",
    "LaneNotConfiguredError",
    "LazyViewError",
    "MisalignedViewError",
    "NotInitializedError",
    "PersistentKeyLockedError",
    "PersistentMismatchError",
    "Record",
    "ShardedArrayError",
    "SlotStats",
    "UbatchNotConfiguredError",
    "UnknownAllocatorError",
    "UnsupportedDtypeError",
    "UnsupportedLayoutError",
    "WorkspaceError",
    "WorkspaceLockedError",
    "WorkspaceManager",
    "WorkspaceStats",
    "X64DisabledError",
    "ZeroCopyError",
    "configure_jax_for_sharing",
    "current_slot",
    "current_workspace_manager",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "jax_call",
    "lock_workspace",
    "reset_workspace_manager",
    "set_ubatch_provider",
    "to_jax",
    "to_torch",
    "unlock_workspace",
    "use_workspace_lane",
    "use_workspace_ubatch",
    "warn_if_jax_preallocates",
]
