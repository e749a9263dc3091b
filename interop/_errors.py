"""Every error the shell raises: one class per failure kind, each with a ``reason``.

Each class subclasses :class:`functional_ws.WorkspaceError` and the builtin that the peer
API raises for the same failure, so existing ``except`` clauses keep working:

- the handoff (``to_jax``, ``to_torch``, ``jax_call``): every refusal is a ``BufferError``,
  as torch's and JAX's own ``__dlpack__`` refusals are (``except BufferError`` is how callers
  fall back to a copy), and also the ``ValueError`` / ``TypeError`` / ``RuntimeError`` that
  JAX's ``from_dlpack(copy=False)`` raises for it;
- ``torch_call`` (torch code inside JAX): what ``fn`` returned or did to its inputs, its
  gradients, ``vmap``; ``RuntimeError`` / ``ValueError`` / ``TypeError`` as fits each;
- JAX's memory settings (``configure_jax_for_sharing``);
- the allocators (``allocator=`` and what an allocator returned);
- devices (``WorkspaceManager(device)``, growth during CUDA graph capture);
- the module-level API and persistent tensors.

``reason`` is a short machine-readable class attribute. Every class here is re-exported by
:mod:`interop.errors` and prints under that public path (``interop.errors.LazyViewError``);
:mod:`interop` keeps the few that callers catch most.
"""

from __future__ import annotations

from typing import ClassVar

from functional_ws import WorkspaceError

# ----- the torch <-> JAX handoff -----


class HandoffError(WorkspaceError):
    """Base class of the JAX interop errors (``to_jax``, ``to_torch``, ``jax_call``,
    ``torch_call``, settings)."""

    reason: ClassVar[str] = "handoff"


class ZeroCopyError(HandoffError, ValueError, BufferError):
    """The handoff would need a copy; it is refused instead of copying silently."""

    reason = "copy"


class UnsupportedLayoutError(ZeroCopyError):
    """The tensor's strides are not a permutation of a dense layout (step slice, expand...)."""

    reason = "layout"


class MisalignedViewError(ZeroCopyError):
    """JAX cannot alias the pointer (on CPU it needs 64-byte alignment)."""

    reason = "alignment"


class DeviceNotVisibleError(ZeroCopyError):
    """The tensor lives on a device that this process's JAX has no backend for."""

    reason = "device"


class FakeTensorError(ZeroCopyError, RuntimeError):
    """The tensor has no bytes: a fake tensor (``FakeTensorMode``, a ``make_fx`` or
    ``torch.export`` trace) holds shapes only, and a wrapper subclass keeps its data in
    tensors of its own. A ``RuntimeError`` too, as torch raises for the data pointer of
    such a tensor."""

    reason = "fake"


class LazyViewError(ZeroCopyError):
    """The tensor has one of torch's lazy bits set: its bytes are not its values."""

    reason = "lazy"


class ConjugateBitError(LazyViewError):
    """The tensor has torch's conjugate bit set (a lazy ``conj()``)."""

    reason = "conjugate"


class NegativeBitError(LazyViewError):
    """The tensor has torch's negative bit set (a lazy negation)."""

    reason = "negative"


class ShardedArrayError(ZeroCopyError):
    """The JAX array spans several devices; one torch tensor cannot alias it."""

    reason = "sharded"


class GradientTrackedError(HandoffError, ValueError, BufferError):
    """The tensor requires grad, or carries a forward-mode tangent; JAX would see its data
    but autograd would not see JAX (the tangent would be lost)."""

    reason = "grad"


class TransformedTensorError(HandoffError, ValueError, BufferError):
    """``to_jax`` of a tensor inside ``torch.func.vmap``: a transform's wrapper has no
    buffer of its own JAX could alias (under ``torch.func.jvp`` the tensor carries a
    tangent: :class:`GradientTrackedError`)."""

    reason = "transformed"


