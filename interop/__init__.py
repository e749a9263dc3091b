"""interop: the imperative shell of functional-ws (torch façade, JAX handoff).

It holds a :class:`functional_ws.WorkspaceState` and the device buffers, carries out the
growth the pure core plans, and hands out typed views.
"""

import sys as _sys

from functional_ws import CapacityLimitError as CapacityLimitError
from functional_ws import InvalidConfigError as InvalidConfigError
from functional_ws import InvalidPlanError as InvalidPlanError
from functional_ws import InvalidSlotError as InvalidSlotError
from functional_ws import InvalidSpecError as InvalidSpecError
from functional_ws import LaneNotConfiguredError as LaneNotConfiguredError
from functional_ws import PersistentKeyLockedError as PersistentKeyLockedError
from functional_ws import UbatchNotConfiguredError as UbatchNotConfiguredError
from functional_ws import WorkspaceError as WorkspaceError
from functional_ws import WorkspaceLockedError as WorkspaceLockedError

from . import _module_api
from . import errors as errors  # every exception class, as interop.errors.X
from ._context import current_slot as current_slot
from ._context import dbo_current_ubatch_id as dbo_current_ubatch_id
from ._context import set_ubatch_provider as set_ubatch_provider
from ._context import use_workspace_lane as use_workspace_lane
from ._context import use_workspace_ubatch as use_workspace_ubatch
from ._context import use_workspace_ubatch_id as use_workspace_ubatch_id
from ._errors import AllocationDeviceError as AllocationDeviceError
from ._errors import AllocationDtypeError as AllocationDtypeError
from ._errors import AllocationLayoutError as AllocationLayoutError
from ._errors import AllocationNegativeBitError as AllocationNegativeBitError
from ._errors import AllocationNotTensorError as AllocationNotTensorError
from ._errors import AllocationOverlapError as AllocationOverlapError
from ._errors import AllocationShapeError as AllocationShapeError
from ._errors import AllocationSizeError as AllocationSizeError
from ._errors import AllocationTypeError as AllocationTypeError
from ._errors import AllocationValueError as AllocationValueError
from ._errors import AllocatorError as AllocatorError
from ._errors import AllocatorNotCallableError as AllocatorNotCallableError
from ._errors import ConjugateBitError as ConjugateBitError
from ._errors import DeletedArrayError as DeletedArrayError
from ._errors import DeviceNotVisibleError as DeviceNotVisibleError
from ._errors import DeviceUnavailableError as DeviceUnavailableError
from ._errors import FunctionNotCallableError as FunctionNotCallableError
from ._errors import GradientTrackedError as GradientTrackedError
from ._errors import GrowthDuringCaptureError as GrowthDuringCaptureError
from ._errors import HandoffError as HandoffError
from ._errors import JaxAlreadyStartedError as JaxAlreadyStartedError
from ._errors import JaxPreallocationWarning as JaxPreallocationWarning
from ._errors import JaxSettingError as JaxSettingError
from ._errors import LazyViewError as LazyViewError
from ._errors import MisalignedViewError as MisalignedViewError
from ._errors import NegativeBitError as NegativeBitError
from ._errors import NotInitializedError as NotInitializedError
from ._errors import PersistentMismatchError as PersistentMismatchError
from ._errors import ShardedArrayError as ShardedArrayError
from ._errors import StreamDeviceError as StreamDeviceError
from ._errors import StreamTypeError as StreamTypeError
from ._errors import UnknownAllocatorError as UnknownAllocatorError
from ._errors import UnknownDeviceError as UnknownDeviceError
from ._errors import UnsupportedDtypeError as UnsupportedDtypeError
from ._errors import UnsupportedLayoutError as UnsupportedLayoutError
from ._errors import UnsupportedPytreeError as UnsupportedPytreeError
from ._errors import X64DisabledError as X64DisabledError
from ._errors import ZeroCopyError as ZeroCopyError
from ._facade import WorkspaceManager as WorkspaceManager
from ._history import History as History
from ._history import Record as Record
from ._jax import to_jax as to_jax
from ._jax import to_torch as to_torch
from ._jax_call import jax_call as jax_call
from ._jax_config import configure_jax_for_sharing as configure_jax_for_sharing
from ._module_api import current_workspace_manager as current_workspace_manager
from ._module_api import init_workspace_manager as init_workspace_manager
from ._module_api import is_workspace_manager_initialized as is_workspace_manager_initialized
from ._module_api import lock_workspace as lock_workspace
from ._module_api import reserve_workspace as reserve_workspace
from ._module_api import reset_workspace_manager as reset_workspace_manager
from ._module_api import unlock_workspace as unlock_workspace
from ._stats import SlotStats as SlotStats
from ._stats import WorkspaceStats as WorkspaceStats

__all__ = [
    "AllocationDeviceError",
    "AllocationDtypeError",
    "AllocationLayoutError",
    "AllocationNegativeBitError",
    "AllocationNotTensorError",
    "AllocationOverlapError",
    "AllocationShapeError",
    "AllocationSizeError",
    "AllocationTypeError",
    "AllocationValueError",
    "AllocatorError",
    "AllocatorNotCallableError",
    "CapacityLimitError",
    "ConjugateBitError",
    "DeletedArrayError",
    "DeviceNotVisibleError",
    "DeviceUnavailableError",
    "FunctionNotCallableError",
    "GradientTrackedError",
    "GrowthDuringCaptureError",
    "HandoffError",
    "History",
    "InvalidConfigError",
    "InvalidPlanError",
    "InvalidSlotError",
    "InvalidSpecError",
    "JaxAlreadyStartedError",
    "JaxPreallocationWarning",
    "JaxSettingError",
    "LaneNotConfiguredError",
    "LazyViewError",
    "MisalignedViewError",
    "NegativeBitError",
    "NotInitializedError",
    "PersistentKeyLockedError",
    "PersistentMismatchError",
    "Record",
    "ShardedArrayError",
    "SlotStats",
    "StreamDeviceError",
    "StreamTypeError",
    "UbatchNotConfiguredError",
    "UnknownAllocatorError",
    "UnknownDeviceError",
    "UnsupportedDtypeError",
    "UnsupportedLayoutError",
    "UnsupportedPytreeError",
    "WorkspaceError",
    "WorkspaceLockedError",
    "WorkspaceManager",
    "WorkspaceStats",
    "X64DisabledError",
    "ZeroCopyError",
    "configure_jax_for_sharing",
    "current_slot",
    "current_workspace_manager",
    "dbo_current_ubatch_id",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "jax_call",
    "lock_workspace",
    "reserve_workspace",
    "reset_workspace_manager",
    "set_ubatch_provider",
    "to_jax",
    "to_torch",
    "unlock_workspace",
    "use_workspace_lane",
    "use_workspace_ubatch",
    "use_workspace_ubatch_id",
]

#: The process-wide manager (vLLM's module attribute: its tests patch it). The module-level
#: functions read it when called; ``init_workspace_manager`` sets it.
_manager: WorkspaceManager | None = None

# The package's class tells the slot selection when dbo_current_ubatch_id is replaced.
_sys.modules[__name__].__class__ = _module_api.WorkspaceModule
