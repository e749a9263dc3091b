"""``torch_call``: a torch function for JAX callers, inside ``jax.jit``, differentiable by
``jax.grad``, mapped by ``jax.vmap``.

The call is one jitted function per ``torch_call`` (compiled once per input signature, and
inlined into a caller's ``jit``). Inside it, a ``jax.custom_vjp`` whose forward is one
callback running ``fn`` and whose backward is one callback running ``fn`` again under
torch's autograd (``torch.autograd.grad``). What the callbacks do on the host lives in
``_torch_callback.py``; this module decides what is promised (the :class:`Signature`), checks
the arguments, and turns failures into errors a caller can read.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from .. import _private
from .._errors import (
    ArgumentTypeError,
    FunctionNotCallableError,
    HigherOrderError,
    InvalidVmapMethodError,
    ResultSpecError,
    UnsupportedDtypeError,
    VmapNotAllowedError,
    X64DisabledError,
)
from . import _dlpack, _torch_callback
from ._exchange import input_path
from ._handoff import _X64_HINT, JAX_DTYPES, TORCH_DTYPES, WIDE_DTYPES, _x64_enabled
from ._torch_callback import Signature

#: What ``vmap_method=`` takes, as in ``jax.pure_callback``.
VMAP_METHODS = (None, "sequential", "expand_dims", "broadcast_all")
_WIDE = frozenset(JAX_DTYPES[d] for d in WIDE_DTYPES if d in JAX_DTYPES)
_SCALARS = (bool, int, float, complex, np.generic)
_ArrayImpl: Any = _dlpack._ArrayImpl or jax.Array
_ONE_DEVICE = jax.sharding.SingleDeviceSharding


def _spec(shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)  # type: ignore[no-untyped-call]


def _path(prefix: str, path: Sequence[Any]) -> str:
    return prefix + jax.tree_util.keystr(tuple(path))


def _is_key(dtype: Any) -> bool:
    """Whether ``dtype`` is a typed PRNG key's (``jax.random.key``), which NumPy cannot hold
    (a NumPy dtype never is: asked of every argument at trace time)."""
    return not isinstance(dtype, np.dtype) and bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))


def _dtype_problem(dtype: Any, what: str, name: str) -> Exception | None:
    if _is_key(dtype):
        return UnsupportedDtypeError(
            f"torch_call: {what} of {name} has dtype {dtype}, a typed PRNG key "
            "(jax.random.key), which torch has no equivalent of. Use its raw bits "
            "instead: pass jax.random.key_data(key) (a uint32 array), and make a key of "
            "bits fn returns with jax.random.wrap_key_data(bits)."
        )
    dtype = np.dtype(dtype)
    if dtype not in TORCH_DTYPES:
        return UnsupportedDtypeError(
            f"torch_call: {what} of {name} has dtype {dtype}, which torch has no equivalent "
            f"of. Supported: {', '.join(sorted(map(str, TORCH_DTYPES)))}."
        )
    if dtype in _WIDE and not _x64_enabled():
        return X64DisabledError(
            f"torch_call: {what} of {name} has dtype {dtype} while JAX's x64 mode is off: "
            f"JAX would narrow it to 32 bits (2**40 + 5 becomes 5, 1e300 becomes inf). " + _X64_HINT
        )
    return None


class TorchCaller:
    """What a ``torch_call`` wrapper holds: the function, its promise, its jitted call."""

    def __init__(self, fn: Callable[..., Any], specs: Any, vmap_method: str | None) -> None:
        self.fn = fn
        self.name = getattr(fn, "__qualname__", None) or type(fn).__name__
        self.specs = specs
        self.vmap_method = vmap_method
        self.jitted = jax.jit(self._trace)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _torch_callback.inside():
            _torch_callback.refuse_nested(f"torch_call({self.name})")
        if kwargs or not all(type(arg) is _ArrayImpl for arg in args):  # else: all checked
            for leaf in jax.tree_util.tree_leaves((args, kwargs)):
                if type(leaf) is not _ArrayImpl:
                    self._check_leaf(leaf, args, kwargs)
        sharded = wait_for((args, kwargs))  # see call(): fn then runs on this thread
        try:
            result = self.jitted(*args, **kwargs)
            if sharded:  # see call(); an eager transform's result too (its value)
                wait_for(result)
            return result
        except Exception as err:  # JAX reports a callback failure as RuntimeError or ValueError
            if sharded:
                _private.forget_failed_tokens(_devices((args, kwargs)))
            self.reraise(err)
            raise

    def reraise(self, err: Exception) -> None:
        """Raise what a caller should see for ``err``, raised by the jitted call; return
        if ``err`` is to be raised as it is."""
        if isinstance(err, NotImplementedError):
            if self.vmap_method is None and "vmap_method" in str(err):
                raise VmapNotAllowedError(
                    f"torch_call({self.name}) was mapped by jax.vmap, but it was made with "
                    "vmap_method=None, which refuses vmap: torch_call cannot know how fn "
                    "treats a batch dimension. Pass vmap_method='sequential' (fn runs once "
                    "per element), 'expand_dims' (unbatched arguments get a leading axis of "
                    "size 1; fn must broadcast) or 'broadcast_all' (every argument gets the "
                    "batch axis), as for jax.pure_callback."
                ) from None
            return
        original = _torch_callback.original_failure(err)  # a failure inside the callback
        if original is not None:
            raise original from None

    def _check_leaf(self, leaf: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refuse a leaf that is not an array or a number, or that JAX would narrow."""
        if isinstance(leaf, jax.Array):
            return
        if isinstance(leaf, (np.ndarray, *_SCALARS)):
            dtype = np.result_type(leaf) if isinstance(leaf, np.ndarray | np.generic) else None
            if dtype is None or dtype not in _WIDE or _x64_enabled():
                return
            problem: Exception = X64DisabledError(
                f"torch_call: argument {self._path_of(leaf, args, kwargs)} of {self.name} "
                f"is a NumPy {dtype} array while JAX's x64 mode is off: JAX would narrow it "
                "to 32 bits on the way in (2**40 + 5 becomes 5, 1e300 becomes inf). " + _X64_HINT
            )
        else:
            problem = ArgumentTypeError(
                f"torch_call: argument {self._path_of(leaf, args, kwargs)} of {self.name} "
                f"is {type(leaf).__name__} ({leaf!r:.80}); every leaf of the arguments must "
                "be a JAX array, a NumPy array or a number (the torch function receives "
                "each as a tensor). Close over other values in fn instead."
            )
        raise problem

    @staticmethod
    def _path_of(leaf: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        for path, found in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]:
            if found is leaf:
                return input_path(path)
        return "?"  # pragma: no cover - the leaf came from these arguments

    # ----- at trace time -----

    def _trace(self, *args: Any, **kwargs: Any) -> Any:
        with_paths, in_tree = jax.tree_util.tree_flatten_with_path((args, kwargs))
        paths = tuple(input_path(path) for path, _ in with_paths)
        leaves = [leaf for _, leaf in with_paths]
        for path, leaf in zip(paths, leaves, strict=True):
            problem = _dtype_problem(leaf.dtype, f"argument {path}", self.name)
            if problem is not None:
                raise problem
        specs, out_tree, out_paths = self._result_specs(args, kwargs)
        sig = Signature(
            name=self.name,
            in_tree=in_tree,
            in_paths=paths,
            in_shapes=tuple(tuple(leaf.shape) for leaf in leaves),
            out_tree=out_tree,
            out_paths=out_paths,
            out_shapes=tuple(spec.shape for spec in specs),
            out_dtypes=tuple(TORCH_DTYPES[np.dtype(spec.dtype)] for spec in specs),
            mapped=self.vmap_method is not None,
            backward_broadcasts=self.vmap_method == "expand_dims",
        )
        results = _differentiable(self.fn, sig, specs, self.vmap_method)(*leaves)
        return jax.tree_util.tree_unflatten(out_tree, results)

    def _result_specs(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[jax.ShapeDtypeStruct], Any, tuple[str, ...]]:
        promised = self.specs
        if callable(promised):
            shaped = jax.tree_util.tree_map(
                lambda leaf: _spec(leaf.shape, leaf.dtype), (args, kwargs)
            )
            promised = promised(*shaped[0], **shaped[1])
        return flat_specs(promised, self.name)


