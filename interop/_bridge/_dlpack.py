"""DLPack plumbing between torch and JAX: one capsule per handoff, never a copy.

Where ``jax.dlpack.from_dlpack`` spends its time (jax 0.10.2, CPU): canonicalising the
dtype through ``jnp.asarray`` and probing the device for an external-ready stream (on CPU
the probe raises ``UNIMPLEMENTED`` and is caught) on every call, plus torch's Python
``__dlpack__`` / ``__dlpack_device__``. The fast path here calls the two C++ entry points
those wrap (``torch._C._to_dlpack`` and jaxlib's ``dlpack_managed_tensor_to_buffer``) with
``copy=False`` and a JAX device looked up once per torch device. Only that metadata is
cached: every handoff builds a fresh ``jax.Array`` over the live bytes, so no handoff can
be stale (JAX's host-copy cache, jax#19123, lives on an array object, and none is reused).

Where the private entry points are missing or changed (other jax versions), the same
contract is kept through the public ``jax.dlpack.from_dlpack(copy=False)`` and
``torch.from_dlpack``: slower, never different.

Stream ordering on CUDA (a stream wait, not a host synchronisation):

- torch -> JAX: an event recorded on the producing torch stream is waited on by the JAX
  device's external-ready stream, on which JAX then records the buffer's definition event
  (what ``__dlpack__(stream=...)`` does, with the producer chosen explicitly). A JAX client
  without such a stream (``UNIMPLEMENTED``) gets a host synchronisation of the producer.
- JAX -> torch: jaxlib makes the consuming torch stream wait for the array's definition
  event. On CPU there is no stream: jaxlib blocks until the array is ready.

Lifetime, JAX -> torch. jaxlib's DLPack export holds an *external reference* on the array's
device buffer and a Python reference to the ``jax.Array`` object it was given, but not the
array's buffer itself: ``array.delete()`` (or deleting every ``jax.live_arrays()``) drops
the last owner of the buffer while the hold is outstanding, and XLA aborts the process
(``Check failed: holds_[i] == 0 ... Non-zero type 1 hold on destruction``). JAX's own
``__dlpack__`` exports ``array.addressable_data(0)``, a second array object over the same
buffer, which survives ``array.delete()`` but not a sweep of ``jax.live_arrays()``.

On CPU the tensor is therefore made from jaxlib's zero-copy host view of the array (the
Python buffer protocol, or for bfloat16 and float8 the view ``np.asarray(array)`` is made
of): that view owns the buffer (and the hold) for as long as it lives, whatever happens to
the array objects, and the tensor (through NumPy's DLPack export) owns the view for exactly
as long as the tensor's storage lives. Deleting, donating
(JAX then copies instead, as for any externally referenced buffer) or collecting the array,
or sweeping ``jax.live_arrays()``, leaves the tensor's bytes intact. On GPU there is no such
view; the export goes through ``addressable_data(0)`` as JAX's own ``__dlpack__`` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import jax
import numpy as np
import torch
from jax.extend import backend as jax_backend
from jax.sharding import SingleDeviceSharding

from .. import _private
from .._errors import (
    DeletedArrayError,
    DeviceNotVisibleError,
    FakeTensorError,
    MisalignedViewError,
    ShardedArrayError,
    UnsupportedDtypeError,
    UnsupportedLayoutError,
    ZeroCopyError,
)
from .._locks import renew_after_fork
from . import _exit

# The private entry points, version-gated, looked up once (``_private.py``).
_JAXLIB = _private.jaxlib_dlpack()
PRIVATE_PATH_AVAILABLE = _JAXLIB is not None
_tensor_to_buffer: Any = None if _JAXLIB is None else _JAXLIB.tensor_to_buffer
_buffer_to_tensor: Any = None if _JAXLIB is None else _JAXLIB.buffer_to_tensor
_ArrayImpl: Any = None if _JAXLIB is None else _JAXLIB.array_impl

_to_capsule, _from_capsule = _private.torch_capsules()

#: DLPack device type codes (dlpack.h).
DL_CPU, DL_CUDA, DL_ROCM = 1, 2, 10

#: Whether the fast (private) path is used; tests switch it off to exercise the fallback.
use_private_path = PRIVATE_PATH_AVAILABLE


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a torch device's tensors land in JAX: looked up once per torch device."""

    device: Any  # a jax.Device
    dl_type: int
    on_gpu: bool
    #: The torch device its tensors live on (``cpu``, ``cuda:0``...).
    device_kind: str = "cpu"


