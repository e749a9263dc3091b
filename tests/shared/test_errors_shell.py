"""The shell's errors: one module, one class per failure kind, public names, BufferError
refusals, a ``reason`` class attribute on every class."""

from __future__ import annotations

import traceback

import pytest

import interop
from functional_ws import WorkspaceError
from interop import _errors

ERRORS = _errors.PUBLIC_ERRORS
WARNINGS = (interop.errors.JaxPreallocationWarning, interop.errors.DroppedGradientWarning)

# Every refusal of a handoff, in both directions, and the builtin it also is (besides
# BufferError): torch's ``__dlpack__`` raises BufferError for what it cannot export, and
# ``except BufferError`` is how callers fall back to a copy.
REFUSALS = {
    interop.errors.ZeroCopyError: ValueError,
    interop.errors.UnsupportedLayoutError: ValueError,
    interop.errors.MisalignedViewError: ValueError,
    interop.errors.DeviceNotVisibleError: ValueError,
    interop.errors.FakeTensorError: RuntimeError,  # and ValueError
    interop.errors.LazyViewError: ValueError,
    interop.errors.ConjugateBitError: ValueError,
    interop.errors.NegativeBitError: ValueError,
    interop.errors.ShardedArrayError: ValueError,
    interop.errors.GradientTrackedError: ValueError,
    interop.errors.TransformedTensorError: ValueError,
    interop.errors.X64DisabledError: TypeError,
    interop.errors.UnsupportedDtypeError: TypeError,
    interop.errors.StreamTypeError: TypeError,
    interop.errors.StreamDeviceError: ValueError,
    interop.errors.DeletedArrayError: RuntimeError,
}
# The HandoffError classes that refuse no handoff (JAX's memory settings, what jax_call is
# given or returns, what torch_call's function returned or did).
NOT_REFUSALS = {
    interop.HandoffError: None,
    interop.errors.FunctionNotCallableError: TypeError,
    interop.errors.UnsupportedPytreeError: TypeError,
    interop.errors.FxTraceError: TypeError,  # and RuntimeError
    interop.errors.LoadedGraphError: KeyError,
    interop.errors.JaxSettingError: ValueError,
    interop.errors.JaxAlreadyStartedError: RuntimeError,
    interop.errors.TorchCallError: None,
    interop.errors.InvalidVmapMethodError: ValueError,
    interop.errors.VmapNotAllowedError: NotImplementedError,
    interop.errors.ResultSpecError: TypeError,
    interop.errors.ArgumentTypeError: TypeError,
    interop.errors.ResultMismatchError: ValueError,
    interop.errors.ResultStructureError: ValueError,
    interop.errors.ResultShapeError: ValueError,
    interop.errors.ResultDtypeError: TypeError,
    interop.errors.ResultDeviceError: ValueError,
    interop.errors.ResultLayoutError: TypeError,
    interop.errors.InputModifiedError: RuntimeError,
    interop.errors.InputWrittenError: RuntimeError,
    interop.errors.InputResizedError: RuntimeError,
    interop.errors.NoGradientError: RuntimeError,
    interop.errors.NestedCallError: RuntimeError,
    interop.errors.SlotUnknownError: RuntimeError,
    interop.errors.HigherOrderError: ValueError,
}
# The builtin each other error also is: what the original (or torch) raises there.
OTHER_BASES = {
    interop.errors.AllocatorError: None,
    interop.errors.UnknownAllocatorError: ValueError,
    interop.errors.AllocatorNotCallableError: TypeError,
    interop.errors.AllocationTypeError: TypeError,
    interop.errors.AllocationNotTensorError: TypeError,
    interop.errors.AllocationDtypeError: TypeError,
    interop.errors.AllocationValueError: ValueError,
    interop.errors.AllocationShapeError: ValueError,
    interop.errors.AllocationSizeError: ValueError,
    interop.errors.AllocationDeviceError: ValueError,
    interop.errors.AllocationLayoutError: ValueError,
    interop.errors.AllocationNotStridedError: ValueError,
    interop.errors.AllocationStorageOffsetError: ValueError,
    interop.errors.AllocationNegativeBitError: ValueError,
    interop.errors.AllocationOverlapError: ValueError,
    interop.errors.UnknownDeviceError: RuntimeError,
    interop.errors.DeviceUnavailableError: RuntimeError,
    interop.errors.GrowthDuringCaptureError: RuntimeError,
    interop.errors.ReplanLimitError: RuntimeError,
    interop.errors.FakeCopyError: RuntimeError,
    interop.errors.AllocationSuppressedError: TypeError,  # and RuntimeError
    interop.errors.NotInitializedError: AssertionError,
    interop.errors.PersistentMismatchError: ValueError,
    interop.errors.PersistentNotTensorError: AttributeError,  # and ValueError
    interop.errors.FactoryNotCallableError: TypeError,
    interop.errors.ReadOnlyAttributeError: AttributeError,
}
# Precise classes under the public ones callers already catch.
PARENTS = {
    interop.errors.PersistentNotTensorError: interop.errors.PersistentMismatchError,
    interop.errors.ConjugateBitError: interop.errors.LazyViewError,
    interop.errors.NegativeBitError: interop.errors.LazyViewError,
    interop.errors.AllocationNotTensorError: interop.errors.AllocationTypeError,
    interop.errors.AllocationDtypeError: interop.errors.AllocationTypeError,
    interop.errors.AllocationShapeError: interop.errors.AllocationValueError,
    interop.errors.AllocationSizeError: interop.errors.AllocationValueError,
    interop.errors.AllocationDeviceError: interop.errors.AllocationValueError,
    interop.errors.AllocationLayoutError: interop.errors.AllocationValueError,
    interop.errors.AllocationNotStridedError: interop.errors.AllocationLayoutError,
    interop.errors.AllocationStorageOffsetError: interop.errors.AllocationLayoutError,
    interop.errors.AllocationNegativeBitError: interop.errors.AllocationValueError,
    interop.errors.AllocationOverlapError: interop.errors.AllocationValueError,
    interop.errors.ResultStructureError: interop.errors.ResultMismatchError,
    interop.errors.ResultShapeError: interop.errors.ResultMismatchError,
    interop.errors.ResultDtypeError: interop.errors.ResultMismatchError,
    interop.errors.ResultDeviceError: interop.errors.ResultMismatchError,
    interop.errors.ResultLayoutError: interop.errors.ResultMismatchError,
    interop.errors.InputWrittenError: interop.errors.InputModifiedError,
    interop.errors.InputResizedError: interop.errors.InputModifiedError,
    interop.errors.NoGradientError: interop.errors.TorchCallError,
}