_torch_callback.eager_codes.add(TorchCaller.__call__.__code__)


def flat_specs(promised: Any, name: str) -> tuple[list[jax.ShapeDtypeStruct], Any, tuple[str, ...]]:
    """``result_shape_dtypes`` as flat specs, their structure and their paths; checked.

    Raises:
        ResultSpecError: a leaf without an int shape and a dtype.
        UnsupportedDtypeError: a dtype torch has no equivalent of.
        X64DisabledError: a 64-bit dtype while JAX's x64 mode is off.
    """
    with_paths, tree = jax.tree_util.tree_flatten_with_path(promised)
    specs, paths = [], []
    for path, leaf in with_paths:
        where = _path("result", path)
        try:
            shape = tuple(_size(d) for d in leaf.shape)  # 2.5 and True are no sizes
            dtype = leaf.dtype if _is_key(leaf.dtype) else np.dtype(leaf.dtype)
        except (AttributeError, TypeError) as err:
            raise ResultSpecError(
                f"torch_call: result_shape_dtypes for {name} has {leaf!r:.80} at {where}: "
                "each leaf must have a shape and a dtype, as jax.ShapeDtypeStruct(shape, "
                f"dtype) has ({err})."
            ) from None
        if any(not 0 <= d < 2**63 for d in shape):
            raise ResultSpecError(
                f"torch_call: result_shape_dtypes for {name} has shape {shape} at {where}: "
                "every dimension must be a size from 0 to 2**63 - 1 (no -1: the shape is "
                "fixed when the call is traced; a callable result_shape_dtypes can compute "
                "it)."
            )
        problem = _dtype_problem(dtype, where, name)
        if problem is not None:
            raise problem
        specs.append(_spec(shape, dtype))
        paths.append(where.removeprefix("result"))
    return specs, tree, tuple(paths)