_CPU_KEY = ("cpu", 0)
_targets: dict[tuple[str, int], Target] = {}
_targets_lock = threading.Lock()
_external_streams: dict[tuple[int, int], Any] = {}
_events: dict[int, Any] = {}
_wait_lock = threading.Lock()
renew_after_fork(
    sys.modules[__name__], "_targets_lock", "_wait_lock"
)  # a fork while a thread holds one


def target_for(tensor: torch.Tensor) -> Target:
    """The JAX device for ``tensor``'s torch device (cached).

    Raises:
        DeviceNotVisibleError: the tensor's device has no JAX backend in this process.
    """
    if tensor.is_cpu:
        key = _CPU_KEY
    elif tensor.is_cuda:
        key = ("cuda", tensor.get_device())
    else:
        key = (tensor.device.type, 0)
    return _targets.get(key) or _cache_target(key)


def device_target(device: torch.device) -> Target:
    """The JAX device for torch ``device`` (cached; ``cuda`` without an index: the current one).

    Raises:
        DeviceNotVisibleError: the device has no JAX backend in this process.
    """
    if device.type == "cpu":
        key = _CPU_KEY
    elif device.type == "cuda":
        key = ("cuda", torch.cuda.current_device() if device.index is None else device.index)
    else:
        key = (device.type, 0)
    return _targets.get(key) or _cache_target(key)


def _cache_target(key: tuple[str, int]) -> Target:
    _exit.register()  # the first handoff to a device: exit waits for XLA's releases
    with _targets_lock:
        target = _targets.get(key) or _lookup_target(*key)
        _targets[key] = target
    return target


def _lookup_target(kind: str, index: int) -> Target:
    if kind == "cpu":
        platform, dl_type = "cpu", DL_CPU
    elif kind == "cuda":
        platform, dl_type = ("rocm", DL_ROCM) if torch.version.hip else ("cuda", DL_CUDA)
    else:
        raise DeviceNotVisibleError(
            f"to_jax: a tensor on torch device {kind!r} cannot be handed to JAX without a "
            "copy: JAX imports DLPack tensors from CPU and CUDA/ROCm memory only. Move it "
            "with tensor.to('cpu') or tensor.to('cuda') first (that is a copy)."
        )
    try:
        backend = jax_backend.get_backend(platform)
        device = backend.device_from_local_hardware_id(index)
    except (RuntimeError, ValueError) as err:
        raise DeviceNotVisibleError(
            f"to_jax: the tensor is on {kind}:{index} but this process's JAX has no "
            f"{platform} device with local hardware id {index} ({err}). Install a JAX "
            "build for that device (e.g. pip install 'jax[cuda12]'), and check that "
            "JAX_PLATFORMS and CUDA_VISIBLE_DEVICES let JAX see it."
        ) from None
    torch_device = "cpu" if kind == "cpu" else f"cuda:{index}"
    return Target(device=device, dl_type=dl_type, on_gpu=kind != "cpu", device_kind=torch_device)


def import_tensor(tensor: torch.Tensor, target: Target, stream: Any) -> jax.Array:
    """Alias ``tensor``'s bytes as a new ``jax.Array`` (no copy; raises where one is needed).

    ``stream``: the torch stream whose queued work the array is ordered after (CUDA only;
    ``None`` means the tensor's current stream).
    """
    if type(tensor) is not torch.Tensor and tensor.numel() and not _has_bytes(tensor):
        what = f"the {type(tensor).__name__} (shape={tuple(tensor.shape)}, dtype={tensor.dtype})"
        if hasattr(tensor, "fake_mode"):  # torch's FakeTensor
            why = (
                "a fake tensor (under FakeTensorMode, or a trace by make_fx or "
                "torch.export) holds shapes only, and JAX would read address 0. Hand JAX "
                "real tensors; to trace a jax_call, torch.compile holds it whole as a "
                "custom op."
            )
        else:
            why = (
                "a wrapper subclass keeps its data in tensors of its own (its storage "
                "holds none), and JAX would read address 0. Hand JAX the plain tensor it "
                "wraps."
            )
        raise FakeTensorError(f"to_jax: {what} has no bytes JAX could alias: {why}")
    try:
        if use_private_path:
            try:
                return _import_private(tensor, target, stream)
            except TypeError:  # the private signature changed: fall back for good
                _disable_private_path()
        return _import_public(tensor, target, stream)
    except (RuntimeError, ValueError) as err:
        if isinstance(err, ZeroCopyError):
            raise
        raise _translate(err, tensor) from None