def _subclasses(cls: type) -> set[type]:
    found = {cls}
    for sub in cls.__subclasses__():
        found |= _subclasses(sub)
    return found


def _name(cls: type) -> str:
    return cls.__name__


def _id(value: object) -> str:
    return getattr(value, "__name__", str(value))


@pytest.mark.parametrize("cls", ERRORS, ids=_name)
def test_each_error_is_exported_under_its_public_path(cls):
    assert getattr(interop.errors, cls.__name__) is cls
    assert cls.__name__ in interop.errors.__all__
    assert cls.__module__ == "interop.errors"


def test_every_shell_error_is_in_the_errors_module():
    """A WorkspaceError or warning that interop.errors exports is defined in interop._errors,
    unless the core defines it (and the core raises it)."""
    exported = {getattr(interop.errors, name) for name in interop.errors.__all__}
    shell = {
        value
        for value in exported
        if isinstance(value, type)
        and issubclass(value, (WorkspaceError, Warning))
        and not value.__module__.startswith("functional_ws")
    }
    assert shell == set(ERRORS)


@pytest.mark.parametrize("cls", ERRORS, ids=_name)
def test_tracebacks_print_the_public_path(cls):
    try:
        raise cls("what went wrong")
    except cls as err:
        last = traceback.format_exception(err)[-1]
    assert last == f"interop.errors.{cls.__name__}: what went wrong\n"


@pytest.mark.parametrize("cls", [c for c in ERRORS if c not in WARNINGS], ids=_name)
def test_reason_is_a_class_attribute_and_the_message_the_only_argument(cls):
    assert isinstance(cls.reason, str) and cls.reason
    err = cls("message")
    assert err.reason == cls.reason and str(err) == "message"
    assert isinstance(err, WorkspaceError)


@pytest.mark.parametrize(
    "family", [interop.HandoffError, interop.errors.AllocatorError], ids=["handoff", "allocator"]
)
def test_each_failure_kind_has_its_own_reason(family):
    """Leaves of a family (the classes actually raised) have distinct reasons."""
    leaves = [c for c in _subclasses(family) if not c.__subclasses__()]
    reasons = [c.reason for c in leaves]
    assert len(set(reasons)) == len(reasons), sorted(zip(reasons, map(_name, leaves), strict=True))


def test_every_handoff_error_is_listed_as_a_refusal_or_not():
    """A new HandoffError subclass must be classified here before it can ship."""
    assert _subclasses(interop.HandoffError) == set(REFUSALS) | set(NOT_REFUSALS)


@pytest.mark.parametrize(("cls", "builtin"), REFUSALS.items(), ids=_id)
def test_every_handoff_refusal_is_a_buffer_error_too(cls, builtin):
    assert issubclass(cls, BufferError) and issubclass(cls, builtin)
    assert issubclass(cls, interop.HandoffError)


@pytest.mark.parametrize(("cls", "builtin"), NOT_REFUSALS.items(), ids=_id)
def test_settings_errors_are_no_buffer_errors(cls, builtin):
    assert not issubclass(cls, BufferError)
    assert builtin is None or issubclass(cls, builtin)


@pytest.mark.parametrize(("cls", "builtin"), OTHER_BASES.items(), ids=_id)
def test_other_errors_keep_the_builtin_callers_catch(cls, builtin):
    assert builtin is None or issubclass(cls, builtin)
    assert issubclass(cls, WorkspaceError)


def test_the_tables_cover_every_error():
    listed = set(REFUSALS) | set(NOT_REFUSALS) | set(OTHER_BASES) | set(WARNINGS)
    assert listed == set(ERRORS)


@pytest.mark.parametrize(("cls", "parent"), PARENTS.items(), ids=_id)
def test_precise_classes_keep_the_public_class_as_their_base(cls, parent):
    assert issubclass(cls, parent)


def test_the_old_handoff_errors_module_is_gone():
    with pytest.raises(ImportError):
        __import__("interop._jax_errors")
