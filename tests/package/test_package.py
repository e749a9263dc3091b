"""The public surface changes only on purpose; the core never imports torch."""

import subprocess
import sys
from pathlib import Path

import functional_ws
import functional_ws.testing

CORE_NAMES = {
    "CapacityLimitError", "Change", "Diff", "Growth", "GrowthPolicy", "InvalidConfigError",
    "InvalidConfigTypeError", "InvalidSlotTypeError", "InvalidDtypeError", "InvalidShapeError",
    "InvalidRequestError",
    "NegativeDimError", "UnhashableKeyError",
    "InvalidPlanError", "InvalidSlotError", "InvalidSpecError", "LaneNotConfiguredError",
    "Layout", "PersistentKeyLockedError", "Slot", "SlotState", "Span",
    "UbatchNotConfiguredError", "ViewSpec", "WorkspaceError", "WorkspaceLockedError",
    "WorkspaceState", "acquire", "after_failed_growth", "apply_plan", "claim", "diff",
    "forget_retained",
    "display", "from_dict", "initial_state", "lock", "plot", "render", "render_html",
    "fast_paths", "rebase", "reserve", "retain", "to_dict", "unlock",
    # sizing (issue 32): traces, the worst case, a replay
    "InvalidTraceError", "ReprKey", "Shortfall", "Trace", "TraceEvent", "TraceMismatchError",
    "TraceTypeError", "replay", "worst_case",
}  # fmt: skip
DISPLAY_NAMES = {
    "COLOURS", "Segment", "SlotPicture", "counted", "dtype_colour", "exact_bytes",
    "format_bytes", "plot", "plot_timeline", "render", "render_html", "slot_pictures",
    "timeline_html",
}  # fmt: skip
FAST_PATH_NAMES = {
    "fit", "fit_plain", "interchangeable_keys", "layout_of", "replay_acquire", "replay_retain",
}  # fmt: skip
TESTING_NAMES = {
    "DEFAULT_DTYPES", "Transitions", "WorkspaceMachine", "WorkspaceModel", "dtypes", "keys",
    "register_profiles", "shapes", "slots", "spec_lists", "specs", "states", "traces",
    "Counterexample", "find_shortfall",
}  # fmt: skip


INTEROP_NAMES = {
    "CapacityLimitError", "HandoffError", "History", "InvalidSpecError", "Record", "SlotStats",
    "WorkspaceError", "WorkspaceLockedError", "WorkspaceManager", "WorkspaceStats",
    "configure_jax_for_sharing", "current_slot", "current_workspace_manager",
    "dbo_current_ubatch_id", "errors", "init_workspace_manager",
    "is_workspace_manager_initialized", "jax_call", "lock_workspace", "reserve_workspace",
    "reset_workspace_manager", "set_ubatch_provider", "to_jax", "to_torch", "torch_call",
    "unlock_workspace",
    "use_workspace_lane", "use_workspace_ubatch", "use_workspace_ubatch_id",
}  # fmt: skip
INTEROP_ERRORS_NAMES = {
    "AllocationDeviceError", "AllocationDtypeError", "AllocationLayoutError",
    "AllocationNegativeBitError", "AllocationNotStridedError", "AllocationNotTensorError",
    "AllocationOverlapError", "AllocationShapeError", "AllocationSizeError",
    "AllocationStorageOffsetError", "AllocationSuppressedError", "AllocationTypeError",
    "AllocationValueError",
    "AllocatorError", "AllocatorNotCallableError", "ArgumentTypeError", "CapacityLimitError",
    "ConjugateBitError", "DeletedArrayError", "DroppedGradientWarning", "DeviceNotVisibleError",
    "DeviceUnavailableError",
    "FakeTensorError", "FunctionNotCallableError", "FxTraceError", "GradientTrackedError",
    "GrowthDuringCaptureError", "HandoffError",
    "InputModifiedError", "InputResizedError", "InputWrittenError", "InvalidConfigError",
    "InvalidConfigTypeError", "InvalidSlotTypeError", "InvalidDtypeError", "InvalidShapeError",
    "InvalidRequestError", "HigherOrderError",
    "NegativeDimError", "UnhashableKeyError",
    "InvalidPlanError", "InvalidSlotError", "InvalidSpecError", "InvalidVmapMethodError",
    "JaxAlreadyStartedError", "JaxPreallocationWarning", "JaxSettingError",
    "LaneNotConfiguredError", "LazyViewError", "MisalignedViewError", "NegativeBitError",
    "InvalidTraceError", "NestedCallError", "NoGradientError", "NotInitializedError",
    "PersistentKeyLockedError", "PersistentMismatchError", "PersistentNotTensorError",
    "FactoryNotCallableError",
    "ReadOnlyAttributeError",
    "ReplanLimitError", "FakeCopyError", "TransformedTensorError",
    "ResultDeviceError", "ResultDtypeError", "ResultLayoutError",
    "ResultMismatchError",
    "ResultShapeError", "ResultSpecError", "ResultStructureError", "ShardedArrayError",
    "SlotUnknownError",
    "StreamDeviceError", "StreamTypeError", "TorchCallError", "TraceMismatchError",
    "TraceTypeError", "UbatchNotConfiguredError",
    "UnknownAllocatorError", "UnknownDeviceError", "UnsupportedDtypeError",
    "UnsupportedLayoutError", "UnsupportedPytreeError", "LoadedGraphError", "VmapNotAllowedError",
    "WorkspaceError",
    "WorkspaceLockedError", "X64DisabledError", "ZeroCopyError"
}  # fmt: skip