def _has_bytes(tensor: torch.Tensor) -> bool:
    """Whether a tensor of a subclass has storage with an address (a fake one has none)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FakeTensor warns that its pointer means nothing
        try:
            return bool(tensor.data_ptr())
        except RuntimeError:  # "Cannot access data pointer of Tensor that doesn't have storage"
            return False


@contextlib.contextmanager
def forced_path(private: bool) -> Iterator[None]:
    """Hand over through the private fast path (where available) or the public fallback.

    For tests and benchmarks: both paths keep the same contract.
    """
    global use_private_path
    saved = use_private_path
    use_private_path = private and PRIVATE_PATH_AVAILABLE
    try:
        yield
    finally:
        use_private_path = saved


def _disable_private_path() -> None:
    global use_private_path
    use_private_path = False


def _import_private(tensor: torch.Tensor, target: Target, stream: Any) -> jax.Array:
    if not target.on_gpu:
        array = _tensor_to_buffer(_to_capsule(tensor), target.device, None, False, DL_CPU)
    else:
        jax_stream = _ready_events_stream(target)
        _make_wait(jax_stream, tensor.device, stream)
        array = _tensor_to_buffer(
            _to_capsule(tensor), target.device, jax_stream, False, target.dl_type
        )
    return array  # type: ignore[no-any-return]


_streamless: set[Target] = set()


def _ready_events_stream(target: Target) -> int | None:
    """The stream JAX orders an imported buffer on, or ``None`` where its client has none.

    Asked per handoff: jaxlib may hand out streams from a pool, round robin.
    """
    if target in _streamless:
        return None
    try:
        return int(target.device.get_stream_for_external_ready_events())
    except RuntimeError as err:  # jax.errors.JaxRuntimeError
        if "UNIMPLEMENTED" not in str(err):
            raise
        _streamless.add(target)
        return None


def _make_wait(jax_stream: int | None, device: torch.device, stream: Any) -> None:
    """Make JAX's stream ``jax_stream`` wait for the work queued so far on ``stream``.

    Where JAX's client exposes no such stream, wait on the host instead (correct, slower).
    """
    producer = stream if stream is not None else torch.cuda.current_stream(device)
    if jax_stream is None:
        producer.synchronize()
        return
    if producer.cuda_stream == jax_stream:
        return
    index = device.index or 0
    with _wait_lock:  # one cached event per device: record and wait must not interleave
        consumer = _external_streams.get((jax_stream, index))
        if consumer is None:
            consumer = torch.cuda.ExternalStream(jax_stream, device=device)  # type: ignore[no-untyped-call]
            _external_streams[(jax_stream, index)] = consumer
        event = _events.get(index)
        if event is None:
            event = _events[index] = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(producer)
        consumer.wait_event(event)  # captures this record; the event may be re-recorded


def _import_public(tensor: torch.Tensor, target: Target, stream: Any) -> jax.Array:
    ordered = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    with ordered:  # __dlpack__ orders JAX after torch's *current* stream
        array: jax.Array = jax.dlpack.from_dlpack(tensor, copy=False)
    if array.unsafe_buffer_pointer() != tensor.data_ptr() and tensor.numel():
        raise ZeroCopyError("to_jax: jax.dlpack.from_dlpack returned a copy; refusing it.")
    return array


_permuted_ok: dict[Target, bool] = {}


def permuted_layouts_import_correctly(target: Target) -> bool:
    """Whether this jaxlib honours the strides of a permuted (say, transposed) tensor it
    imports on ``target``'s device: asked once per device, with a 2x3 tensor's transpose.

    jax 0.6.1 to 0.7.x (seen here) alias a transposed tensor as if it were row-major: the
    same address, wrong values, no error; raw ``jax.dlpack.from_dlpack`` too. Where the
    import refuses the layout instead, the answer is ``True``: the refusal is then raised.
    """
    found = _permuted_ok.get(target)
    if found is None:
        probe = torch.arange(6, dtype=torch.float32, device=target.device_kind).reshape(2, 3).T
        try:
            array = import_tensor(probe, target, None)
        except (ValueError, RuntimeError):
            found = True
        else:
            found = bool(np.array_equal(np.asarray(array), probe.cpu().numpy()))
        _permuted_ok[target] = found
    return found


def _translate(err: Exception, tensor: torch.Tensor) -> Exception:
    """Turn JAX's runtime errors into the precise classes, naming the tensor."""
    text = str(err)
    what = (
        f"tensor(shape={tuple(tensor.shape)}, dtype={tensor.dtype}, "
        f"stride={tensor.stride()}, data_ptr={tensor.data_ptr():#x})"
    )
    if "aligned" in text:
        return MisalignedViewError(
            f"to_jax: cannot alias {what} without a copy: its address is not aligned as "
            f"JAX requires on {tensor.device.type} (64 bytes on CPU). Workspace views are "
            f"256-byte aligned; for another tensor, .clone() it (a copy). JAX said: {text}"
        )
    if "striding" in text or "layout" in text:
        return UnsupportedLayoutError(
            f"to_jax: cannot alias {what} without a copy: JAX accepts only dense strides "
            "(a contiguous tensor or a permutation of one), not step slices, column "
            f"slices or expand(). Call .contiguous() first (a copy). JAX said: {text}"
        )
    if "DLPack" in text and ("type" in text or "width" in text):
        return UnsupportedDtypeError(f"to_jax: JAX cannot import dtype {tensor.dtype}: {text}")
    return ZeroCopyError(f"to_jax: JAX cannot alias {what} without a copy. JAX said: {text}")


