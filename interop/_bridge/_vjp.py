"""The JAX side of a differentiable ``jax_call``: a forward that keeps JAX's residuals, a
backward that consumes them, and the vector-Jacobian product as a JAX function of its own.

No torch here: the torch side (``_autograd.py``) hands arrays in and decides what each leaf
of a call is. A :class:`Plan` serves every call of one :class:`Signature` (the call's
pytree, which leaves are differentiated, the static leaves' values). For a jitted function
the plan's forward and backward are jitted too, so each costs one cached dispatch, where
``jax.vjp`` per call would trace the function again (``benchmarks/bench_jax_grad.py``
measures both).

Residuals. ``jax.vjp`` keeps what the backward needs: some of it is the inputs or outputs
themselves. Under ``jit`` those would come back as copies (XLA never returns a parameter's
buffer without donation), so the forward returns only the other residuals and records,
for each residual, where it comes from (:data:`KEPT`, :data:`INPUT`, :data:`OUTPUT`). The
torch side saves the inputs and outputs with ``save_for_backward`` and hands them back in
the backward: torch's version counter then refuses an input overwritten in between,
instead of a gradient computed from the new bytes.

Complex numbers: torch's gradients are the conjugates of JAX's cotangents (torch follows
the conjugate Wirtinger convention), so cotangents are conjugated going in and gradients
coming out.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _private
from .._errors import X64DisabledError
from ._functions import Function
from ._reach import reached

#: A leaf's kind in a call: differentiated, another array, or a static value.
DIFF, ARRAY, STATIC = 0, 1, 2
#: Where a residual comes from: kept by the forward, an input, an output.
KEPT, INPUT, OUTPUT = 0, 1, 2
#: A cotangent's kind: given by torch, zero (torch gave none), float0 (an integer output).
GIVEN, ZERO, FLOAT0 = 0, 1, 2

#: How many (shapes, cotangents) a plan keeps the answer of :meth:`Plan.reaching` for.
_REACHED_KEPT = 256

#: What counts as an array among a call's leaves and a function's results.
ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)


def static_key(statics: Sequence[Any]) -> tuple[Any, ...]:
    """The plan cache's key for a call's static leaves: exact where ``==`` is not.

    ``1 == 1.0 == True`` and ``0.0 == -0.0``, but a function may answer each differently
    (``x[True]`` adds an axis, ``copysign(1.0, -0.0)`` is -1): each leaf is keyed with its
    type, and a float or complex by its ``repr`` (the sign of zero, and NaN, kept).

    Example:
        >>> len(set(static_key((v,)) for v in (1, 1.0, True))), static_key((0.0, -0.0))
        (3, ((<class 'float'>, '0.0'), (<class 'float'>, '-0.0')))
    """
    if not statics:
        return ()
    return tuple(
        [(type(v), repr(v)) if isinstance(v, (float, complex)) else (type(v), v) for v in statics]
    )


def jit_disabled() -> bool:
    """Whether ``jax.disable_jit()`` is in effect: a jitted function then runs as Python,
    on every call."""
    return bool(getattr(jax.config, "jax_disable_jit", False))


def runs_eagerly(jitted: bool) -> bool:
    """Whether a function (``jitted``: wrapped by ``jax.jit``) runs op by op now: unjitted,
    or under ``jax.disable_jit()``. Its results may then be arrays it keeps, or its
    inputs, and nothing it traces is kept for the next call."""
    return not jitted or jit_disabled()


@dataclasses.dataclass(frozen=True)
class Signature:
    """How one call's leaves become the function's arguments.

    ``treedef`` is the pytree of ``(args, kwargs)``; ``kinds`` gives each leaf's kind
    (:data:`DIFF`, :data:`ARRAY`, :data:`STATIC`); ``statics`` the static leaves in order.
    """

    treedef: Any
    kinds: tuple[int, ...]
    statics: tuple[Any, ...]

    def arguments(self, diff: Sequence[Any], arrays: Sequence[Any]) -> Any:
        """``(args, kwargs)`` with the given differentiated and other arrays in place."""
        d, a, s = iter(diff), iter(arrays), iter(self.statics)
        sources = (d, a, s)
        leaves = [next(sources[kind]) for kind in self.kinds]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


@dataclasses.dataclass(frozen=True)
class Outputs:
    """The function's result, without its arrays: its pytree, which leaves are arrays, the
    other leaves, and each array's shape and dtype."""

    treedef: Any
    is_array: tuple[bool, ...]
    statics: tuple[Any, ...]
    avals: tuple[tuple[tuple[int, ...], Any], ...]

    def rebuild(self, arrays: Sequence[Any]) -> Any:
        """The result with ``arrays`` (torch tensors, say) in the array leaves."""
        a, s = iter(arrays), iter(self.statics)
        leaves = [next(a) if is_array else next(s) for is_array in self.is_array]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


