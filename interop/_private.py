"""Framework-private hooks: each behind a version gate, each with a public fallback.

Every use of another framework's internals (``torch._dynamo...``, ``jax._src...``) that
this package makes lives here, so that a framework upgrade breaks one room. Each hook says
which releases it was checked against, what gates it, and what happens without it. The
bridge's tests and these hooks' also run on the newest releases (torch 2.15.0 and jax
0.12.0.1, on Python 3.12: ``make test-newest-jax NEWEST_TORCH=2.15.0``), where the DLPack,
storage-count and constant-result hooks take their private paths (checked).

- :func:`dynamo_skips_jax`: Dynamo runs JAX's Python code eagerly instead of tracing it.
  Private: ``torch._dynamo.trace_rules.add`` (torch 2.2 to 2.13, checked on 2.13), the rule
  Dynamo applies to the third-party libraries it never traces (NumPy, pandas...). Gate: the
  function exists. Fallback: nothing is changed, and JAX code inside a compiled function
  fails to trace as before; put it under ``torch.compiler.disable`` (public) or in a
  function wrapped with :func:`interop.jax_call`.
- :func:`constant_result`: ``torch.compiler.assume_constant_result`` without importing
  Dynamo. The public function imports ``torch._dynamo`` (over a second) only to set one
  attribute, ``_dynamo_marked_constant`` (torch 2.1 to 2.15, checked on 2.13 and 2.15), that
  Dynamo reads when it traces a call. Gate: torch older than 2.16, the releases checked.
  Fallback: the public function itself.
- :func:`dynamo_runs_eagerly`: what ``torch.compiler.disable`` does to a function, in place,
  without its wrapper. Private: the function attributes ``_torchdynamo_disable`` and
  ``_torchdynamo_disable_msg`` that Dynamo reads (checked on torch 2.13), and
  ``torch._C._dynamo.eval_frame.set_code_exec_strategy`` (torch 2.6 and later, checked on
  2.13), which skips the function's frames and all they call. Gate: the strategy function
  imports. Fallback: the attributes alone (a graph break with its reason; Dynamo may then
  compile the inner frames). Public equivalent: ``torch.compiler.disable(fn)``, a wrapper.
- :func:`interpreter_files`: the files of ``importlib._bootstrap`` and
  ``importlib._bootstrap_external`` (checked on CPython 3.11), the interpreter's frames
  between ``runpy`` and the user's code where they are not frozen. Gate: the modules import
  and have a file. Fallback: none of them (frozen frames, ``<frozen ...>``, are still known).
- :func:`jaxlib_dlpack`: jaxlib's C++ DLPack entry points behind ``jax.dlpack``, and the
  concrete array class: ``jax._src.lib._jax``'s ``dlpack_managed_tensor_to_buffer``,
  ``buffer_to_dlpack_managed_tensor`` and ``ArrayImpl`` (signatures of jaxlib extension
  467, checked on jax 0.10.2). Gate: ``jaxlib_extension_version >= 467``. Fallback:
  ``None``, and the handoff uses ``jax.dlpack.from_dlpack(copy=False)`` and
  ``torch.from_dlpack`` (public; slower, never different).
- :func:`torch_capsules`: torch's DLPack capsule functions without the Python wrappers:
  ``torch._C._to_dlpack`` and ``torch._C._from_dlpack`` (checked on torch 2.13). Gate: both
  exist. Fallback: ``torch.utils.dlpack.to_dlpack`` and ``torch.utils.dlpack.from_dlpack``
  (public; the latter takes a capsule too).
- :func:`host_view`: the NumPy host view of a CPU ``jax.Array`` and whether it is a copy:
  ``_single_device_array_to_np_array_did_copy()`` (checked on jax 0.10.2). Gate: the method
  exists. Fallback: ``np.asarray(array)``, "copied" unknown (``None``: the caller compares
  addresses).
- :func:`sharding_device`: the one device of a single-device sharding: its ``_device``
  (checked on jax 0.10.2). Gate: the attribute exists. Fallback: the one element of
  ``sharding.device_set`` (public; builds a set).
- :func:`x64_enabled`: JAX's 64-bit mode as in force now, ``with jax.enable_x64(True):``
  included: ``jax._src.config.enable_x64.value`` (checked on jax 0.10.2). Gate: it imports.
  Fallback: ``jax.config.read("jax_enable_x64")`` (public; the global setting only).
- :func:`jax_backends_started` and :func:`jax_started_platforms`: whether JAX's backends
  have started, and which, without starting them: ``jax._src.xla_bridge``'s
  ``backends_are_initialized()`` and ``_backends`` (checked on jax 0.10.2). Gate: each
  exists. Fallback: "not started" and "none" (every public function that lists backends
  starts them): settings are then applied where they may come too late, and no
  preallocation is reported as done.
- :func:`held_elsewhere`: whether a retired buffer's storage has owners besides the
  manager's: ``torch._C._storage_Use_Count`` of ``untyped_storage()._cdata``, and whether
  the buffer is a slice of a block (``_base``); checked on torch 2.13. Gate: both exist.
  Fallback: ``True`` ("unknown": the buffer is watched).
- :func:`version_counter`: a tensor's version counter, which every in-place write bumps
  (through any view of the same memory): ``Tensor._version`` (checked on torch 2.13; the
  counter autograd's "modified by an inplace operation" check reads). Gate: the attribute
  exists. Fallback: ``None`` ("unknown"), and ``torch_call`` cannot tell that its function
  wrote into an input.
- :func:`release_weak_storage`: what ``StorageWeakRef.__del__`` does, for an instance whose
  ``__init__`` may never have run: it reads the private ``_free_weak_ref`` that ``__init__``
  sets last (checked on torch 2.13). Gate: the attribute is set. Fallback: torch's own
  finaliser where ``cdata`` was set (the attribute renamed), else nothing (nothing is held).
- :data:`transforms_active`: whether a ``torch.func`` transform is active:
  ``torch._C._are_functorch_transforms_active`` (checked on torch 2.13), what
  ``custom_function_call`` asks. Gate: it exists. Fallback: never (a transformed tensor
  then reaches ``to_jax``, which refuses it: an error, not a wrong answer).
- :func:`dual_level_active`: whether a forward-mode AD level is open:
  ``torch.autograd.forward_ad._current_level`` (checked on torch 2.13). Gate: an int.
  Fallback: ``True`` (every tensor is asked for its tangent: slower, never wrong).
- :func:`forward_tangent`: a tensor's tangent at the open dual level
  (``forward_ad.unpack_dual``), asked only where :func:`dual_level_active` says a level is
  open (its gate and fallback).
- :func:`is_transform_wrapper`: ``torch._C._functorch.is_functorch_wrapped_tensor``
  (checked on torch 2.13 and 2.15). Gate: it exists. Fallback: ``False`` (``to_jax``
  then raises torch's own error for a wrapper: an error, not a wrong answer).
- :func:`is_fake_tensor`: ``isinstance`` of ``torch._subclasses.fake_tensor.FakeTensor``
  (checked on torch 2.13 and 2.15). Gate: it imports. Fallback: ``False``.
- :func:`fake_mode_active`: whether a ``FakeTensorMode`` (a ``make_fx`` fake trace's too) is
  active: ``torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)`` (checked on
  torch 2.13). Gate: both exist. Fallback: ``False`` (a deep copy under the mode then
  raises torch's own error: an error, not a wrong answer).
- :func:`jit_options`: a ``jax.jit`` wrapper's options as a hashable value, from its
  ``_jit_info`` named tuple (checked on jax 0.10.2), so that wrappers made alike share
  plans. Gate: it has named fields. Fallback: ``None`` (plans are kept per wrapper).
- :func:`legacy_vmap_level`, :func:`legacy_unbatched`, :func:`legacy_batched`: torch's
  legacy vmap, which ``torch.autograd.grad(is_grads_batched=True)`` and
  ``torch.autograd.functional.jacobian(vectorize=True)`` use and which has no rule for
  an ``autograd.Function``: ``torch._C._functorch.is_legacy_batchedtensor``, the vmap
  mode's nesting counters, ``torch._remove_batch_dim`` and ``torch._add_batch_dim``
  (checked on torch 2.13). Gate: the first three exist. Fallback: a batched tensor is not
  recognised and reaches ``to_jax``, which refuses it (an error, never a wrong answer).
- :func:`autograd_function_apply`: an ``autograd.Function``'s ``apply`` without the
  public method's ``inspect.signature`` binding on every call (the "public apply" row of
  ``benchmarks/bench_grad_boundary.py`` shows what it saves): ``torch._C._FunctionBase``'s
  C ``apply`` and ``torch._C._functorch.unwrap_if_dead`` (checked on torch 2.13). Gate:
  both exist. Fallback: the public ``apply``. Used only while no ``torch.func``
  transform is active (the public method routes those through functorch).
- :func:`modes_active` and :func:`outside_modes`: whether a torch mode or transform is
  active (a ``TorchFunctionMode``, a ``TorchDispatchMode`` such as ``FakeTensorMode``, a
  ``torch.func`` transform), and a context where none is, for the tensors the manager
  keeps (buffers, typed aliases, memoised views, persistent tensors), which must be real
  whatever mode the call that made them ran in: ``torch._C._is_torch_function_mode_enabled``,
  ``torch._C._len_torch_dispatch_stack``, ``torch._C._functorch.peek_interpreter_stack``,
  ``torch.utils._python_dispatch._disable_current_modes`` and
  ``torch._functorch.pyfunctorch.temporarily_clear_interpreter_stack`` (checked on torch
  2.13 and 2.15), with the public ``torch._C.DisableTorchFunction``. Gate: all exist.
  Fallback: never active, and the tensors are made in the caller's modes, as the original
  makes its own.
- :func:`below_eager_dispatch` and :func:`eager_dispatch`: whether torch code runs with
  less of the dispatcher than eager code (JAX called from a custom op's kernel: a
  ``jax_call`` compiled by ``torch.compile`` runs JAX there, and a ``torch_call`` inside it
  calls torch back), and a context with the dispatch an eager caller has (the default one,
  read on a new thread; autocast and the keys the thread includes kept):
  ``torch._C._dispatch_tls_is_dispatch_key_excluded``, ``_dispatch_tls_local_exclude_set``,
  ``_dispatch_tls_local_include_set``, ``DispatchKeySet.from_raw_repr`` and
  ``_ForceDispatchKeyGuard`` (checked on torch 2.13 and 2.15). Gate: all exist. Fallback:
  never below (a ``torch_call``'s backward inside a compiled ``jax_call`` then fails with
  ``NoGradientError``, as before).
- :func:`forget_failed_tokens`: after a computation over several devices whose callback
  failed (a ``torch_call`` on a sharded input), JAX keeps the failed computation's output
  tokens (``jax._src.dispatch.runtime_tokens.output_runtime_tokens``, per thread and
  device; checked on jax 0.10.2 and 0.12.0.1), and every later ``jax.effects_barrier()``
  and JAX's exit handlers raise its error again (printed twice at exit, "Exception ignored
  in atexit callback"), after the caller had it. The failed tokens are dropped. Gate: the
  dict exists. Fallback: nothing dropped (the error is printed again at exit).
- :func:`saved_tensor_hooks_active`: whether default saved-tensor hooks are set
  (``torch.autograd.graph.saved_tensors_hooks``, ``save_on_cpu``, non-reentrant
  checkpointing): ``torch._C._autograd._top_saved_tensors_default_hooks(False)`` (checked
  on torch 2.13 and 2.15). Gate: it exists. Fallback: ``False`` (a ``jax_call`` then keeps
  its forward's JAX buffers until the backward, as without hooks: the backward still reads
  what the hooks unpack, only no memory is saved).
- :func:`storage_from_weak`: the storage a ``StorageWeakRef`` refers to, while it lives:
  ``torch.UntypedStorage._new_with_weak_ptr(ref.cdata)`` (checked on torch 2.13). Gate: it
  exists. Fallback: ``None``, as for a freed storage (no public function turns a weak
  reference back into a storage).
- :func:`make_fx_tracing`: whether ``make_fx`` traces now (``torch.func.linearize`` runs
  it): ``torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY)`` (checked on
  torch 2.13). Gate: both exist, else ``torch.fx.experimental.proxy_tensor.get_proxy_mode``
  where it imports. Fallback: never tracing (a ``jax_call`` is then recorded as a
  constant, as before).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

_F = TypeVar("_F", bound=Callable[..., Any])
#: The torch releases whose Dynamo reads ``_dynamo_marked_constant`` (checked: 2.13, 2.15).
_MARKED_CONSTANT_RELEASES = ((2, 1), (2, 16))

#: The modules Dynamo must not trace: JAX's Python code (``jax``) and jaxlib's.
JAX_MODULES = ("jax", "jaxlib")
_TRACE_RULES = "torch._dynamo.trace_rules"


def dynamo_skips_jax() -> bool:
    """Make Dynamo call JAX's functions eagerly (a graph break each) rather than trace them.

    What Dynamo did with JAX code in a compiled function (torch 2.13): it traced into
    ``jax.numpy`` and failed inside JAX with errors that give no clue (``sin requires
    ndarray or scalar arguments, got DynamicJaxprTracer``). Skipped, each JAX call runs
    as plain Python, as NumPy's do. If Dynamo is not imported yet (importing it costs
    over a second), the rule is added right after its import, by a one-shot import hook.

    Returns:
        Whether the rule is in force now (``False`` until Dynamo's first import, and where
        the gate fails: then nothing changes).

    Example:
        >>> import interop._private as private
        >>> private.dynamo_skips_jax() in (True, False)
        True
    """
    rules = sys.modules.get(_TRACE_RULES)
    if rules is not None:
        return _add_skips(rules)
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_TRACE_RULES, _add_skips))
    return False


def _torch_release() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def constant_result(fn: _F) -> _F:
    """Mark ``fn`` as ``torch.compiler.assume_constant_result`` does: Dynamo calls it while
    tracing and puts its result in the graph as a constant.

    Args:
        fn: a function of Python constants, returning Python constants.

    Returns:
        ``fn``, marked.

    Example:
        >>> def answer() -> int:
        ...     return 42
        >>> constant_result(answer) is answer
        True
    """
    low, high = _MARKED_CONSTANT_RELEASES
    if low <= _torch_release() < high:
        fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
        return fn
    public: Any = torch.compiler.assume_constant_result  # pragma: no cover - newer torch
    return public(fn)  # type: ignore[no-any-return]  # pragma: no cover


def _add_skips(rules: types.ModuleType) -> bool:
    add = getattr(rules, "add", None)
    if not callable(add):  # pragma: no cover - torch without trace_rules.add (< 2.2)
        return False
    try:
        for name in JAX_MODULES:
            add(name)
    except Exception:  # pragma: no cover - a changed rule: keep Dynamo's own behaviour
        return False
    return True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` once, right after module ``name`` is first executed."""

    def __init__(self, name: str, then: Callable[[types.ModuleType], object]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot: the finders below find the real module
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # pragma: no cover - a namespace package or a legacy loader
        spec.loader = _ThenLoader(spec.loader, self.then)  # a loader may serve other modules
        return spec


class _ThenLoader(importlib.abc.Loader):
    """``loader``, then ``then(module)`` once the module has run; the rest delegated."""

    def __init__(self, loader: Any, then: Callable[[types.ModuleType], object]) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        self.then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename...: for tracebacks
        return getattr(self.loader, name)


_SKIP_RECURSIVELY: Any = None
_set_strategy: Any = None
try:
    from torch._C._dynamo.eval_frame import (  # torch >= 2.6
        _FrameAction,
        _FrameExecStrategy,
        set_code_exec_strategy,
    )
except ImportError:  # pragma: no cover - torch < 2.6
    pass
else:
    _SKIP_RECURSIVELY = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    _set_strategy = set_code_exec_strategy


def dynamo_runs_eagerly(function: types.FunctionType, reason: str) -> bool:
    """Mark ``function`` as ``torch.compiler.disable`` marks one, in place: Dynamo
    graph-breaks at its calls (``reason`` is the break's reason) and runs it eagerly.

    Args:
        function: a plain Python function.
        reason: why the call cannot be traced (``fullgraph=True``'s error carries it).

    Returns:
        Whether its frames, and all they call, are skipped too (torch 2.6 and later).

    Example:
        >>> def scratch() -> int:
        ...     return 1
        >>> dynamo_runs_eagerly(scratch, "why") in (True, False), scratch()
        (True, 1)
    """
    vars(function).update(_torchdynamo_disable=True, _torchdynamo_disable_msg=reason)
    if _SKIP_RECURSIVELY is None:
        return False  # pragma: no cover - torch < 2.6
    _set_strategy(function.__code__, _SKIP_RECURSIVELY)
    return True


_BOOTSTRAP_MODULES = ("importlib._bootstrap", "importlib._bootstrap_external")


def interpreter_files() -> tuple[str, ...]:
    """The absolute paths of importlib's bootstrap modules, where they are files.

    Returns:
        The paths (none where the modules are frozen or absent).

    Example:
        >>> all(path.endswith(".py") for path in interpreter_files())
        True
    """
    paths = []
    for name in _BOOTSTRAP_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # pragma: no cover - another interpreter
            continue
        path = getattr(module, "__file__", None)
        if path is not None:
            paths.append(os.path.abspath(path))
    return tuple(paths)


@dataclasses.dataclass(frozen=True)
class JaxlibDlpack:
    """jaxlib's DLPack entry points (see :func:`jaxlib_dlpack`)."""

    #: ``(capsule, device, stream, copy, dl_device_type) -> jax.Array``.
    tensor_to_buffer: Any
    #: ``(array, stream=...) -> capsule``.
    buffer_to_tensor: Any
    #: The concrete ``jax.Array`` class.
    array_impl: Any


#: The jaxlib extension whose DLPack signatures :class:`JaxlibDlpack` calls (checked: 467).
JAXLIB_EXTENSION_AT_LEAST = 467


def jaxlib_dlpack() -> JaxlibDlpack | None:
    """jaxlib's DLPack entry points, or ``None`` where this jax has other ones.

    Returns:
        The entry points, looked up once by the caller (imports jax).

    Example:
        >>> found = jaxlib_dlpack()
        >>> found is None or callable(found.tensor_to_buffer)
        True
    """
    try:
        from jax._src.lib import _jax as extension  # type: ignore[attr-defined]
        from jax._src.lib import jaxlib_extension_version

        if jaxlib_extension_version < JAXLIB_EXTENSION_AT_LEAST:
            return None  # pragma: no cover - an older jaxlib
        return JaxlibDlpack(
            extension.dlpack_managed_tensor_to_buffer,
            extension.buffer_to_dlpack_managed_tensor,
            extension.ArrayImpl,
        )
    except (ImportError, AttributeError):  # pragma: no cover - depends on the installed jax
        return None


def torch_capsules() -> tuple[Callable[[torch.Tensor], Any], Callable[[Any], torch.Tensor]]:
    """torch's DLPack export and import of capsules: the C functions where torch has them.

    Returns:
        ``(to_capsule, from_capsule)``.

    Example:
        >>> import torch
        >>> to_capsule, from_capsule = torch_capsules()
        >>> from_capsule(to_capsule(torch.arange(3))).tolist()
        [0, 1, 2]
    """
    to_capsule = getattr(torch._C, "_to_dlpack", None)
    from_capsule = getattr(torch._C, "_from_dlpack", None)
    if callable(to_capsule) and callable(from_capsule):
        return to_capsule, from_capsule
    public = torch.utils.dlpack  # pragma: no cover - torch without the C functions
    return public.to_dlpack, public.from_dlpack  # type: ignore[attr-defined]  # pragma: no cover


def host_view(array: Any) -> tuple[np.ndarray[Any, Any], bool | None]:
    """The NumPy view of a CPU ``jax.Array`` that ``np.asarray`` is made of, and whether
    jaxlib had to copy to make it.

    Args:
        array: a single-device CPU ``jax.Array``.

    Returns:
        ``(host, copied)``; ``copied`` is ``None`` where jaxlib does not say.

    Example:
        >>> import jax.numpy as jnp
        >>> host, copied = host_view(jnp.arange(3))
        >>> host.tolist(), copied in (False, None)
        ([0, 1, 2], True)
    """
    did_copy = getattr(array, "_single_device_array_to_np_array_did_copy", None)
    if did_copy is None:
        return np.asarray(array), None
    host, copied = did_copy()
    return host, bool(copied)


def sharding_device(sharding: Any) -> Any:
    """The one device of a single-device ``sharding``.

    Example:
        >>> import jax.numpy as jnp
        >>> array = jnp.zeros(2)
        >>> sharding_device(array.sharding) == next(iter(array.devices()))
        True
    """
    device = getattr(sharding, "_device", None)
    if device is None:
        (device,) = sharding.device_set
    return device


_x64_state: Any = None


def x64_enabled() -> bool:
    """Whether JAX's 64-bit mode is on now (``with jax.enable_x64(True):`` included).

    Example:
        >>> import jax
        >>> x64_enabled() == bool(jax.config.read("jax_enable_x64"))
        True
    """
    global _x64_state
    if _x64_state is None:
        try:
            from jax._src.config import enable_x64 as state

            _x64_state = state
        except ImportError:  # pragma: no cover - depends on the installed jax
            _x64_state = False
    if _x64_state is False:  # pragma: no cover - depends on the installed jax
        import jax

        return bool(jax.config.read("jax_enable_x64"))  # type: ignore[no-untyped-call]
    return bool(_x64_state.value)


def _xla_bridge() -> Any:
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - depends on the installed jax
        return None
    return xla_bridge


def jax_backends_started() -> bool:
    """Whether JAX's backends have started (never starts them; imports jax).

    Example:
        >>> jax_backends_started() in (True, False)
        True
    """
    started = getattr(_xla_bridge(), "backends_are_initialized", None)
    return bool(started()) if callable(started) else False


def jax_started_platforms() -> tuple[str, ...]:
    """The platforms of JAX's started backends (never starts them; imports jax).

    Example:
        >>> "tpu" in jax_started_platforms()
        False
    """
    started = getattr(_xla_bridge(), "_backends", None)
    return tuple(started) if isinstance(started, dict) else ()


_use_count: Any = getattr(torch._C, "_storage_Use_Count", None)


def held_elsewhere(buffer: torch.Tensor) -> bool:
    """Whether something besides the manager holds ``buffer``'s storage (a view kept across
    calls, an array imported from one), once the manager dropped its own references.

    A count of the storage's owners (``torch._C._storage_Use_Count``): ``buffer``, the block
    it was sliced from (its ``_base``, when the allocator over-allocated to align it) and
    the storage object made to ask are the manager's own. Only a buffer held elsewhere is
    watched (the retired buffers' records, ``_workspace/_retired.py``); a buffer nothing
    holds is freed now, and watching it would cost a weak reference per growth. Where torch
    tells neither the count nor ``_base``, every retired buffer is watched.

    Example:
        >>> import torch
        >>> buffer = torch.empty(8)
        >>> held_elsewhere(buffer)
        False
        >>> view = buffer[2:]
        >>> held_elsewhere(buffer)
        True
    """
    if _use_count is None or not hasattr(buffer, "_base"):
        return True
    own = 2 if buffer._base is None else 3
    storage = buffer.untyped_storage()
    # torch keeps one Python storage object per storage: a caller's ``untyped_storage()``
    # (or typed ``storage()``) is the object asked for here, one owner for both.
    if sys.getrefcount(storage) > _FRESH_STORAGE_REFS:
        return True
    return int(_use_count(storage._cdata)) > own


def _fresh_storage_refs() -> int:
    """``sys.getrefcount`` of a storage object nobody else holds, asked as
    :func:`held_elsewhere` asks (a local, the tensor alive): it differs between Pythons."""
    buffer = torch.empty(1)
    storage = buffer.untyped_storage()
    return sys.getrefcount(storage)


_FRESH_STORAGE_REFS = _fresh_storage_refs()


def version_counter(tensor: torch.Tensor) -> int | None:
    """``tensor``'s version counter (bumped by every in-place write), ``None`` if unknown.

    Example:
        >>> import torch
        >>> t = torch.zeros(3)
        >>> before = version_counter(t)
        >>> _ = t[1:].add_(1)  # a write through a view counts too
        >>> before is None or version_counter(t) > before
        True
    """
    version: int | None = getattr(tensor, "_version", None)
    return version


def release_weak_storage(ref: StorageWeakRef) -> None:
    """Release ``ref``'s weak reference, as its finaliser does, even if ``__init__`` never
    ran (then nothing is held and nothing is done).

    Example:
        >>> class Ref(StorageWeakRef):
        ...     __slots__ = ()
        ...     __del__ = release_weak_storage
        >>> ref = Ref.__new__(Ref)  # never constructed: nothing to release
        >>> del ref
    """
    free = getattr(ref, "_free_weak_ref", None)  # set last in __init__, after cdata
    if free is not None:
        free(ref.cdata)
    elif getattr(ref, "cdata", None) is not None:
        StorageWeakRef.__del__(ref)  # type: ignore[no-untyped-call]


def storage_from_weak(ref: StorageWeakRef) -> torch.UntypedStorage | None:
    """The storage ``ref`` refers to, or ``None`` once it is freed.

    Example:
        >>> import torch
        >>> storage = torch.zeros(2).untyped_storage()
        >>> storage_from_weak(StorageWeakRef(storage)).nbytes()
        8
    """
    new = getattr(torch.UntypedStorage, "_new_with_weak_ptr", None)
    if new is None:
        return None  # pragma: no cover - depends on the installed torch
    found: torch.UntypedStorage | None = new(ref.cdata)
    return found


def _transforms_inactive() -> bool:  # pragma: no cover - torch without the check
    return False


#: Whether a ``torch.func`` transform (grad, vjp, jvp, vmap...) is active now: torch's own
#: check, ``torch._C._are_functorch_transforms_active`` (checked on torch 2.13), the one
#: ``custom_function_call`` asks before routing an ``autograd.Function`` through functorch.
#: Fallback: never (then a transformed tensor reaches ``to_jax``, which refuses it).
transforms_active: Callable[[], bool] = getattr(
    torch._C, "_are_functorch_transforms_active", _transforms_inactive
)


_MODE_CHECKS: tuple[Callable[[], Any], ...] | None = None
try:
    _MODE_CHECKS = (
        torch._C._is_torch_function_mode_enabled,
        torch._C._len_torch_dispatch_stack,
        torch._C._functorch.peek_interpreter_stack,
    )
    from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext
    from torch.utils._python_dispatch import _disable_current_modes
except (AttributeError, ImportError):  # pragma: no cover - depends on the installed torch
    _MODE_CHECKS = None


def _no_mode() -> None:  # pragma: no cover - torch without the checks
    return None


#: The three C checks :func:`modes_active` begins with (function modes, dispatch modes,
#: transforms), for a caller on the growth path to ask inline: each false (``None`` for
#: the last) means no mode (``count_growth_calls.py``'s budget counts Python calls).
MODE_PROBES: tuple[Callable[[], Any], ...] = _MODE_CHECKS or (_no_mode, _no_mode, _no_mode)


def modes_active() -> bool:
    """Whether a torch mode or transform is active now: a ``TorchFunctionMode``, a
    ``TorchDispatchMode`` (``FakeTensorMode`` too) or a ``torch.func`` transform (about
    0.1 µs; see the module for the hooks). Not a default device (``with torch.device(...)``,
    ``torch.set_default_device``): a mode that only fills in the device of factories
    given none, which changes none of the manager's tensors (each names its device).

    Example:
        >>> import torch
        >>> from torch._subclasses.fake_tensor import FakeTensorMode
        >>> with FakeTensorMode():
        ...     inside = modes_active()
        >>> with torch.device("cpu"):
        ...     device = modes_active()
        >>> inside, device, modes_active()
        (True, False, False)
    """
    if _MODE_CHECKS is None:  # pragma: no cover - depends on the installed torch
        return False
    function_modes, dispatch_modes, transforms = _MODE_CHECKS
    if dispatch_modes() or transforms() is not None:
        return True
    return bool(function_modes()) and not all(
        type(mode) is DeviceContext
        for mode in _get_current_function_mode_stack()  # type: ignore[no-untyped-call]
    )


@contextlib.contextmanager
def outside_modes() -> Iterator[None]:
    """A context where no torch mode or transform of the caller's is active (they come
    back when it ends): what the manager keeps is made there, as real tensors.

    Example:
        >>> import torch
        >>> from torch._subclasses.fake_tensor import FakeTensorMode
        >>> with FakeTensorMode():
        ...     with outside_modes():
        ...         real = torch.empty(2)
        ...     fake = torch.empty(2)
        >>> type(real).__name__, type(fake).__name__
        ('Tensor', 'FakeTensor')
    """
    if _MODE_CHECKS is None:  # pragma: no cover - depends on the installed torch
        yield
        return
    with (
        torch._C.DisableTorchFunction(),
        _disable_current_modes(),
        temporarily_clear_interpreter_stack(),
    ):
        yield


#: Two dispatch keys a kernel below the dispatcher excludes: the conjugate key (never
#: excluded in eager code) and autograd's (excluded eagerly only in inference mode).
_CONJUGATE: Any = getattr(torch._C.DispatchKey, "Conjugate", None)
_AUTOGRAD: Any = getattr(torch._C.DispatchKey, "AutogradFunctionality", None)
#: The raw bits of autocast's dispatch keys (one per device type).
_AUTOCAST_BITS = 0
for _name, _key in getattr(torch._C.DispatchKey, "__members__", {}).items():
    if _name.startswith("Autocast"):
        _AUTOCAST_BITS |= torch._C.DispatchKeySet(_key).raw_repr()
_DISPATCH_HOOKS = (
    all(
        hasattr(torch._C, name)
        for name in (
            "_dispatch_tls_is_dispatch_key_excluded",
            "_dispatch_tls_local_exclude_set",
            "_dispatch_tls_local_include_set",
            "_ForceDispatchKeyGuard",
            "DispatchKeySet",
        )
    )
    and _AUTOGRAD is not None
    and _CONJUGATE is not None
)


def below_eager_dispatch() -> bool:
    """Whether torch code run now runs with less of the dispatcher than an eager caller
    has: in a custom op's kernel (a compiled ``jax_call`` runs JAX there), below autograd
    and what comes before it (views' bookkeeping, conjugation, functorch), where torch's
    autograd records nothing whatever the grad mode says. Inference mode's own exclusion
    of autograd (the caller's mode) does not count. A few C calls: the conjugate key is
    never excluded in eager code, and autograd only in inference mode.

    Example:
        >>> below_eager_dispatch()
        False
    """
    if not _DISPATCH_HOOKS:  # pragma: no cover - depends on the installed torch
        return False
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
    if excluded(_CONJUGATE):
        return True
    return bool(excluded(_AUTOGRAD)) and not torch.is_inference_mode_enabled()


@functools.cache
def _default_dispatch(inference: bool) -> tuple[int, int]:
    """The dispatch keys (as raw bits) a thread includes and excludes when nothing changed
    them but ``torch.inference_mode(inference)`` (read on a new thread, whose state is the
    default)."""
    found: list[tuple[int, int]] = []

    def read() -> None:
        with torch.inference_mode(inference):
            tls = torch._C
            found.append(
                (
                    tls._dispatch_tls_local_include_set().raw_repr(),
                    tls._dispatch_tls_local_exclude_set().raw_repr(),
                )
            )

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    return found[0]


def eager_dispatch() -> contextlib.AbstractContextManager[Any]:
    """A context with the dispatch an eager caller in this thread's inference mode has:
    the default one, the keys the thread includes kept, ``torch.autocast`` as it is now
    (what :func:`below_eager_dispatch` finds excluded comes back)."""
    if not _DISPATCH_HOOKS:  # pragma: no cover - depends on the installed torch
        return contextlib.nullcontext()
    included, excluded = _default_dispatch(torch.is_inference_mode_enabled())
    included |= torch._C._dispatch_tls_local_include_set().raw_repr()
    now = torch._C._dispatch_tls_local_exclude_set().raw_repr()
    excluded = (excluded & ~_AUTOCAST_BITS) | (now & _AUTOCAST_BITS)
    keys = torch._C.DispatchKeySet.from_raw_repr
    return torch._C._ForceDispatchKeyGuard(keys(included), keys(excluded))


def dual_level_active() -> bool:
    """Whether a forward-mode AD level is open (``with forward_ad.dual_level():``), read
    from ``torch.autograd.forward_ad._current_level`` (checked on torch 2.13; -1 when
    none is open). Fallback: ``True``, so that every tensor is asked for its tangent
    (slower, never wrong).

    Example:
        >>> from torch.autograd import forward_ad
        >>> with forward_ad.dual_level():
        ...     inside = dual_level_active()
        >>> inside, dual_level_active()
        (True, False)
    """
    level = getattr(torch.autograd.forward_ad, "_current_level", None)
    return not isinstance(level, int) or level >= 0


#: The fields of a ``jax.jit`` wrapper's options that say nothing of what it computes.
_JIT_DESCRIPTIONS = ("fun_sourceinfo", "fun_signature")


def jit_options(fn: Any) -> tuple[Any, ...] | None:
    """The options ``fn`` (a ``jax.jit`` wrapper) was made with, as a hashable value that is
    equal for two wrappers made alike: from ``fn._jit_info``, a named tuple (checked on jax
    0.10.2: static and donated arguments, shardings, layouts, ``keep_unused``, ``inline``,
    compiler options...). JAX's own trace cache keys on the function and these options.
    Fallback: ``None`` (the caller then keys on the wrapper itself).

    Example:
        >>> import jax
        >>> def f(x, n):
        ...     return x * n
        >>> jit_options(jax.jit(f)) == jit_options(jax.jit(f))
        True
        >>> jit_options(jax.jit(f)) == jit_options(jax.jit(f, static_argnums=1))
        False
        >>> jit_options(f) is None
        True
    """
    info = getattr(fn, "_jit_info", None)
    fields = getattr(info, "_fields", None)
    if not isinstance(fields, tuple):
        return None
    options = []
    for name in fields:
        if name in _JIT_DESCRIPTIONS:
            continue
        value = getattr(info, name)
        try:
            hash(value)
        except TypeError:
            value = repr(value)
        if isinstance(value, tuple):  # leaves such as UnspecifiedValue() compare by identity
            value = tuple(v if type(v) in _PLAIN else repr(v) for v in value)
        elif type(value) not in _PLAIN and not hasattr(value, "num_leaves"):  # a treedef
            value = repr(value)
        options.append((name, value))
    return tuple(options)


_PLAIN = (type(None), bool, int, float, str, tuple)


_is_legacy_batched: Any = getattr(torch._C._functorch, "is_legacy_batchedtensor", None)
_vmapmode_nesting: Any = getattr(torch._C, "_vmapmode_increment_nesting", None)


def legacy_vmap_level(tensors: Sequence[Any]) -> int | None:
    """The level of torch's legacy vmap (what ``torch.autograd.grad(is_grads_batched=True)``
    and ``jacobian(vectorize=True)`` batch with) if any of ``tensors`` is batched by it,
    else ``None``. Private: ``torch._C._functorch.is_legacy_batchedtensor`` and
    ``torch._C._vmapmode_increment_nesting``/``_decrement_nesting`` (checked on torch
    2.13). Gate: all exist. Fallback: ``None`` (such a tensor then reaches ``to_jax``,
    which refuses it).

    Example:
        >>> import torch
        >>> legacy_vmap_level([torch.ones(2), None]) is None
        True
    """
    if _is_legacy_batched is None or _vmapmode_nesting is None:
        return None  # pragma: no cover - depends on the installed torch
    if not any(t is not None and _is_legacy_batched(t) for t in tensors):
        return None
    level = int(_vmapmode_nesting())  # the level a new vmap would get: one more
    torch._C._vmapmode_decrement_nesting()
    return level - 1


def legacy_unbatched(tensor: torch.Tensor, level: int) -> torch.Tensor:
    """The plain tensor under a legacy-batched ``tensor``, its batch dimension first:
    ``torch._remove_batch_dim`` (checked on torch 2.13)."""
    return torch._remove_batch_dim(tensor, level, 0, 0)


def legacy_batched(tensor: torch.Tensor, level: int) -> torch.Tensor:
    """A plain tensor whose first dimension is the batch, as a legacy-batched tensor of
    ``level``: ``torch._add_batch_dim`` (checked on torch 2.13)."""
    return torch._add_batch_dim(tensor, 0, level)


def autograd_function_apply(cls: Any) -> Callable[..., Any]:
    """``cls.apply`` (a ``torch.autograd.Function``) for calls made while no ``torch.func``
    transform is active, without the public method's per-call ``inspect.signature``
    binding of ``forward``'s default arguments (``cls.forward`` must have none). Private:
    ``torch._C._FunctionBase.apply``, the C method the public one ends in, and
    ``torch._C._functorch.unwrap_if_dead``, which it applies to each tensor first
    (checked on torch 2.13). Gate: both exist. Fallback: ``cls.apply``.

    Example:
        >>> import torch
        >>> class Double(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(x):
        ...         return x * 2
        ...     @staticmethod
        ...     def setup_context(ctx, inputs, output):
        ...         pass
        ...     @staticmethod
        ...     def backward(ctx, grad):
        ...         return grad * 2
        >>> x = torch.ones(2, requires_grad=True)
        >>> autograd_function_apply(Double)(x).sum().backward()
        >>> x.grad
        tensor([2., 2.])
    """
    base = getattr(torch._C, "_FunctionBase", None)
    descriptor = vars(base).get("apply") if base is not None else None
    unwrap = getattr(torch._C._functorch, "unwrap_if_dead", None)
    if descriptor is None or unwrap is None or not hasattr(descriptor, "__get__"):
        return cls.apply  # type: ignore[no-any-return]  # pragma: no cover - other torch
    apply = descriptor.__get__(None, cls)
    tensor = torch.Tensor

    def fast_apply(*args: Any) -> Any:
        return apply(*[unwrap(a) if isinstance(a, tensor) else a for a in args])

    return fast_apply


_DUMMY_THREAD = getattr(threading, "_DummyThread", None)


def on_foreign_thread() -> bool:
    """Whether the calling thread is one Python's ``threading`` did not start (it names
    them ``Dummy-N``): one of XLA's, running a callback, or torch autograd's device thread.

    Example:
        >>> on_foreign_thread()
        False
    """
    return type(threading.current_thread()) is _DUMMY_THREAD


def _fake_tensor_class() -> type | None:
    """torch's fake tensor class (``FakeTensorMode``, ``make_fx``: shapes, no bytes)."""
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:  # pragma: no cover - a torch without them has none to find
        return None
    return FakeTensor


_FakeTensor = _fake_tensor_class()


def is_fake_tensor(value: object) -> bool:
    """Whether ``value`` is one of torch's fake tensors (it holds no bytes).

    Example:
        >>> import torch
        >>> from torch._subclasses.fake_tensor import FakeTensorMode
        >>> with FakeTensorMode():
        ...     fake = torch.empty(2)
        >>> is_fake_tensor(fake), is_fake_tensor(torch.empty(2))
        (True, False)
    """
    return _FakeTensor is not None and isinstance(value, _FakeTensor)


def _keyed_mode(name: str) -> Callable[[], object] | None:
    """The call that returns the active dispatch mode torch keys as ``name`` (``"FAKE"``,
    ``"PROXY"``; it returns ``None`` when none is), or ``None`` where torch has no such
    query: ``torch._C._get_dispatch_mode`` (93 ns per call, measured)."""
    get_mode = getattr(torch._C, "_get_dispatch_mode", None)
    key = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), name, None)
    if get_mode is None or key is None:  # pragma: no cover - depends on the installed torch
        return None
    return functools.partial(get_mode, key)