@dataclasses.dataclass(frozen=True)
class Carrier:
    """How a dtype NumPy's DLPack export refuses (bfloat16, float8) crosses over: as
    unsigned integers of the same width, viewed back as the torch dtype."""

    host: np.dtype[Any]
    torch: torch.dtype


_NPY_USERDEF = 256  # NumPy's first type number for dtypes registered by other packages


def carriers(dtypes: Iterable[np.dtype[Any]]) -> dict[np.dtype[Any], Carrier | None]:
    """For each JAX dtype torch has, its :class:`Carrier`, or ``None`` where NumPy exports
    it itself: the one table ``to_torch`` looks a dtype up in.

    Example:
        >>> import numpy as np, ml_dtypes
        >>> table = carriers([np.dtype("float32"), np.dtype(ml_dtypes.bfloat16)])
        >>> table[np.dtype("float32")], table[np.dtype(ml_dtypes.bfloat16)].torch
        (None, torch.bfloat16)
    """
    table: dict[np.dtype[Any], Carrier | None] = {}
    for dtype in dtypes:
        carrier = None
        if dtype.num >= _NPY_USERDEF:  # ml_dtypes' extension types (bfloat16, float8...)
            carrier = Carrier(np.dtype(f"uint{8 * dtype.itemsize}"), getattr(torch, dtype.name))
        table[dtype] = carrier
    return table


def _host_export_works() -> bool:
    """Whether NumPy exports read-only arrays (DLPack 1.x) and torch imports them."""
    try:
        probe = np.zeros(1, np.uint8)
        probe.flags.writeable = False
        return bool(_from_capsule(probe.__dlpack__(max_version=(1, 0))).numel() == 1)
    except (TypeError, BufferError, RuntimeError):  # pragma: no cover - older numpy/torch
        return False


#: Whether CPU arrays cross over through jaxlib's host view (see the module docstring).
HOST_EXPORT = _host_export_works()


