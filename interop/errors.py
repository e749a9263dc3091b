"""Every exception class :mod:`interop` raises or re-exports, in one namespace (as
``jax.errors``).

Each class subclasses :class:`functional_ws.WorkspaceError` and the builtin the peer API
raises for the same failure, so existing ``except`` clauses keep working: every handoff
refusal (``to_jax``, ``to_torch``, ``jax_call``) is a ``BufferError``, a locked refusal an
``AssertionError``, a bad request a ``ValueError``. The core's errors are the very classes
:mod:`functional_ws` exports. The top level :mod:`interop` keeps the few that callers catch
most: :class:`WorkspaceError` (everything), :class:`WorkspaceLockedError`,
:class:`CapacityLimitError`, :class:`InvalidSpecError` and :class:`HandoffError`.

Example:
    >>> import interop.errors
    >>> issubclass(interop.errors.UnsupportedLayoutError, BufferError)
    True
    >>> interop.errors.WorkspaceLockedError is interop.WorkspaceLockedError
    True
"""

from functional_ws import CapacityLimitError as CapacityLimitError
from functional_ws import InvalidConfigError as InvalidConfigError
from functional_ws import InvalidConfigTypeError as InvalidConfigTypeError
from functional_ws import InvalidDtypeError as InvalidDtypeError
from functional_ws import InvalidPlanError as InvalidPlanError
from functional_ws import InvalidRequestError as InvalidRequestError
from functional_ws import InvalidShapeError as InvalidShapeError
from functional_ws import InvalidSlotError as InvalidSlotError
from functional_ws import InvalidSlotTypeError as InvalidSlotTypeError
from functional_ws import InvalidSpecError as InvalidSpecError
from functional_ws import InvalidTraceError as InvalidTraceError
from functional_ws import LaneNotConfiguredError as LaneNotConfiguredError
from functional_ws import NegativeDimError as NegativeDimError
from functional_ws import PersistentKeyLockedError as PersistentKeyLockedError
from functional_ws import TraceMismatchError as TraceMismatchError
from functional_ws import TraceTypeError as TraceTypeError
from functional_ws import UbatchNotConfiguredError as UbatchNotConfiguredError
from functional_ws import UnhashableKeyError as UnhashableKeyError
from functional_ws import WorkspaceError as WorkspaceError
from functional_ws import WorkspaceLockedError as WorkspaceLockedError
from functional_ws import _public

from ._errors import AllocationDeviceError as AllocationDeviceError
from ._errors import AllocationDtypeError as AllocationDtypeError
from ._errors import AllocationLayoutError as AllocationLayoutError
from ._errors import AllocationNegativeBitError as AllocationNegativeBitError
from ._errors import AllocationNotStridedError as AllocationNotStridedError
from ._errors import AllocationNotTensorError as AllocationNotTensorError
from ._errors import AllocationOverlapError as AllocationOverlapError
from ._errors import AllocationShapeError as AllocationShapeError
from ._errors import AllocationSizeError as AllocationSizeError
from ._errors import AllocationStorageOffsetError as AllocationStorageOffsetError
from ._errors import AllocationSuppressedError as AllocationSuppressedError
from ._errors import AllocationTypeError as AllocationTypeError
from ._errors import AllocationValueError as AllocationValueError
from ._errors import AllocatorError as AllocatorError
from ._errors import AllocatorNotCallableError as AllocatorNotCallableError
from ._errors import ArgumentTypeError as ArgumentTypeError
from ._errors import ConjugateBitError as ConjugateBitError
from ._errors import DeletedArrayError as DeletedArrayError
from ._errors import DeviceNotVisibleError as DeviceNotVisibleError
from ._errors import DeviceUnavailableError as DeviceUnavailableError
from ._errors import DroppedGradientWarning as DroppedGradientWarning
from ._errors import FactoryNotCallableError as FactoryNotCallableError
from ._errors import FakeCopyError as FakeCopyError
from ._errors import FakeTensorError as FakeTensorError
from ._errors import FunctionNotCallableError as FunctionNotCallableError
from ._errors import FxTraceError as FxTraceError
from ._errors import GradientTrackedError as GradientTrackedError
from ._errors import GrowthDuringCaptureError as GrowthDuringCaptureError
from ._errors import HandoffError as HandoffError
from ._errors import HigherOrderError as HigherOrderError
from ._errors import InputModifiedError as InputModifiedError
from ._errors import InputResizedError as InputResizedError
from ._errors import InputWrittenError as InputWrittenError
from ._errors import InvalidVmapMethodError as InvalidVmapMethodError
from ._errors import JaxAlreadyStartedError as JaxAlreadyStartedError
from ._errors import JaxPreallocationWarning as JaxPreallocationWarning
from ._errors import JaxSettingError as JaxSettingError
from ._errors import LazyViewError as LazyViewError
from ._errors import LoadedGraphError as LoadedGraphError
from ._errors import MisalignedViewError as MisalignedViewError
from ._errors import NegativeBitError as NegativeBitError
from ._errors import NestedCallError as NestedCallError
from ._errors import NoGradientError as NoGradientError
from ._errors import NotInitializedError as NotInitializedError
from ._errors import PersistentMismatchError as PersistentMismatchError
from ._errors import PersistentNotTensorError as PersistentNotTensorError
from ._errors import ReadOnlyAttributeError as ReadOnlyAttributeError
from ._errors import ReplanLimitError as ReplanLimitError
from ._errors import ResultDeviceError as ResultDeviceError
from ._errors import ResultDtypeError as ResultDtypeError
from ._errors import ResultLayoutError as ResultLayoutError
from ._errors import ResultMismatchError as ResultMismatchError
from ._errors import ResultShapeError as ResultShapeError
from ._errors import ResultSpecError as ResultSpecError
from ._errors import ResultStructureError as ResultStructureError
from ._errors import ShardedArrayError as ShardedArrayError
from ._errors import SlotUnknownError as SlotUnknownError
from ._errors import StreamDeviceError as StreamDeviceError
from ._errors import StreamTypeError as StreamTypeError
from ._errors import TorchCallError as TorchCallError
from ._errors import TransformedTensorError as TransformedTensorError
from ._errors import UnknownAllocatorError as UnknownAllocatorError
from ._errors import UnknownDeviceError as UnknownDeviceError
from ._errors import UnsupportedDtypeError as UnsupportedDtypeError
from ._errors import UnsupportedLayoutError as UnsupportedLayoutError
from ._errors import UnsupportedPytreeError as UnsupportedPytreeError
from ._errors import VmapNotAllowedError as VmapNotAllowedError
from ._errors import X64DisabledError as X64DisabledError
from ._errors import ZeroCopyError as ZeroCopyError