@dataclasses.dataclass(frozen=True, eq=False)  # one per trace: compared by identity, cheaply
class ResidualInfo:
    """What a forward's residuals are: the VJP's pytree, each leaf's source (``(KEPT, k)``,
    ``(INPUT, i)``, ``(OUTPUT, j)``), the forward's :class:`Outputs`, and the shape and
    dtype of each input (differentiated first: what :meth:`Plan.reaching` reads)."""

    treedef: Any
    where: tuple[tuple[int, int], ...]
    outputs: Outputs
    inputs: tuple[tuple[tuple[int, ...], Any], ...]
    #: What a :class:`Residuals` pytree carries as its static data (see :class:`_InfoRef`).
    ref: _InfoRef = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", _InfoRef(self))


class _InfoRef:
    """A weak reference to a :class:`ResidualInfo`: the static data of the jitted forward's
    output pytree. JAX keeps output pytrees in caches of its own (4,096 of them) long after
    the plan that traced them is gone; held there, the info itself (the VJP's pytree, with
    its jaxprs) stayed too, a few hundred objects per function (a new jitted function every
    step: about 100 KiB a step). The plan that traced it holds it (``Plan._infos``)."""

    __slots__ = ("info",)

    def __init__(self, info: ResidualInfo) -> None:
        self.info = weakref.ref(info)


@dataclasses.dataclass
class Residuals:
    """The residuals a forward kept (a pytree: its leaves are ``kept``)."""

    kept: list[Any]
    info: ResidualInfo


def _residuals(ref: _InfoRef, kept: Sequence[Any]) -> Residuals:
    info = ref.info()
    assert info is not None, "a forward's results outlived the plan that traced it"
    return Residuals(list(kept), info)


jax.tree_util.register_pytree_node(Residuals, lambda r: (r.kept, r.info.ref), _residuals)


@dataclasses.dataclass
class Returned:
    """A forward's array results without residuals (batched, or primal only) and the
    :class:`Outputs` they rebuild into (a pytree whose leaves are ``arrays``: jit returns
    the outputs with every call)."""

    arrays: list[Any]
    outputs: Outputs


jax.tree_util.register_pytree_node(
    Returned,
    lambda r: (r.arrays, r.outputs),
    lambda outputs, arrays: Returned(list(arrays), outputs),
)


def _as_array(value: Any) -> Any:
    """A JAX array as it is (so a residual that is this result is known by identity), any
    other array converted (:func:`host_result`)."""
    return value if isinstance(value, jax.Array) else host_result(value)


#: NumPy's arrays and scalars: host values JAX converts (and, x64 off, narrows) itself.
HOST_TYPES = (np.ndarray, np.generic)


def narrowed(dtype: np.dtype[Any]) -> bool:
    """Whether JAX would narrow a NumPy value of ``dtype`` to 32 bits now (a 64-bit one,
    x64 off), where a torch tensor of that width is refused."""
    wide = (dtype.kind in "iuf" and dtype.itemsize == 8) or (
        dtype.kind == "c" and dtype.itemsize == 16
    )
    return wide and not _private.x64_enabled()