class X64DisabledError(HandoffError, TypeError, BufferError):
    """A 64-bit tensor while JAX's x64 mode is off: JAX would narrow it to 32 bits."""

    reason = "x64"


class UnsupportedDtypeError(HandoffError, TypeError, BufferError):
    """The dtype has no equivalent on the other side of DLPack (``complex32``, ``int4``...)."""

    reason = "dtype"


class StreamTypeError(HandoffError, TypeError, BufferError):
    """``stream=`` is neither ``None``, a ``torch.cuda.Stream`` nor a stream handle (int)."""

    reason = "stream-type"


class StreamDeviceError(HandoffError, ValueError, BufferError):
    """``stream=`` cannot order this handoff: a CPU handoff takes no stream, and a CUDA
    handoff takes a stream of the data's own device."""

    reason = "stream-device"


class DeletedArrayError(HandoffError, RuntimeError, BufferError):
    """The JAX array was deleted (``delete()`` or donation): it has no bytes to hand over."""

    reason = "deleted"


class FunctionNotCallableError(HandoffError, TypeError):
    """``jax_call(fn)`` or ``torch_call(fn, ...)`` was given something that cannot be called."""

    reason = "not-callable"


class UnsupportedPytreeError(HandoffError, TypeError):
    """Under ``torch.compile``, a ``jax_call`` function returned a pytree node the compiled
    graph cannot rebuild (only tuples, lists, dicts and ``None`` hold its arrays there)."""

    reason = "pytree"


class FxTraceError(HandoffError, TypeError, RuntimeError):
    """A ``jax_call`` reached by a ``torch.fx`` tracer that cannot record it: a ``Proxy``
    argument (``torch.fx.symbolic_trace``) or a ``make_fx`` trace (``torch.func.linearize``),
    where the call would be a constant of the trace. A ``TypeError`` for the ``Proxy``, a
    ``RuntimeError`` as torch raises for what a trace cannot hold."""

    reason = "fx-trace"


class LoadedGraphError(HandoffError, KeyError):
    """A graph calls a ``jax_call`` this process cannot run as it was made: no live
    wrapper of its function (a program ``torch.export`` saved, run in another process),
    a key of other JAX settings or another version of this library, or results of other
    shapes or dtypes than the graph was traced for (JAX's x64 setting changed since)."""

    reason = "loaded-graph"

    def __str__(self) -> str:  # the message, not KeyError's quoted repr of it
        return str(self.args[0]) if self.args else ""


# ----- torch_call: torch code inside JAX -----


class TorchCallError(HandoffError):
    """Base class of the errors ``torch_call`` raises (on top of the handoff's own)."""

    reason = "torch-call"


class InvalidVmapMethodError(TorchCallError, ValueError):
    """``vmap_method=`` is not one of ``None``, ``"sequential"``, ``"expand_dims"``,
    ``"broadcast_all"``."""

    reason = "vmap-method"


class VmapNotAllowedError(TorchCallError, NotImplementedError):
    """A ``torch_call`` function made with ``vmap_method=None`` was mapped by ``jax.vmap``
    (a ``NotImplementedError``, as JAX's callbacks raise it)."""

    reason = "vmap"


class ResultSpecError(TorchCallError, TypeError):
    """``result_shape_dtypes`` (or what the callable returned) has a leaf without a shape
    and a dtype."""

    reason = "result-spec"


class ArgumentTypeError(TorchCallError, TypeError):
    """An argument leaf of a ``torch_call`` function is not an array or a number."""

    reason = "argument"


class ResultMismatchError(TorchCallError, ValueError):
    """``fn`` returned something other than ``result_shape_dtypes`` promised; no output
    buffer was written."""

    reason = "result"


class ResultStructureError(ResultMismatchError):
    """``fn`` returned another pytree structure, or a leaf that is not a torch tensor."""

    reason = "result-structure"


class ResultShapeError(ResultMismatchError):
    """A result of ``fn`` has another shape than promised."""

    reason = "result-shape"


