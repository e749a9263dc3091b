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
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import jax
import torch
from jax.extend import backend as jax_backend
from jax.sharding import SingleDeviceSharding

from ._jax_errors import (
    DeviceNotVisibleError,
    MisalignedViewError,
    ShardedArrayError,
    UnsupportedDtypeError,
    UnsupportedLayoutError,
    ZeroCopyError,
)

try:  # private, version-gated: the signature below is the one of jaxlib extension >= 467
    from jax._src.lib import _jax as _jaxlib  # type: ignore[attr-defined]
    from jax._src.lib import jaxlib_extension_version as _EXTENSION_VERSION

    _tensor_to_buffer: Any = _jaxlib.dlpack_managed_tensor_to_buffer
    _buffer_to_tensor: Any = _jaxlib.buffer_to_dlpack_managed_tensor
    _ArrayImpl: Any = _jaxlib.ArrayImpl
    PRIVATE_PATH_AVAILABLE = _EXTENSION_VERSION >= 467
except (ImportError, AttributeError):  # pragma: no cover - depends on the installed jax
    PRIVATE_PATH_AVAILABLE = False
    _ArrayImpl = None

_to_capsule = torch._C._to_dlpack
_from_capsule = torch._C._from_dlpack

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


_CPU_KEY = ("cpu", 0)
_targets: dict[tuple[str, int], Target] = {}
_targets_lock = threading.Lock()
_external_streams: dict[tuple[int, int], Any] = {}
_events: dict[int, Any] = {}
_wait_lock = threading.Lock()


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
    return Target(device=device, dl_type=dl_type, on_gpu=kind != "cpu")


def import_tensor(tensor: torch.Tensor, target: Target, stream: Any) -> jax.Array:
    """Alias ``tensor``'s bytes as a new ``jax.Array`` (no copy; raises where one is needed).

    ``stream``: the torch stream whose queued work the array is ordered after (CUDA only;
    ``None`` means the tensor's current stream).
    """
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
    if array.unsafe_buffer_pointer() != tensor.data_ptr() and tensor.numel():
        raise ZeroCopyError(  # never expected: copy=False forbids it; kept as a tripwire
            "to_jax: JAX returned a copy although copy=False was asked; refusing it."
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
    return err


def export_array(array: jax.Array, stream: Any) -> torch.Tensor:
    """Alias ``array``'s bytes as a torch tensor, ordered after the computation producing it.

    ``stream``: the torch stream that must wait for the array (CUDA only; ``None`` means the
    current stream). On CPU, this blocks until the array is ready.

    Raises:
        ShardedArrayError: the array spans several devices.
    """
    if type(array.sharding) is not SingleDeviceSharding and len(array.sharding.device_set) != 1:
        raise ShardedArrayError(
            f"to_torch: the array is sharded over {len(array.sharding.device_set)} devices; "
            "a torch tensor aliases one device's memory. Pass one shard "
            "(array.addressable_shards[i].data)."
        )
    on_gpu = array.platform() != "cpu"
    if use_private_path:
        stream_ptr = _consumer_stream(array, stream) if on_gpu else None
        return _from_capsule(_buffer_to_tensor(array, stream=stream_ptr))
    ordered = torch.cuda.stream(stream) if on_gpu and stream is not None else None
    with ordered or contextlib.nullcontext():  # torch passes its current stream to JAX
        return torch.utils.dlpack.from_dlpack(array)


def _consumer_stream(array: jax.Array, stream: Any) -> int:
    if stream is None:
        stream = torch.cuda.current_stream(array.sharding._device.local_hardware_id)  # type: ignore[attr-defined]
    # DLPack's convention: 1 names CUDA's legacy default stream (torch's stream 0).
    return int(stream.cuda_stream) or 1


def is_array_impl(value: object) -> bool:
    """Whether ``value`` is a concrete ``jax.Array`` (the fast check first)."""
    if type(value) is _ArrayImpl:
        return True
    return isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)