def host_result(leaf: Any) -> Any:
    """A NumPy result (an array or a scalar) as a JAX array, as JAX converts it; any other
    leaf as it is. A 64-bit one is refused while JAX's x64 mode is off: JAX would narrow
    it to 32 bits.

    Raises:
        X64DisabledError: (a ``TypeError``) a 64-bit NumPy result with x64 off.

    Example:
        >>> import numpy as np
        >>> host_result(np.arange(3, dtype=np.int32))
        Array([0, 1, 2], dtype=int32)
        >>> host_result(np.zeros(2))
        Traceback (most recent call last):
        ...
        interop.errors.X64DisabledError: jax_call: the function returned a NumPy float64 ...
    """
    if not isinstance(leaf, HOST_TYPES):
        return leaf
    dtype = leaf.dtype
    if narrowed(dtype):
        raise X64DisabledError(
            f"jax_call: the function returned a NumPy {dtype} value (shape {np.shape(leaf)}), "
            "which JAX would narrow to 32 bits with its x64 mode off, with and without "
            "gradients alike. Return a 32-bit value, or enable JAX's x64 mode."
        )
    return jnp.asarray(leaf)


def _index_of(value: Any, candidates: Sequence[Any]) -> int:
    for i, candidate in enumerate(candidates):
        if value is candidate:
            return i
    return -1


def cotangents(
    avals: Sequence[tuple[tuple[int, ...], Any]], kinds: Sequence[int], given: Sequence[Any]
) -> list[Any]:
    """One cotangent per array output (of the given shapes and dtypes), in JAX's
    convention: torch's conjugated, zeros where torch gave none (:data:`ZERO`), float0 for
    integer outputs (:data:`FLOAT0`); a compact cotangent is broadcast to its shape.

    Example:
        >>> import jax.numpy as jnp
        >>> avals = [((2,), jnp.float32), ((2,), jnp.int32)]
        >>> given, zero = cotangents(avals, [GIVEN, FLOAT0], [jnp.ones(1)])
        >>> given, zero.dtype == jax.dtypes.float0
        (Array([1., 1.], dtype=float32), True)
    """
    given_iter = iter(given)
    full: list[Any] = []
    for (shape, dtype), kind in zip(avals, kinds, strict=True):
        if kind == FLOAT0:
            full.append(np.zeros(shape, jax.dtypes.float0))
        elif kind == ZERO:
            full.append(jnp.zeros(shape, dtype))
        else:
            ct = next(given_iter)
            if ct.shape != shape:  # a broadcast cotangent handed over compact
                ct = jnp.broadcast_to(ct, shape)
            full.append(jnp.conj(ct) if jnp.iscomplexobj(ct) else ct)
    return full


def avals_of(values: Sequence[Any]) -> tuple[tuple[tuple[int, ...], Any], ...]:
    """Each array's shape and dtype (arrays or tracers)."""
    return tuple((tuple(v.shape), v.dtype) for v in values)


def gradients(grads: Sequence[Any]) -> list[Any]:
    """JAX's cotangents of the inputs as torch's gradients (complex ones conjugated)."""
    return [jnp.conj(g) if jnp.iscomplexobj(g) else g for g in grads]