class ResultDtypeError(ResultMismatchError, TypeError):
    """A result of ``fn`` has another dtype than promised (never cast: no narrowing)."""

    reason = "result-dtype"


class ResultDeviceError(ResultMismatchError):
    """A result of ``fn`` lives on another device than the output buffer it must fill."""

    reason = "result-device"


class ResultLayoutError(ResultMismatchError, TypeError):
    """A result of ``fn`` is not a dense strided tensor (sparse, MKL-DNN, nested): torch
    cannot write it into XLA's dense output buffer."""

    reason = "result-layout"


class InputModifiedError(TorchCallError, RuntimeError):
    """``fn`` changed an input tensor, whose memory is XLA's."""

    reason = "input-modified"


class InputWrittenError(InputModifiedError):
    """``fn`` wrote into an input tensor in place: the JAX array it aliases has changed."""

    reason = "input-written"


class InputResizedError(InputModifiedError):
    """``fn`` resized an input tensor or pointed it at other memory (``resize_``, ``set_``)."""

    reason = "input-resized"


class NoGradientError(TorchCallError, RuntimeError):
    """JAX asked for a gradient torch's autograd cannot give: an input it does not reach,
    or a result without autograd history that gets a nonzero cotangent."""

    reason = "no-gradient"


class NestedCallError(TorchCallError, RuntimeError):
    """``jax_call`` or a ``torch_call`` function was called inside a ``torch_call``
    function, where XLA is in the middle of running a computation."""

    reason = "nested"


class HigherOrderError(TorchCallError, ValueError):
    """JAX asked for the derivative of a ``torch_call`` function's backward (``jax.grad``
    of ``jax.grad``, ``jax.hessian``): it is differentiable once, in reverse mode."""

    reason = "higher-order"


class SlotUnknownError(TorchCallError, RuntimeError):
    """A workspace request inside a ``torch_call`` function that XLA runs on a thread of its
    own (the caller's ubatch and lane, and its own use of the scratch, are unknown there)."""

    reason = "slot-unknown"


class JaxSettingError(HandoffError, ValueError):
    """An argument of ``configure_jax_for_sharing`` is out of range or inconsistent."""

    reason = "setting"


class JaxAlreadyStartedError(HandoffError, RuntimeError):
    """JAX's backend is already running, so its memory settings can no longer change."""

    reason = "started"


class JaxPreallocationWarning(UserWarning):
    """JAX has taken (or will take at its first operation) most of the GPU's memory."""


class DroppedGradientWarning(UserWarning):
    """A ``torch_call`` function's result requires grad through tensors that are not its
    inputs (a torch module's parameters): JAX differentiates only the inputs, so those
    tensors' ``.grad`` is never set. Also warned where the function flagged one of its
    inputs with ``requires_grad_()``, which JAX ignores."""


# ----- allocators -----


class AllocatorError(WorkspaceError):
    """Base class of the errors about ``allocator=`` and what an allocator returned."""

    reason: ClassVar[str] = "allocator"


class UnknownAllocatorError(AllocatorError, ValueError):
    """``allocator=`` is a string that names no built-in allocator."""

    reason = "name"


class AllocatorNotCallableError(AllocatorError, TypeError):
    """``allocator=`` is neither a built-in's name nor a callable."""

    reason = "callable"


class AllocationTypeError(AllocatorError, TypeError):
    """The allocator returned something that is not a ``uint8`` torch tensor."""

    reason = "type"


class AllocationNotTensorError(AllocationTypeError):
    """The allocator returned something that is not a ``torch.Tensor``."""

    reason = "type"


class AllocationDtypeError(AllocationTypeError):
    """The allocator returned a tensor whose dtype is not ``torch.uint8``."""

    reason = "dtype"


class AllocationValueError(AllocatorError, ValueError):
    """The allocator returned a ``uint8`` tensor the workspace cannot use as its buffer."""

    reason = "value"


class AllocationShapeError(AllocationValueError):
    """The allocator returned a tensor that is not 1-D."""

    reason = "ndim"