_FAKE_MODE = _keyed_mode("FAKE")


def fake_mode_active() -> bool:
    """Whether a ``FakeTensorMode`` is active now (``make_fx``'s fake tracing included):
    tensors made or copied now are fake, holding no bytes.

    Example:
        >>> from torch._subclasses.fake_tensor import FakeTensorMode
        >>> with FakeTensorMode():
        ...     inside = fake_mode_active()
        >>> inside, fake_mode_active()
        (True, False)
    """
    return _FAKE_MODE is not None and _FAKE_MODE() is not None


def is_transform_wrapper(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a ``torch.func`` transform's wrapper (``vmap``'s batched
    tensor, ``grad``'s or ``jvp``'s): no storage of its own
    (``torch._C._functorch.is_functorch_wrapped_tensor``, checked on torch 2.13 and 2.15).

    Example:
        >>> import torch
        >>> seen = []
        >>> _ = torch.func.vmap(lambda t: seen.append(is_transform_wrapper(t)) or t)(
        ...     torch.ones(2, 3))
        >>> seen, is_transform_wrapper(torch.ones(2))
        ([True], False)
    """
    check = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return bool(check(tensor)) if check is not None else False


_FORWARD_AD = torch.autograd.forward_ad


def forward_tangent(tensor: torch.Tensor) -> torch.Tensor | None:
    """The forward-mode tangent ``tensor`` carries at the current dual level
    (``torch.autograd.forward_ad``), or ``None``: outside a dual level, one module
    attribute read (``forward_ad._current_level``, checked on torch 2.13 and 2.15).

    Example:
        >>> import torch
        >>> import torch.autograd.forward_ad as fwAD
        >>> with fwAD.dual_level():
        ...     dual = fwAD.make_dual(torch.zeros(2), torch.ones(2))
        ...     forward_tangent(dual).tolist(), forward_tangent(torch.zeros(2))
        ([1.0, 1.0], None)
    """
    if not dual_level_active():  # (its fallback: True, every tensor asked: never wrong)
        return None
    return _FORWARD_AD.unpack_dual(tensor).tangent  # type: ignore[no-any-return,no-untyped-call]


def forget_failed_tokens(devices: Iterable[Any]) -> None:
    """Drop this thread's runtime tokens on ``devices`` whose computation failed (see the
    module): called once the caller had the error of the computation it just ran there,
    whose tokens are the last on those devices; other devices' tokens stay."""
    try:
        from jax._src import dispatch

        tokens = dispatch.runtime_tokens.output_runtime_tokens
    except (ImportError, AttributeError):  # pragma: no cover - depends on the installed jax
        return
    if not isinstance(tokens, dict):  # pragma: no cover - depends on the installed jax
        return
    for device in devices:
        token = tokens.get(device)
        if token is None:
            continue
        try:
            token.block_until_ready()
        except Exception:  # its computation failed: its error was raised already
            del tokens[device]