def test_interop_public_names_are_pinned():
    import interop

    assert set(interop.__all__) == INTEROP_NAMES
    for name in interop.__all__:
        assert hasattr(interop, name), name
    assert set(interop.errors.__all__) == INTEROP_ERRORS_NAMES
    for name in interop.errors.__all__:
        assert hasattr(interop.errors, name), name


def test_interop_errors_holds_every_exception_interop_exports():
    """The top level keeps a few errors callers catch most; each is the class in
    interop.errors, and every exception class interop exports is there."""
    import interop

    for name in interop.__all__:
        value = getattr(interop, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert getattr(interop.errors, name) is value, name
    for name in interop.errors.__all__:
        value = getattr(interop.errors, name)
        assert isinstance(value, type) and issubclass(value, BaseException), name


def test_public_names_are_pinned():
    assert set(functional_ws.__all__) == CORE_NAMES
    assert set(functional_ws.display.__all__) == DISPLAY_NAMES
    assert set(functional_ws.fast_paths.__all__) == FAST_PATH_NAMES
    assert set(functional_ws.testing.__all__) == TESTING_NAMES
    for name in functional_ws.__all__:
        assert hasattr(functional_ws, name), name


def test_core_does_not_import_torch():
    code = (
        "import sys, functional_ws, functional_ws.testing; "
        "import numpy as np; functional_ws.acquire(functional_ws.initial_state(), (0, 0), "
        "((4,), np.dtype('int8'))); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_both_packages_are_typed():
    for package in ("functional_ws", "interop"):
        module = __import__(package)
        assert (Path(module.__file__).parent / "py.typed").exists(), package


PUBLIC_NAMESPACES = (
    "functional_ws", "functional_ws.display", "functional_ws.fast_paths",
    "functional_ws.testing", "interop", "interop.errors", "interop.testing",
)  # fmt: skip


def _exports():
    import importlib
    import inspect

    for namespace in PUBLIC_NAMESPACES:
        module = importlib.import_module(namespace)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                yield namespace, name, value


def test_every_export_prints_a_public_module():
    """JAX's package-structure rule: no export says it lives in a private module, and the
    module it names exports it under its own name."""
    import importlib

    found = list(_exports())
    assert len(found) > 100  # every namespace was walked
    for namespace, name, value in found:
        module = value.__module__
        assert "._" not in module and not module.startswith("_"), (namespace, name, module)
        assert getattr(importlib.import_module(module), value.__name__) is value, (
            namespace,
            name,
            module,
        )


def test_public_paths_pickle_and_copy():
    import copy
    import pickle

    import numpy as np

    import interop

    state, layout = functional_ws.acquire(
        functional_ws.initial_state(), (0, 0), ((4,), np.dtype("int8"))
    )
    for value in (state, layout, state.slots[0], functional_ws.diff(state, state)):
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.deepcopy(value) == value
    assert pickle.loads(pickle.dumps(functional_ws.acquire)) is functional_ws.acquire
    err = pickle.loads(pickle.dumps(interop.errors.UnsupportedLayoutError("no")))
    assert type(err) is interop.errors.UnsupportedLayoutError and str(err) == "no"