class AllocationSizeError(AllocationValueError):
    """The allocator returned fewer bytes than asked for."""

    reason = "size"


class AllocationDeviceError(AllocationValueError):
    """The allocator returned a tensor on another device than the workspace's."""

    reason = "device"


class AllocationLayoutError(AllocationValueError):
    """The allocator returned a tensor that is not contiguous."""

    reason = "layout"


class AllocationNotStridedError(AllocationLayoutError):
    """The allocator returned a nested or sparse tensor: not one run of bytes that views can
    be carved from."""

    reason = "strided"


class AllocationStorageOffsetError(AllocationLayoutError):
    """The allocator returned a buffer at a byte of its storage where no wider dtype can
    start, and its storage cannot be sliced to start at the buffer (torch views bytes as
    another dtype only at a multiple of that dtype's itemsize in the storage)."""

    reason = "storage-offset"


class AllocationNegativeBitError(AllocationValueError):
    """The allocator returned a tensor with torch's negative bit set: its bytes are not its
    values, and every view carved from it would fail."""

    reason = "negative"


class AllocationOverlapError(AllocationValueError):
    """The allocator returned memory that another slot of the same workspace is using."""

    reason = "overlap"


# ----- devices -----


class UnknownDeviceError(WorkspaceError, RuntimeError):
    """``device`` is not a device torch knows (``RuntimeError``, as ``torch.device`` raises)."""

    reason: ClassVar[str] = "unknown-device"


class DeviceUnavailableError(WorkspaceError, RuntimeError):
    """``device`` is a device type torch knows, but this process cannot use it (no CUDA in
    this torch build, no GPU visible, or an index past the device count)."""

    reason: ClassVar[str] = "unavailable"


class GrowthDuringCaptureError(WorkspaceError, RuntimeError):
    """A workspace would grow while the current CUDA stream is capturing a graph.

    A captured graph keeps raw addresses; growing would free the buffer the graph writes to
    (vLLM #52553). A ``RuntimeError``, like the errors torch raises for operations that are
    not allowed during capture. Reserve the worst case (``reserve``) and ``lock()`` before
    capturing.
    """

    reason: ClassVar[str] = "capture"


class AllocationSuppressedError(WorkspaceError, RuntimeError, TypeError):
    """``alloc_context()`` suppressed an exception raised while the workspace allocated
    inside it (its ``__exit__`` returned true), so a new buffer is missing.

    The growth is then handled as a failed allocation (the slot gets its old capacity
    again where it can). A ``TypeError`` too: the original, given such a context, goes on
    without a buffer and fails with one (``'NoneType' object is not subscriptable``).
    """

    reason: ClassVar[str] = "suppressed"


class FakeCopyError(WorkspaceError, RuntimeError):
    """A pickled manager was read back under a torch mode that makes tensors fake
    (``FakeTensorMode``, a ``make_fx`` trace): its bytes came back as tensors that hold
    none, so the copy would call a retained span intact over bytes nobody wrote. Or a
    manager holding persistent tensors was deep-copied under such a mode (their copies
    would hold no bytes). A ``RuntimeError`` too, as torch raises for the data of such a
    tensor."""

    reason: ClassVar[str] = "fake-copy"


# ----- calls that cannot settle -----


class ReplanLimitError(WorkspaceError, RuntimeError):
    """A call planned again and again because the workspace moved every time before it
    could install its plan: code the call runs (a key's ``__hash__`` or ``__eq__``, an
    ``alloc_context``, an allocator) changes the workspace on every run. The call gives up
    rather than spin; nothing it planned was installed.
    """

    reason: ClassVar[str] = "replan-limit"

    @classmethod
    def for_user_code(cls, user_code: str, attempts: int) -> ReplanLimitError:
        """The state moved while ``user_code`` ran, on each of ``attempts`` plans."""
        return cls(
            f"the workspace changed while this call was planned, {attempts} times in a row: "
            f"{user_code} runs while it is planned and must not change the workspace (call "
            "the manager) on every run. Nothing was installed."
        )

    @classmethod
    def for_growth(cls, attempts: int) -> ReplanLimitError:
        """Each of ``attempts`` tries was overtaken: the slot's buffer was replaced while the
        call grew it or carved its views."""
        return cls(
            f"the slot's buffer was replaced while this call grew it or carved its views, "
            f"{attempts} times in a row: code the call runs (a torch mode's handler, "
            "alloc_context(), the allocator) must not call the manager on every run. The call "
            "gave up; its views were not handed out."
        )