_TOP_SAVED_HOOKS = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)


def saved_tensor_hooks_active() -> bool:
    """Whether default saved-tensor hooks are set now (see the module).

    Example:
        >>> import torch
        >>> with torch.autograd.graph.save_on_cpu():
        ...     inside = saved_tensor_hooks_active()
        >>> inside, saved_tensor_hooks_active()
        (True, False)
    """
    if _TOP_SAVED_HOOKS is None:  # pragma: no cover - depends on the installed torch
        return False
    try:
        return _TOP_SAVED_HOOKS(False) is not None
    except (TypeError, RuntimeError):  # pragma: no cover - another signature
        return False


def _proxy_mode_probe() -> Callable[[], object] | None:
    """The call that returns ``make_fx``'s active proxy mode (``None`` when none is): the
    dispatcher's keyed query (:func:`_keyed_mode`) where torch has it, else the public
    ``get_proxy_mode`` (427 ns: it is asked on every ``jax_call``)."""
    keyed = _keyed_mode("PROXY")
    if keyed is not None:
        return keyed
    try:  # pragma: no cover - depends on the installed torch
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
    except ImportError:  # pragma: no cover - depends on the installed torch
        return None
    return get_proxy_mode  # pragma: no cover


_PROXY_MODE = _proxy_mode_probe()


def make_fx_tracing() -> bool:
    """Whether ``make_fx`` traces now (see the module): its proxy mode is active.

    Example:
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> seen = []
        >>> _ = make_fx(lambda x: seen.append(make_fx_tracing()) or x + 1)(torch.ones(1))
        >>> seen, make_fx_tracing()
        ([True], False)
    """
    return _PROXY_MODE is not None and _PROXY_MODE() is not None