def _size(dim: Any) -> int:
    """``dim`` as an ``int`` if it is an integer and not a bool; else ``TypeError``."""
    if isinstance(dim, (bool, np.bool_)):
        raise TypeError(f"a dimension must be an int, got {dim!r}")
    return operator.index(dim)


def _floating(dtype: Any) -> bool:
    # JAX's issubdtype: NumPy's says no for bfloat16 and float8 (ml_dtypes' kind "V"),
    # whose gradients were then silently zero.
    return bool(jnp.issubdtype(dtype, jnp.inexact))


def _concrete(tree: Any) -> Iterator[Any]:
    """The concrete arrays of ``tree``, a transform's too (an eager ``jax.vmap``'s batched
    value, an eager ``jax.grad``'s primal); under a caller's ``jit`` there are none."""
    for leaf in jax.tree_util.tree_leaves(tree):
        for _ in range(8):  # a transform's tracer over another's, a few deep at most
            if type(leaf) is _ArrayImpl:
                yield leaf
                break
            inner = getattr(leaf, "val", None)  # an eager vmap's batched value
            if inner is None:
                inner = getattr(leaf, "primal", None)  # an eager jvp or grad's primal
            if inner is None:
                break
            leaf = inner


def _several_devices(array: Any) -> bool:
    """Whether ``array`` is laid out over more than one device."""
    sharding = array.sharding
    return type(sharding) is not _ONE_DEVICE and len(sharding.device_set) > 1


def _devices(tree: Any) -> set[Any]:
    """The devices the concrete arrays of ``tree`` live on."""
    found: set[Any] = set()
    for array in _concrete(tree):
        if not array.is_deleted():
            found.update(array.sharding.device_set)
    return found


def wait_for(tree: Any) -> bool:
    """Wait until every concrete array in ``tree`` is computed (:func:`_concrete`): XLA
    then runs the callback at once, on this thread, in its slot (one it starts on an
    input still being computed runs later on a thread of XLA's own, where the caller's
    slot is unknown).

    Returns:
        Whether an array is laid out over several devices: XLA then runs the callback
        once per device, on threads of its own, whatever this thread waited for, so the
        eager caller waits for the result too.
    """
    sharded = False
    for array in _concrete(tree):
        if not array.is_deleted():  # (a deleted one: the call says so, as before)
            array.block_until_ready()
            sharded = sharded or _several_devices(array)
    return sharded