# ----- the module-level API and persistent tensors -----


class NotInitializedError(WorkspaceError, AssertionError):
    """A module-level workspace function was called before ``init_workspace_manager``."""

    reason: ClassVar[str] = "not-initialized"


class FactoryNotCallableError(WorkspaceError, TypeError):
    """``get_persistent_resource``'s key is new and its ``factory`` is not callable (the
    original's ``TypeError`` from calling it)."""

    reason: ClassVar[str] = "factory-not-callable"


class PersistentMismatchError(WorkspaceError, ValueError):
    """A persistent tensor was requested again with another shape or dtype."""

    reason: ClassVar[str] = "persistent-mismatch"


class PersistentNotTensorError(PersistentMismatchError, AttributeError):
    """``get_persistent``'s key holds something that is not a tensor (a resource put under
    ``(torch.Tensor, key)``): an ``AttributeError`` as well, as the original raises reading
    its ``shape``."""

    reason: ClassVar[str] = "persistent-not-tensor"


class ReadOnlyAttributeError(WorkspaceError, AttributeError):
    """A module constant the original lets callers rebind (``interop._VIEW_ALIGNMENT``) was
    set or deleted: here it would change nothing, so the change is refused instead."""

    reason: ClassVar[str] = "read-only"


#: Every class above, as :mod:`interop` exports it.
PUBLIC_ERRORS: tuple[type[Exception], ...] = (
    HandoffError, ZeroCopyError, UnsupportedLayoutError, MisalignedViewError,
    DeviceNotVisibleError, FakeTensorError, LazyViewError, ConjugateBitError, NegativeBitError,
    ShardedArrayError, GradientTrackedError, TransformedTensorError, X64DisabledError,
    UnsupportedDtypeError,
    StreamTypeError, StreamDeviceError, DeletedArrayError, FunctionNotCallableError,
    UnsupportedPytreeError, FxTraceError, LoadedGraphError, JaxSettingError,
    JaxAlreadyStartedError, JaxPreallocationWarning, DroppedGradientWarning,
    TorchCallError, InvalidVmapMethodError, VmapNotAllowedError, ResultSpecError,
    ArgumentTypeError, ResultMismatchError, ResultStructureError, ResultShapeError,
    ResultDtypeError, ResultDeviceError, ResultLayoutError, InputModifiedError, InputWrittenError,
    InputResizedError, NoGradientError, NestedCallError, SlotUnknownError, HigherOrderError,
    AllocatorError, UnknownAllocatorError, AllocatorNotCallableError, AllocationTypeError,
    AllocationNotTensorError, AllocationDtypeError, AllocationValueError, AllocationShapeError,
    AllocationSizeError, AllocationDeviceError, AllocationLayoutError,
    AllocationNotStridedError, AllocationStorageOffsetError,
    AllocationNegativeBitError, AllocationOverlapError,
    UnknownDeviceError, DeviceUnavailableError, GrowthDuringCaptureError, ReplanLimitError,
    AllocationSuppressedError, FakeCopyError, NotInitializedError, FactoryNotCallableError,
    PersistentMismatchError, PersistentNotTensorError,
    ReadOnlyAttributeError,
)  # fmt: skip

for _error in PUBLIC_ERRORS:  # tracebacks print the public path, interop.errors.LazyViewError
    _error.__module__ = "interop.errors"
del _error