__all__ = [
    "AllocationDeviceError",
    "AllocationDtypeError",
    "AllocationLayoutError",
    "AllocationNegativeBitError",
    "AllocationNotStridedError",
    "AllocationNotTensorError",
    "AllocationOverlapError",
    "AllocationShapeError",
    "AllocationSizeError",
    "AllocationStorageOffsetError",
    "AllocationSuppressedError",
    "AllocationTypeError",
    "AllocationValueError",
    "AllocatorError",
    "AllocatorNotCallableError",
    "ArgumentTypeError",
    "CapacityLimitError",
    "ConjugateBitError",
    "DeletedArrayError",
    "DeviceNotVisibleError",
    "DeviceUnavailableError",
    "DroppedGradientWarning",
    "FactoryNotCallableError",
    "FakeCopyError",
    "FakeTensorError",
    "FunctionNotCallableError",
    "FxTraceError",
    "GradientTrackedError",
    "GrowthDuringCaptureError",
    "HandoffError",
    "HigherOrderError",
    "InputModifiedError",
    "InputResizedError",
    "InputWrittenError",
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
    "InvalidVmapMethodError",
    "JaxAlreadyStartedError",
    "JaxPreallocationWarning",
    "JaxSettingError",
    "LaneNotConfiguredError",
    "LazyViewError",
    "LoadedGraphError",
    "MisalignedViewError",
    "NegativeBitError",
    "NegativeDimError",
    "NestedCallError",
    "NoGradientError",
    "NotInitializedError",
    "PersistentKeyLockedError",
    "PersistentMismatchError",
    "PersistentNotTensorError",
    "ReadOnlyAttributeError",
    "ReplanLimitError",
    "ResultDeviceError",
    "ResultDtypeError",
    "ResultLayoutError",
    "ResultMismatchError",
    "ResultShapeError",
    "ResultSpecError",
    "ResultStructureError",
    "ShardedArrayError",
    "SlotUnknownError",
    "StreamDeviceError",
    "StreamTypeError",
    "TorchCallError",
    "TraceMismatchError",
    "TraceTypeError",
    "TransformedTensorError",
    "UbatchNotConfiguredError",
    "UnhashableKeyError",
    "UnknownAllocatorError",
    "UnknownDeviceError",
    "UnsupportedDtypeError",
    "UnsupportedLayoutError",
    "UnsupportedPytreeError",
    "VmapNotAllowedError",
    "WorkspaceError",
    "WorkspaceLockedError",
    "X64DisabledError",
    "ZeroCopyError",
]

_public.publish(__name__, globals(), __all__)