def _first_order(call: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``call`` (a callback of the gradient's rules), refusing to be differentiated with a
    :class:`HigherOrderError` naming ``name``, wherever JAX asks (JAX's own error there
    is about its callbacks, not torch_call, and names no way out)."""
    guarded = jax.custom_jvp(call)

    def refuse(primals: Any, tangents: Any) -> Any:
        raise HigherOrderError(
            f"torch_call({name}) is differentiable once, in reverse mode: JAX asked for the "
            "derivative of its gradient's rules (jax.grad of jax.grad, jax.hessian, "
            "jax.jvp of a gradient), which run fn and torch.autograd.grad inside callbacks "
            "JAX cannot differentiate. JAX asks even where the result goes through "
            "jax.lax.stop_gradient: it differentiates the rules before it sees that; put "
            "stop_gradient on the call's inputs instead (no gradient rule is traced). "
            "Otherwise compute the higher derivative in torch inside fn (torch.func.grad, "
            "or torch.autograd.grad with create_graph=True) and return it as a result, or "
            "write that part in JAX."
        )

    guarded.defjvp(refuse)
    return guarded


def _differentiable(
    fn: Callable[..., Any],
    sig: Signature,
    specs: list[jax.ShapeDtypeStruct],
    vmap_method: str | None,
) -> Callable[..., tuple[Any, ...]]:
    """The ``custom_vjp`` of one traced call: forward and backward, each one callback."""
    buffers = _torch_callback.use_buffers
    # The backward differentiates per element: with "expand_dims", an unbatched argument
    # would reach torch with a batch axis of 1 and come back as a gradient summed over the
    # batch, where JAX wants one per element; broadcasting every argument gives it that.
    backward_vmap = "broadcast_all" if vmap_method == "expand_dims" else vmap_method
    # A pullback mapped while the forward is not (jax.jacrev: one cotangent per row) needs
    # no promise about fn's batch axes: "sequential" runs the backward once per row. Where
    # the forward is mapped too, vmap_method=None has refused it already.
    if backward_vmap is None:
        backward_vmap = "sequential"

    def forward(*values: Any) -> tuple[Any, ...]:
        wait_for(values)  # in an eager transform: computed values (see wait_for)
        if buffers:
            call = _torch_callback.call_buffers(
                _torch_callback.forward_buffers(fn, sig), specs, vmap_method
            )
        else:
            call = _torch_callback.call_host(
                _torch_callback.forward_host(fn, sig), specs, vmap_method
            )
        return tuple(call(*values))

    def forward_with_residuals(*primals: Any) -> tuple[tuple[Any, ...], Any]:
        values = tuple(p.value for p in primals)
        # Which inputs JAX differentiates, as an array the backward's callback reads (a
        # residual of fixed structure: see backward).
        marks = jnp.asarray(
            [p.perturbed and _floating(p.value.dtype) for p in primals], dtype=jnp.bool_
        )
        # Its callback guarded too: a second derivative differentiates this rule as well.
        return _first_order(forward, sig.name)(*values), (values, marks)

    def backward(residuals: Any, cotangents: tuple[Any, ...]) -> tuple[Any, ...]:
        values, marks = residuals
        # JAX reuses a forward traced for one set of differentiated inputs where the same
        # set is differentiated again (through jax.checkpoint, lax.cond, scan), but hands
        # the backward the residuals' structure of the forward traced last (jax 0.10.2,
        # pure JAX too): flags carried as that structure were another trace's (a gradient
        # of x refused because y was unused, or a cut-off y given zeros). So the flags are
        # an array, a value of the forward actually run, which the callback reads; and
        # torch is asked for every floating input's gradient, of which JAX keeps those it
        # needs: the flags only say which inputs torch must reach (NoGradientError).
        wanted = [i for i, value in enumerate(values) if _floating(value.dtype)]
        cotangent_of = [
            i
            for i, ct in enumerate(cotangents)
            if not isinstance(ct, SymbolicZero) and _floating(specs[i].dtype)
        ]
        if not wanted or not cotangent_of:
            return (None,) * len(values)
        grad_specs = [_spec(values[i].shape, values[i].dtype) for i in wanted]
        wait_for((values, cotangents))  # in an eager transform: computed (see wait_for)
        if buffers:
            call = _torch_callback.call_buffers(
                _torch_callback.backward_buffers(fn, sig, wanted, cotangent_of),
                grad_specs,
                backward_vmap,
            )
        else:
            call = _torch_callback.call_host(
                _torch_callback.backward_host(fn, sig, wanted, cotangent_of),
                grad_specs,
                backward_vmap,
            )
        grads = _first_order(call, sig.name)(*values, *(cotangents[i] for i in cotangent_of), marks)
        found: list[Any] = [None] * len(values)
        for index, grad in zip(wanted, grads, strict=True):
            found[index] = grad
        return tuple(found)

    differentiable = jax.custom_vjp(forward)
    differentiable.defvjp(forward_with_residuals, backward, symbolic_zeros=True)
    return differentiable


def torch_call(
    fn: Callable[..., Any], result_shape_dtypes: Any, *, vmap_method: str | None = None
) -> Callable[..., Any]:
    """Wrap a torch function so JAX code can call it, inside ``jax.jit`` too: zero-copy,
    differentiable by ``jax.grad``, and mapped by ``jax.vmap`` where you say how.

    Returns a function of JAX arrays (pytrees of them, and numbers) that calls ``fn`` on
    torch tensors and returns JAX arrays shaped as ``result_shape_dtypes`` promises. It is
    jitted (compiled once per input shape and dtype); inside a caller's ``jax.jit`` it
    becomes part of that computation, and ``fn`` runs each time the computation reaches
    it, after its inputs are computed.

    Where the installed jax has ``jax.experimental.buffer_callback`` (jax 0.6.1 and later;
    checked on 0.10.2) the tensors ``fn`` receives alias XLA's input buffers (no copy), and
    each result is written by torch straight into XLA's output buffer (one in-place
    ``copy_``; JAX copies nothing). On older jax it falls back to ``jax.pure_callback``:
    ``fn`` gets host copies and JAX copies the results back (one copy each way, and on a
    GPU, ``fn`` then runs on CPU tensors).

    On CUDA, ``fn`` runs with torch's current stream set to the stream XLA runs the
    computation on (``torch.cuda.ExternalStream``), so its kernels are ordered after the
    work that produced the inputs and before the work that reads the results; on CPU it
    runs once the inputs are ready.

    Gradients: ``jax.grad``/``jax.vjp`` run ``fn`` again in the backward, under torch's
    autograd, and call ``torch.autograd.grad`` for the inputs JAX differentiates (floating
    and complex ones; integer and bool inputs are not differentiated). The forward keeps
    its inputs (not torch's graph) until the backward. If JAX asks for the gradient of an
    input torch's autograd does not connect to any result (unused, ``detach()``, under
    ``torch.no_grad()``), or a result cut off from every input inside ``fn`` gets a nonzero
    cotangent, the backward raises :class:`~interop.errors.NoGradientError` instead of
    returning zeros: pass such an input (or result) through ``jax.lax.stop_gradient`` to
    say its gradient is zero on purpose. (A result made only of floating inputs JAX does
    not differentiate is no such case: it adds nothing, as in JAX. One made only of
    integer or bool inputs has no history in torch, as a cut-off one has, and is refused
    alike: ``stop_gradient`` it.) Complex gradients follow
    JAX's convention. The backward records even under the caller's ``torch.no_grad()``
    or ``torch.inference_mode()``, and every floating input requires grad in it. Tensors
    ``fn`` closes over (a module's parameters) are not differentiated: a result that
    requires grad through them warns (:class:`~interop.errors.DroppedGradientWarning`).

    ``fn``'s contract: it returns tensors of exactly the promised structure, shapes, dtypes
    (never cast), device and a dense layout, or the call fails naming expected and got,
    with no output written. It must not write into, resize or re-point its inputs (they
    alias XLA's buffers, which JAX takes as immutable): the call fails if it did (writes
    that torch's version counter does not see, through ``.data`` or ``.numpy()``, escape
    the check). Input tensors are
    valid only during the call: keeping one (or a view of it) past the call keeps a pointer
    into memory XLA reuses. Inside ``fn``, workspace scratch works as anywhere
    (``interop.current_workspace_manager().get_simultaneous(...)``, on the inputs' device),
    but starting a JAX computation does not: ``jax_call`` and ``torch_call`` functions raise
    :class:`~interop.errors.NestedCallError` there.

    Errors inside ``fn`` (its own, the checks above, and ``KeyboardInterrupt`` or
    ``SystemExit``): called outside ``jit``, the original exception is raised, with
    ``fn``'s frames in its traceback. Inside a caller's ``jit`` (and in a backward) JAX
    reports it as it reports any callback failure: a
    ``jax.errors.JaxRuntimeError`` whose message holds the whole traceback.

    Args:
        fn: a function of torch tensors (pytrees of them, as the arguments are given)
            returning a pytree of torch tensors.
        result_shape_dtypes: what ``fn`` returns, as ``jax.pure_callback`` takes it: a
            pytree of ``jax.ShapeDtypeStruct`` (or anything with ``shape`` and ``dtype``);
            or a callable computing that from the arguments, given as the same pytrees of
            ``jax.ShapeDtypeStruct`` (called at trace time, once per signature).
        vmap_method: how ``jax.vmap`` maps the call, as in ``jax.pure_callback``:
            ``"sequential"`` (``fn`` runs once per element), ``"expand_dims"`` (unbatched
            arguments get a leading axis of size 1: ``fn`` must broadcast), or
            ``"broadcast_all"`` (every argument gets the batch axis). ``None`` (the
            default) refuses ``vmap`` with :class:`~interop.errors.VmapNotAllowedError`
            (``jax.jacrev``, which maps only the pullback, works: one backward per row).

    Returns:
        A function taking the arguments ``fn`` takes, as JAX arrays, and returning
        ``result_shape_dtypes``' structure with JAX arrays in place of its leaves.

    Raises:
        FunctionNotCallableError: (a ``TypeError``) ``fn`` is not callable.
        InvalidVmapMethodError: (a ``ValueError``) ``vmap_method`` is not one of the above.
        ResultSpecError: (a ``TypeError``) a leaf of ``result_shape_dtypes`` has no shape
            of sizes and a dtype (checked at once; for a callable, at trace time).
        UnsupportedDtypeError, X64DisabledError: (``TypeError``) a promised or given dtype
            torch cannot hold, or a 64-bit one while JAX's x64 mode is off (JAX would
            narrow it: the same rule as ``to_jax``).

    Example:
        >>> import jax, jax.numpy as jnp, torch, interop
        >>> def gelu(x):
        ...     return torch.nn.functional.gelu(x)
        >>> layer = interop.torch_call(gelu, jax.ShapeDtypeStruct((3,), jnp.float32))
        >>> x = jnp.array([-1.0, 0.0, 2.0])
        >>> jnp.allclose(jax.jit(layer)(x), jax.nn.gelu(x, approximate=False))
        Array(True, dtype=bool)
        >>> grad = jax.grad(lambda x: layer(x).sum())(x)  # torch's backward, run by JAX
        >>> jnp.allclose(grad, jax.grad(lambda x: jax.nn.gelu(x, False).sum())(x), atol=1e-6)
        Array(True, dtype=bool)
        >>> interop.torch_call(gelu, lambda x: x, vmap_method="loop")
        Traceback (most recent call last):
        ...
        interop.errors.InvalidVmapMethodError: torch_call: vmap_method must be ...
    """
    if not callable(fn):
        raise FunctionNotCallableError(
            f"torch_call: fn must be a callable torch function, got {fn!r} ({type(fn).__name__})"
        )
    if vmap_method not in VMAP_METHODS:
        raise InvalidVmapMethodError(
            f"torch_call: vmap_method must be one of {', '.join(map(repr, VMAP_METHODS))}, "
            f"got {vmap_method!r}"
        )
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    if not callable(result_shape_dtypes):
        flat_specs(result_shape_dtypes, name)  # refuse a bad promise now, not at first call
    caller = TorchCaller(fn, result_shape_dtypes, vmap_method)
    jitted, local = caller.jitted, _torch_callback.thread_state

    def call(*args: Any, **kwargs: Any) -> Any:
        # Plain arrays, outside a torch_call function: nothing to check before the jitted
        # call. Measured side by side against caller(args, kwargs) on 4 KiB: 1.1-1.6 µs
        # saved of 26; what is left of the wrapper is bench_torch_call.py's
        # "interop.torch_call" row against "torch_call inside jax.jit" (which skips it).
        if kwargs or getattr(local, "active", False):
            return caller(args, kwargs)
        for arg in args:
            if type(arg) is not _ArrayImpl:
                return caller(args, kwargs)
        # Each input computed first: XLA then runs fn now, on this thread, in this thread's
        # slot and torch modes, and its error is raised here. An input still being
        # computed would have XLA run fn later on a thread of its own (0.27 µs per ready
        # array, measured; the correctness of the call, not a speed idiom).
        sharded = False
        for arg in args:
            if not arg.is_deleted():  # (a deleted one: the jitted call says so)
                arg.block_until_ready()
                sharded = sharded or _several_devices(arg)
        try:
            result = jitted(*args)
            if sharded:  # fn runs once per device, on XLA's threads, whatever was ready:
                jax.block_until_ready(result)  # type: ignore[no-untyped-call]  # its error: here
            return result
        except Exception as err:  # JAX reports a callback failure as RuntimeError or ValueError
            if sharded:  # its tokens would raise the error again at exit
                _private.forget_failed_tokens(_devices(args))
            caller.reraise(err)
            raise

    _torch_callback.eager_codes.add(call.__code__)  # and TorchCaller.__call__ (below it)
    return functools.wraps(fn)(call)