class Plan:
    """The forward and backward of every call of one :class:`Signature` of ``fn``.

    Args:
        fn: the user's JAX function.
        signature: how a call's leaves become its arguments.
        jitted: whether ``fn`` is jitted; then the forward and backward are jitted too
            (they trace ``fn`` once per shape, as ``fn`` itself does). Otherwise they run
            eagerly, so a function that ``jit`` cannot trace still works (slower).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> leaves, treedef = jax.tree_util.tree_flatten(((jnp.ones(3),), {}))
        >>> plan = Plan(jnp.sin, Signature(treedef, (DIFF,), ()), jitted=False)
        >>> outs, residuals = plan.forward([jnp.zeros(3)], [])
        >>> plan.backward(residuals.info, (GIVEN,), (True,))(residuals.kept, [jnp.ones(3)])
        [Array([1., 1., 1.], dtype=float32)]
    """

    def __init__(self, fn: Callable[..., Any], signature: Signature, *, jitted: bool) -> None:
        self.fn = fn
        self.signature = signature
        self.jitted = jitted
        #: Whether the call's tensors may be copied where JAX cannot alias them (see
        #: :attr:`Function.copies_inputs`).
        self.copies_inputs: bool = getattr(fn, "copies_inputs", False)
        self.forward: Callable[[list[Any], list[Any]], tuple[list[Any], Residuals]] = (
            jax.jit(self._forward) if jitted else self._forward
        )
        #: The forward without residuals (no ``jax.vjp``): for a derived function JAX
        #: cannot linearize (:meth:`forward_or_primal`).
        self.primal: Callable[[list[Any], list[Any]], Returned] = (
            jax.jit(self._primal_only) if jitted else self._primal_only
        )
        self._backwards: dict[Any, Callable[..., Any]] = {}
        #: Every :class:`ResidualInfo` the jitted forward traced (see :class:`_InfoRef`).
        self._infos: list[ResidualInfo] = []
        name = getattr(fn, "name", getattr(fn, "__name__", "fn"))
        #: The gradients as a function of the inputs and cotangents: what a backward that
        #: is differentiated again (or transformed by ``torch.func``) calls, with its plans.
        #: Its last argument, which gradients are needed, is static.
        self.vjp = self._derived(self._vjp, f"vjp({name})", static=3)
        #: ``vjp`` over a batch of cotangents (their first axis), the inputs shared.
        self.vjp_batched = self._derived(self._vjp_batched, f"vmap(vjp({name}))", static=3)
        #: The tangents of the results as a function of the inputs and their tangents.
        self.jvp = self._derived(self._jvp, f"jvp({name})")
        self._batched: dict[Any, Function] = {}
        self._reached: dict[Any, tuple[bool, ...]] = {}

    def reaching(
        self,
        inputs: tuple[tuple[tuple[int, ...], Any], ...],
        given: tuple[bool, ...],
        needed: tuple[bool, ...],
    ) -> tuple[bool, ...]:
        """``needed`` without the differentiated inputs no gradient reaches from the results
        that have a cotangent (``given``): torch gives those ``None``, where JAX would give
        zeros (``_reach.py``). ``inputs``: every input's shape and dtype, differentiated
        first. Read from ``fn``'s jaxpr once per shape, for a jitted ``fn`` only: an
        unjitted one runs its Python on every call, and may read what changes between
        calls (it keeps JAX's zeros)."""
        if runs_eagerly(self.jitted):
            return needed
        key = (inputs, given)
        found = self._reached.get(key)
        if found is None:
            n_diff = len(needed)

            def fn(*values: Any) -> list[Any]:
                return self._primal(values[n_diff:], [])(*values[:n_diff])

            specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in inputs]  # type: ignore[no-untyped-call]
            found = reached(fn, specs, given)[:n_diff]
            if len(self._reached) >= _REACHED_KEPT:  # shapes that keep changing: bounded
                self._reached.clear()
            self._reached[key] = found
        if all(found):
            return needed
        return tuple(n and r for n, r in zip(needed, found, strict=True))

    def _derived(self, fn: Callable[..., Any], name: str, static: int | None = None) -> Function:
        derived = jax.jit(fn, static_argnums=static) if self.jitted else fn
        return Function(derived, name, shared=False, copies_inputs=True)

    def _primal(self, arrays: Sequence[Any], box: list[Outputs]) -> Callable[..., list[Any]]:
        """``fn`` as a function of the differentiated arrays, returning its array leaves
        (a list) and recording its :class:`Outputs` in ``box``."""

        def primal(*diff: Any) -> list[Any]:
            args, kwargs = self.signature.arguments(diff, arrays)
            fn = getattr(self.fn, "traced", self.fn)  # a Function: what a plan traces
            leaves, treedef = jax.tree_util.tree_flatten(fn(*args, **kwargs))
            is_array = tuple(isinstance(leaf, ARRAY_TYPES) for leaf in leaves)
            found = [_as_array(leaf) for leaf, a in zip(leaves, is_array, strict=True) if a]
            statics = tuple(leaf for leaf, a in zip(leaves, is_array, strict=True) if not a)
            avals = avals_of(found)
            box.append(Outputs(treedef, is_array, statics, avals))
            return found

        return primal

    def forward_or_primal(
        self, diff: list[Any], arrays: list[Any]
    ) -> tuple[list[Any], Residuals | None, Outputs]:
        """The forward, with its residuals where JAX can linearize the function.

        A function the bridge derives (a backward that ``torch.func`` or ``create_graph``
        makes a node of) may hold what JAX can run but not differentiate: a ``custom_vjp``
        whose backward calls a host callback (``pure_callback``, ``torch_call``). Its
        first-order gradient needs no residuals of it (its backward recomputes), so it is
        computed without them; differentiating it once more raises JAX's own error then.
        The user's function gets no such second try: its error is raised at once.
        """
        try:
            outs, residuals = self.forward(diff, arrays)
        except (ValueError, TypeError, NotImplementedError):
            if not self.copies_inputs:  # the user's function, not one the bridge derived
                raise
            returned = self.primal(diff, arrays)
            return returned.arrays, None, returned.outputs
        return outs, residuals, residuals.info.outputs

    def _primal_only(self, diff: list[Any], arrays: list[Any]) -> Returned:
        box: list[Outputs] = []
        outs = self._primal(arrays, box)(*diff)
        return Returned(outs, box[0])

    def _forward(self, diff: list[Any], arrays: list[Any]) -> tuple[list[Any], Residuals]:
        box: list[Outputs] = []
        outs, vjp = jax.vjp(self._primal(arrays, box), *diff)
        leaves, treedef = jax.tree_util.tree_flatten(vjp)
        inputs = [*diff, *arrays]
        where: list[tuple[int, int]] = []
        kept: list[Any] = []
        for leaf in leaves:
            if (i := _index_of(leaf, inputs)) >= 0:
                where.append((INPUT, i))
            elif (j := _index_of(leaf, outs)) >= 0:
                where.append((OUTPUT, j))
            else:
                where.append((KEPT, len(kept)))
                kept.append(leaf)
        info = ResidualInfo(treedef, tuple(where), box[0], avals_of(inputs))
        if not runs_eagerly(self.jitted):  # traced once per signature:
            self._infos.append(info)  # the info lives as long as this plan (see _InfoRef)
        return outs, Residuals(kept, info)

    def backward(
        self, info: ResidualInfo, kinds: tuple[int, ...], needed: tuple[bool, ...]
    ) -> Callable[[list[Any], list[Any]], list[Any]]:
        """The backward of a forward whose residuals ``info`` describes, for cotangents of
        the given kinds: a function of (the VJP's leaves, the given cotangents) returning
        one gradient per differentiated input, ``None`` where it is not ``needed`` (and,
        jitted, not computed)."""
        key = (info, kinds, needed)
        backward = self._backwards.get(key)
        if backward is None:

            def backward(leaves: list[Any], given: list[Any]) -> list[Any]:
                vjp = jax.tree_util.tree_unflatten(info.treedef, leaves)
                grads = gradients(vjp(cotangents(info.outputs.avals, kinds, given)))
                return [g if n else None for g, n in zip(grads, needed, strict=True)]

            if not runs_eagerly(self.jitted):  # (else a new info each
                backward = jax.jit(backward)  # call: eager plans trace anew each call)
                self._backwards[key] = backward
        return backward

    def batched(self, in_axes: tuple[int | None, ...], slots: tuple[int, ...]) -> Function:
        """The forward over a batch, as ``jax.vmap`` makes it: one call for the batch.

        Args:
            in_axes: per tensor of the call (differentiated ones first), its batch axis
                (``None``: not batched).
            slots: per non-differentiated array, its index among the tensors, or -1 for an
                array that is not a tensor (never batched).

        Returns:
            A function of (the tensors' arrays, the other arrays) returning
            :class:`Returned`: the results, batched on their first axis.
        """
        key = (in_axes, slots)
        found = self._batched.get(key)
        if found is None:
            n_diff = len(in_axes) - sum(s >= 0 for s in slots)

            def batched(values: list[Any], others: list[Any]) -> Returned:
                box: list[Outputs] = []

                def one(*values: Any) -> list[Any]:
                    rest = iter(others)
                    arrays = [values[s] if s >= 0 else next(rest) for s in slots]
                    return self._primal(arrays, box)(*values[:n_diff])

                return Returned(jax.vmap(one, in_axes=in_axes)(*values), box[0])

            name = getattr(self.fn, "name", getattr(self.fn, "__name__", "fn"))
            found = self._batched[key] = self._derived(batched, f"vmap({name})")
        return found

    def _jvp(self, diff: list[Any], arrays: list[Any], tangents: list[Any]) -> list[Any]:
        """The tangents of the array results (``None`` for integer and bool results) from
        the tangents of the differentiated inputs (``None``: zero)."""
        box: list[Outputs] = []
        full = [jnp.zeros_like(d) if t is None else t for d, t in zip(diff, tangents, strict=True)]
        outs, out_tangents = jax.jvp(self._primal(arrays, box), list(diff), full)
        return [
            t if jnp.issubdtype(o.dtype, jnp.inexact) else None
            for o, t in zip(outs, out_tangents, strict=True)
        ]

    def _vjp_batched(
        self, diff: list[Any], arrays: list[Any], torch_cts: list[Any], needed: tuple[bool, ...]
    ) -> Any:
        return jax.vmap(lambda cts: self._vjp(diff, arrays, cts, needed))(torch_cts)

    def _vjp(
        self, diff: list[Any], arrays: list[Any], torch_cts: list[Any], needed: tuple[bool, ...]
    ) -> list[Any]:
        """The gradients as a JAX function of the inputs and of torch's cotangents (``None``
        where torch gave none): the backward that can itself be differentiated. Only the
        ``needed`` gradients are computed (``None`` for the others): under ``jax.vmap`` a
        per-sample gradient nobody asked for can cost more than the rest together."""
        box: list[Outputs] = []
        primal = self._primal(arrays, box)
        with_cotangent = tuple(ct is not None for ct in torch_cts)
        needed = self.reaching(avals_of([*diff, *arrays]), with_cotangent, needed)
        if not any(needed):
            return [None] * len(needed)
        positions = [i for i, n in enumerate(needed) if n]

        # Only the results torch gave a cotangent for are differentiated: a zero cotangent
        # multiplied in would tie this function's gradients to inputs they do not depend on,
        # and a gradient of it (create_graph, torch.func) would give zeros for an input
        # torch leaves at None (Plan.reaching reads this function's jaxpr too).
        kept = [i for i, ct in enumerate(torch_cts) if ct is not None]

        def of_needed(*values: Any) -> list[Any]:
            full = list(diff)
            for position, value in zip(positions, values, strict=True):
                full[position] = value
            results = primal(*full)
            return [results[i] for i in kept]

        _, vjp = jax.vjp(of_needed, *(diff[p] for p in positions))
        avals = [box[0].avals[i] for i in kept]
        given = [torch_cts[i] for i in kept]
        found = iter(gradients(vjp(cotangents(avals, (GIVEN,) * len(kept), given))))
        return [next(found) if n else None for n in needed]