def export_array(array: jax.Array, stream: Any, carrier: Carrier | None) -> torch.Tensor:
    """Alias ``array``'s bytes as a torch tensor, ordered after the computation producing it.

    ``stream``: the torch stream that must wait for the array (CUDA only; ``None`` means the
    current stream). On CPU, this blocks until the array is ready. ``carrier``: the
    array's dtype's entry of :func:`carriers`.

    Raises:
        ShardedArrayError: the array spans several devices.
        DeletedArrayError: the array was deleted (or donated).
    """
    if type(array.sharding) is not SingleDeviceSharding and len(array.sharding.device_set) != 1:
        raise ShardedArrayError(
            f"to_torch: the array is sharded over {len(array.sharding.device_set)} devices; "
            "a torch tensor aliases one device's memory. Pass one shard "
            "(array.addressable_shards[i].data)."
        )
    if array.is_deleted():
        raise DeletedArrayError(
            f"to_torch: the array (shape={array.shape}, dtype={array.dtype}) was deleted "
            "(array.delete(), or donated to a jitted function): it has no bytes to hand "
            "over. Hand it over before deleting or donating it; the tensor then keeps the "
            "bytes alive."
        )
    if array.platform() == "cpu":
        if HOST_EXPORT:
            tensor = _export_host(array, carrier)
            if tensor is not None:
                return tensor
        return _export_shard(array, None, on_gpu=False)
    return _export_shard(array, stream, on_gpu=True)


def _export_host(array: jax.Array, carrier: Carrier | None) -> torch.Tensor | None:
    """The tensor over jaxlib's host view of a CPU array, or ``None`` if that view is a copy."""
    if not use_private_path:
        host, copied = np.asarray(array), None
    elif carrier is None:  # the buffer protocol: cheapest, and always zero-copy
        try:
            host, copied = np.asarray(memoryview(array)), False
        except BufferError:  # a layout the buffer protocol cannot describe
            return None
    else:  # bfloat16, float8: the host view np.asarray is made of
        host, copied = _private.host_view(array)
    if carrier is not None:
        host = host.view(carrier.host)
    if use_private_path:
        tensor: torch.Tensor = _from_capsule(host.__dlpack__(max_version=(1, 0)))
    else:
        tensor = torch.utils.dlpack.from_dlpack(host)
    if not tensor.numel():  # NumPy exports an empty array with zero strides: make them dense
        tensor = tensor.as_strided(tensor.shape, dense_strides(tensor.shape))
    elif copied or (copied is None and tensor.data_ptr() != array.unsafe_buffer_pointer()):
        return None  # a host copy (a non-default layout): alias the buffer through DLPack
    return tensor.view(carrier.torch) if carrier is not None else tensor


def dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (an empty dim counts as one).

    Example:
        >>> dense_strides((2, 3, 4)), dense_strides((5, 0, 2))
        ((12, 4, 1), (2, 2, 1))
    """
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _export_shard(array: jax.Array, stream: Any, *, on_gpu: bool) -> torch.Tensor:
    """DLPack export of ``array.addressable_data(0)``, as JAX's own ``__dlpack__`` does."""
    if use_private_path:
        stream_ptr = _consumer_stream(array, stream) if on_gpu else None
        shard = array.addressable_data(0)
        return _from_capsule(_buffer_to_tensor(shard, stream=stream_ptr))
    ordered = torch.cuda.stream(stream) if on_gpu and stream is not None else None
    with ordered or contextlib.nullcontext():  # torch passes its current stream to JAX
        return torch.utils.dlpack.from_dlpack(array)


def _consumer_stream(array: jax.Array, stream: Any) -> int:
    if stream is None:
        device = _private.sharding_device(array.sharding)
        stream = torch.cuda.current_stream(device.local_hardware_id)
    # DLPack's convention: 1 names CUDA's legacy default stream (torch's stream 0).
    return int(stream.cuda_stream) or 1


def is_array_impl(value: object) -> bool:
    """Whether ``value`` is a concrete ``jax.Array`` (the fast check first)."""
    if type(value) is _ArrayImpl:
        return True
    return isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)
