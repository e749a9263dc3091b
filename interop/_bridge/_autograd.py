"""The torch side of a differentiable ``jax_call``: one ``torch.autograd.Function`` whose
forward and backward run a :class:`~interop._bridge._vjp.Plan`, handing every tensor over with
``to_jax``/``to_torch`` (zero-copy, loss-free, stream-ordered), and the choice of path per
call (:func:`run`).

What autograd keeps between forward and backward (see ``_vjp.py`` for the JAX side): the
input tensors and the outputs JAX's backward reads, with ``save_for_backward``, so that
torch's version counter refuses a backward after any of them was overwritten in place
(torch's usual "modified by an inplace operation" error; workspace views of one buffer
share one counter, so any write to the buffer counts). JAX's other residuals are fresh JAX
buffers no torch code can reach; they are handed to torch as tensors (zero-copy) and saved
the same way, so that autograd frees them after the backward, as it frees its own.

With ``create_graph=True``, and under any ``torch.func`` transform, the backward runs the
vector-Jacobian product as a JAX function of the inputs and cotangents through this same
Function, so gradients of gradients work to any order and transforms compose. Forward
mode (dual tensors, ``torch.func.jvp``) runs ``jax.jvp`` (the ``jvp`` staticmethod), and
``torch.func.vmap`` runs ``jax.vmap`` of the function: one JAX call for the whole batch
(the ``vmap`` staticmethod). Each of these is again a call of this Function, so
``vmap(grad(...))``, ``jacrev``, ``jacfwd`` and ``hessian`` compose from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import torch

from .. import _private
from .._errors import ZeroCopyError
from . import _dlpack, _vjp
from ._exchange import (
    as_input,
    cotangent_to_jax,
    held_elsewhere,
    host_argument,
    results_to_torch,
    to_jax_or_copy,
    unshared,
)
from ._functions import Function
from ._handoff import to_jax, to_torch

OVERWRITE_NOTE = (
    "interop.jax_call: an input of a jax_call (or an output its backward reads) was "
    "overwritten between the forward and the backward, so the gradient would have used "
    "the new bytes. Workspace views of one buffer share torch's version counter: any "
    "write to the buffer counts, as for torch's own operations. Hand the call a copy "
    "(view.clone()) of scratch you reuse before the backward, or ask for the scratch "
    "after the backward."
)

_transforms_active = _private.transforms_active
_dual_level_active = _private.dual_level_active


@dataclasses.dataclass(slots=True)
class Call:
    """One differentiable call: its plan, its non-differentiated arrays, and what the
    forward found out.

    ``arrays`` holds the non-differentiated array leaves: torch tensors (which also go to
    :meth:`JaxFunction.apply`, at ``tensor_slots``), JAX arrays and copies of NumPy ones
    made at the call (:func:`~interop._bridge._exchange.host_argument`).
    """

    plan: _vjp.Plan
    n_diff: int
    arrays: list[Any]
    tensor_slots: tuple[int, ...]  # per array: its index among apply's tensors, or -1
    #: A live wrapper of the function: the graph keeps it alive until the backward.
    wrapper: Any = None
    outputs: _vjp.Outputs | None = None
    residuals: _vjp.Residuals | None = None
    kept: list[Any] | None = None  # the residuals as tensors where torch has their dtype
    #: The forward's residual leaves as JAX arrays, for the first backward (then dropped).
    leaves: list[Any] | None = None
    #: For a call of a function the bridge derives (a VJP, a JVP, a batch), the functions
    #: it calls in turn and a live wrapper of each, down to the user's: a node of a graph
    #: made with ``create_graph=True`` outlives the call that made it, and the user's
    #: wrapper may be gone by its backward.
    lineage: tuple[tuple[Any, Any], ...] = ()
    #: Per result that is an input returned as is, that input's index among the tensors.
    aliases: dict[int, int] = dataclasses.field(default_factory=dict)

    def revive(self) -> None:
        """Make the function (and those it calls, :attr:`lineage`) callable again if every
        wrapper of it was freed since the forward (a backward, a jvp or a vmap rule may
        need to trace it again)."""
        for function, wrapper in self.descent():
            if wrapper is None:  # (a function a trace needs no wrapper of)
                continue
            if isinstance(function, Function) and not function.is_live():
                function.adopt(wrapper)

    def descent(self) -> tuple[tuple[Any, Any], ...]:
        """The :attr:`lineage` of a call of a function derived from this call's."""
        return ((self.plan.fn, self.wrapper), *self.lineage)


def _handoff(call: Call) -> Any:
    """How this call's tensors cross over: values torch makes (cotangents, tangents,
    batched slices) may be copied where JAX cannot alias them; the user's may not."""
    return to_jax_or_copy if call.plan.copies_inputs else to_jax


def _jax_arrays(call: Call, tensors: Sequence[torch.Tensor]) -> list[Any]:
    handoff = _handoff(call)
    return [
        handoff(tensors[slot].detach()) if slot >= 0 else array
        for slot, array in zip(call.tensor_slots, call.arrays, strict=True)
    ]


def _results(
    outs: Sequence[Any],
    tensors: Sequence[torch.Tensor],
    aliases: dict[int, int],
    kept: frozenset[int] = frozenset(),
) -> tuple[torch.Tensor, ...]:
    """The forward's arrays as tensors: an input returned as is (``aliases``: result index
    -> index among ``tensors``) stays that input; any other result over an input's bytes,
    two results of one array, and a result the function keeps (``kept``) get buffers of
    their own."""
    results = [to_torch(out) for out in outs]
    for i, index in aliases.items():
        results[i] = as_input(results[i], tensors[index])
    seen = {t.data_ptr() for t in tensors if t.numel()}
    for i, result in enumerate(results):
        if i not in aliases and result.numel():
            pointer = result.data_ptr()
            if pointer in seen or i in kept:
                results[i] = result.clone()
            seen.add(pointer)
    return tuple(results)


def _kept(outs: Sequence[Any], leaves: Sequence[Any], aliases: dict[int, int]) -> frozenset[int]:
    """The results of an eager call (an unjitted function, or ``jax.disable_jit``) that
    something besides this call holds (a constant the function closes over): handed to
    torch as they are, an in-place op on the result would rewrite that array. The call's
    own references are counted: ``outs`` and the residuals' ``leaves`` (a result the
    backward reads). No ``enumerate``: its cached tuple would hold the result too."""
    found = []
    for i in range(len(outs)):
        out = outs[i]
        if i not in aliases and _dlpack.is_array_impl(out):
            ours = sum(x is out for x in outs) + sum(x is out for x in leaves)
            if held_elsewhere(out, ours):
                found.append(i)
    return frozenset(found)


def _aliases(call: Call, outs: Sequence[Any], diff: list[Any], arrays: list[Any]) -> dict[int, int]:
    """Per result that IS one of the differentiated arrays the forward was handed (an eager
    function returning an argument as is: JAX hands back the very object), that argument's
    index among the tensors ``apply`` got. By identity, not by address: two inputs may share
    bytes (two duals of one tensor), and each has its own tangent."""
    inputs = {id(array): index for index, array in enumerate(diff)}
    return {i: inputs[id(out)] for i, out in enumerate(outs) if id(out) in inputs}


def _saved_as_tensor(array: Any) -> Any:
    """A kept residual as a tensor for ``save_for_backward`` (zero-copy), or the array
    itself where torch has no such dtype."""
    try:
        return to_torch(array)
    except (ZeroCopyError, TypeError):
        return array


def _inexact(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


class JaxFunction(torch.autograd.Function):
    """``Plan.forward`` and ``Plan.backward`` as one autograd node (see the module)."""

    generate_vmap_rule = False

    @staticmethod
    def forward(call: Call, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        handoff = _handoff(call)
        diff = [handoff(t.detach()) for t in tensors[: call.n_diff]]
        arrays = _jax_arrays(call, tensors)
        outs, residuals, call.outputs = call.plan.forward_or_primal(diff, arrays)
        call.residuals = residuals
        call.aliases = _aliases(call, outs, diff, arrays)
        eager = _vjp.runs_eagerly(call.plan.jitted)  # may return an array it keeps
        if residuals is None:  # a derived function JAX cannot linearize: none to read
            kept = _kept(outs, (), call.aliases) if eager else frozenset()
            return _results(outs, tensors, call.aliases, kept)
        info = residuals.info
        # What the first backward reads, as JAX arrays already over the same bytes: it
        # uses them once torch's version counters have vouched for the tensors (a copy of
        # none of them; they live no longer than the saved tensors do).
        sources = {_vjp.KEPT: residuals.kept, _vjp.INPUT: [*diff, *arrays], _vjp.OUTPUT: outs}
        call.leaves = [sources[kind][index] for kind, index in info.where]
        kept = _kept(outs, call.leaves, call.aliases) if eager else frozenset()
        return _results(outs, tensors, call.aliases, kept)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        call: Call = inputs[0]
        tensors = inputs[1:]
        ctx.call = call
        ctx.inexact = tuple(map(_inexact, output))
        ctx.set_materialize_grads(False)
        if _dual_level_active() or _transforms_active():  # else jvp is never called
            ctx.save_for_forward(*tensors)
        residuals = call.residuals
        if residuals is None:  # the vmap rule ran instead, or the forward kept none
            ctx.info = None
            ctx.save_for_backward(*tensors)
            return
        info = residuals.info
        if call.kept is None:  # once, where torch.func sets up each level's context
            call.kept = [_saved_as_tensor(array) for array in residuals.kept]
        read = [output[j] for kind, j in info.where if kind == _vjp.OUTPUT]
        kept = call.kept
        saved = (*tensors, *read, *(k for k in kept if isinstance(k, torch.Tensor)))
        ctx.save_for_backward(*saved)
        ctx.info = info
        ctx.untensored = {i: k for i, k in enumerate(kept) if not isinstance(k, torch.Tensor)}
        if _private.saved_tensor_hooks_active() and not _transforms_active():
            # The hooks hold what the backward reads (a copy on the host, or nothing until
            # a checkpoint recomputes it): hold none of the forward's buffers beside them,
            # or offloading would save no memory. (torch.func sets up each level's
            # context from these: kept under a transform.)
            call.leaves = call.kept = call.residuals = None
        ctx.addresses = None if call.leaves is None else _addresses(saved)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        try:
            saved = ctx.saved_tensors
        except RuntimeError as err:
            if "inplace operation" in str(err) and hasattr(err, "add_note"):
                err.add_note(OVERWRITE_NOTE)
            raise
        call: Call = ctx.call
        call.revive()
        n_tensors = call.n_diff + sum(slot >= 0 for slot in call.tensor_slots)
        tensors = saved[:n_tensors]
        level = _private.legacy_vmap_level(grads)
        if level is not None:  # is_grads_batched=True, jacobian(vectorize=True)
            needed = _needed(ctx, call)
            return (None, *_legacy_batched_backward(call, tensors, grads, level, needed))
        info: _vjp.ResidualInfo | None = ctx.info
        if info is None or torch.is_grad_enabled() or _transforms_active():
            # create_graph=True, or torch.func: a backward that is itself differentiable
            # (and transformable: a call of this Function on the VJP).
            return (None, *higher_order(call, tensors, grads, _needed(ctx, call)))
        leaves = call.leaves
        call.leaves = None  # a second backward (retain_graph=True) hands the tensors over
        if leaves is None or ctx.addresses is None or _addresses(saved) != ctx.addresses:
            # A saved-tensor hook (saved_tensors_hooks, save_on_cpu, a SavedTensor's own
            # hooks) unpacked other bytes than the forward's: torch checks no version
            # counter then, and what the hook returns is what the backward reads.
            leaves = _residual_leaves(ctx, call, saved, n_tensors, info)
        kinds, given = [], []
        for grad, inexact in zip(grads, ctx.inexact, strict=True):
            if not inexact:
                kinds.append(_vjp.FLOAT0)
            elif grad is None:
                kinds.append(_vjp.ZERO)
            else:
                kinds.append(_vjp.GIVEN)
                given.append(cotangent_to_jax(grad))
        with_cotangent = tuple(kind == _vjp.GIVEN for kind in kinds)
        needed = call.plan.reaching(info.inputs, with_cotangent, _needed(ctx, call))
        if not any(needed):  # no gradient reaches an input (torch's None for each)
            return (None,) * (1 + n_tensors)
        backward = call.plan.backward(info, tuple(kinds), needed)
        if not _vjp.runs_eagerly(call.plan.jitted):
            gradients = [None if g is None else to_torch(g) for g in backward(leaves, given)]
        else:  # eager JAX may return a cotangent, one array twice, or one it keeps
            gradients = [  # held_elsewhere's ours: the list backward returns
                None if g is None else to_torch(g).clone() if held_elsewhere(g, 1) else to_torch(g)
                for g in backward(leaves, given)
            ]
            gradients = unshared(gradients, (*grads, *saved))
        return (None, *gradients, *[None] * (n_tensors - call.n_diff))

    @staticmethod
    def jvp(ctx: Any, *tangents: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        call: Call = ctx.call
        call.revive()
        tensors = ctx.saved_tensors
        arrays = [
            tensors[slot] if slot >= 0 else array
            for slot, array in zip(call.tensor_slots, call.arrays, strict=True)
        ]
        diff_tangents = list(tangents[1 : 1 + call.n_diff])
        leaves, treedef = jax.tree_util.tree_flatten(
            ((list(tensors[: call.n_diff]), arrays, diff_tangents), {})
        )
        found = list(run(call.plan.jvp, leaves, treedef, call.descent()))
        for out, index in call.aliases.items():  # torch: a view's tangent is a view too
            tangent = tangents[1 + index]
            if tangent is not None:
                found[out] = tangent.view_as(tangent)
        return tuple(found)

    @staticmethod
    def vmap(
        info: Any, in_dims: tuple[int | None, ...], call: Call, *tensors: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...]]:
        call.revive()
        batched = call.plan.batched(tuple(in_dims[1:]), call.tensor_slots)
        others = [array for slot, array in zip(call.tensor_slots, call.arrays, strict=True)
                  if slot < 0]  # fmt: skip
        leaves, treedef = jax.tree_util.tree_flatten(((list(tensors), others), {}))
        returned: _vjp.Returned = run(batched, leaves, treedef, call.descent())
        call.outputs = returned.outputs
        return tuple(returned.arrays), (0,) * len(returned.arrays)


def _addresses(saved: Sequence[torch.Tensor]) -> tuple[int, ...] | None:
    """Where each of ``saved`` starts (``None`` for tensors without memory of their own:
    a transform's wrappers, fake tensors), so that a backward can tell whether it unpacked
    the forward's very tensors."""
    try:
        return tuple(tensor.data_ptr() for tensor in saved)
    except Exception:  # (a subclass may raise anything): unknown, so read anew
        return None


def _residual_leaves(
    ctx: Any, call: Call, saved: Sequence[torch.Tensor], n_tensors: int, info: _vjp.ResidualInfo
) -> list[Any]:
    """The VJP's leaves handed over anew from the saved tensors (so never stale). What a
    saved-tensor hook unpacks is torch's, not the user's: copied where JAX cannot alias it
    (an offloading pool at an odd address), never refused."""
    n_read = sum(kind == _vjp.OUTPUT for kind, _ in info.where)
    read = iter(saved[n_tensors : n_tensors + n_read])
    kept = iter(saved[n_tensors + n_read :])
    inputs = saved[:n_tensors]
    leaves = []
    for kind, index in info.where:
        if kind == _vjp.KEPT:
            array = ctx.untensored.get(index)
            leaves.append(to_jax_or_copy(next(kept)) if array is None else array)
        elif kind == _vjp.OUTPUT:
            leaves.append(to_jax_or_copy(next(read).detach()))
        elif index < call.n_diff:
            leaves.append(to_jax_or_copy(inputs[index].detach()))
        else:
            slot = call.tensor_slots[index - call.n_diff]
            array = call.arrays[index - call.n_diff]
            leaves.append(to_jax_or_copy(inputs[slot].detach()) if slot >= 0 else array)
    return leaves


#: ``JaxFunction.apply`` where no ``torch.func`` transform is active, without the public
#: method's per-call signature binding (``_private.autograd_function_apply``).
_apply = _private.autograd_function_apply(JaxFunction)

#: Plans kept per function: beyond this many signatures the oldest is dropped.
MAX_PLANS = 256


def is_differentiated(leaf: Any) -> bool:
    """Whether autograd differentiates through ``leaf`` (grad mode being on): a floating or
    complex tensor that requires grad."""
    return (
        isinstance(leaf, torch.Tensor)
        and leaf.requires_grad
        and (leaf.is_floating_point() or leaf.is_complex())
    )


def _has_tangent(leaf: Any) -> bool:
    """Whether ``leaf`` is a floating or complex dual tensor of the open forward-AD level."""
    return (
        isinstance(leaf, torch.Tensor)
        and (leaf.is_floating_point() or leaf.is_complex())
        and _private.forward_tangent(leaf) is not None
    )


def _is_transformed(leaf: Any) -> bool:
    """Under a ``torch.func`` transform, every floating or complex tensor is differentiated:
    which level differentiates it is torch.func's business."""
    return isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex())


def _differentiates(leaves: list[Any]) -> Any:
    """The test of a differentiated leaf for this call, or ``None`` if none is."""
    if _transforms_active():
        return _is_transformed if any(isinstance(x, torch.Tensor) for x in leaves) else None
    grad = torch.is_grad_enabled() and any(map(is_differentiated, leaves))
    dual = _dual_level_active() and any(map(_has_tangent, leaves))
    if dual:
        if grad:
            return lambda leaf: is_differentiated(leaf) or _has_tangent(leaf)
        return _has_tangent
    return is_differentiated if grad else None


def run(function: Function, leaves: list[Any], treedef: Any, lineage: tuple[Any, ...] = ()) -> Any:
    """Call ``function`` on the pytree ``treedef`` of ``leaves`` (tensors among them): as
    one autograd node where autograd, forward mode or a ``torch.func`` transform needs
    one, else by handing the tensors over and back. Returns its result with tensors for
    arrays (NumPy results converted by JAX's rules in both cases).

    Raises:
        NotImplementedError: a tensor batched by torch's legacy vmap, outside a backward
            (see :data:`LEGACY_VMAP_ADVICE`).
    """
    try:
        differentiated = _differentiates(leaves)
        if differentiated is not None:
            return call_differentiably(function, leaves, treedef, differentiated, lineage)
        handoff = to_jax_or_copy if function.copies_inputs else to_jax
        arguments = [
            handoff(leaf.detach() if leaf.requires_grad else leaf)
            if isinstance(leaf, torch.Tensor)
            else host_argument(leaf, treedef, i, copy=False)  # read now: no copy kept
            if isinstance(leaf, _vjp.HOST_TYPES)
            else leaf
            for i, leaf in enumerate(leaves)
        ]
    except RuntimeError as err:
        if _private.legacy_vmap_level([x for x in leaves if isinstance(x, torch.Tensor)]) is None:
            raise
        raise NotImplementedError(LEGACY_VMAP_ADVICE) from err
    jax_args, jax_kwargs = jax.tree_util.tree_unflatten(treedef, arguments)
    eager = _vjp.runs_eagerly(function.jitted)  # may return an array it keeps
    if not eager:
        return results_to_torch(function(*jax_args, **jax_kwargs))
    return results_to_torch(function(*jax_args, **jax_kwargs), arguments, leaves)


#: Why a tensor batched by torch's legacy vmap cannot go through a jax_call.
LEGACY_VMAP_ADVICE = (
    "interop.jax_call: a tensor batched by torch's legacy vmap (torch._vmap_internals: "
    "what torch.autograd.functional.jacobian(vectorize=True, strategy='forward-mode') and "
    "gradcheck's check_batched_forward_grad use) reached a jax_call, which that vmap "
    "cannot batch. Use torch.func (vmap, jacfwd, jacrev), which runs jax.vmap of the "
    "function; batched backward passes (is_grads_batched=True, jacobian(vectorize=True) "
    "in reverse mode) work."
)


def call_differentiably(
    function: Function,
    leaves: list[Any],
    treedef: Any,
    differentiated: Any = is_differentiated,
    lineage: tuple[Any, ...] = (),
) -> Any:
    """Call ``function`` on the pytree ``treedef`` of ``leaves`` (torch tensors among them,
    some differentiated) as one autograd node; returns its result with tensors for arrays.

    Args:
        function: the JAX function; its plans by signature are filled here.
        leaves: the leaves of ``(args, kwargs)``.
        treedef: their pytree.
        differentiated: which tensor leaves are differentiated.
        lineage: for a function the bridge derives, :meth:`Call.descent` of the call it
            was derived from.
    """
    kinds: list[int] = []
    diff: list[torch.Tensor] = []
    others: list[torch.Tensor] = []
    arrays: list[Any] = []
    slots: list[int] = []
    statics: list[Any] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            if differentiated(leaf):
                kinds.append(_vjp.DIFF)
                diff.append(leaf)
                continue
            kinds.append(_vjp.ARRAY)
            slots.append(len(others))
            others.append(leaf)
            arrays.append(leaf)
        elif isinstance(leaf, _vjp.ARRAY_TYPES):
            kinds.append(_vjp.ARRAY)
            slots.append(-1)
            # A NumPy array is the caller's to refill: the backward and the jvp and vmap
            # rules read a copy made now, never the array as it is by then.
            arrays.append(leaf if isinstance(leaf, jax.Array) else host_argument(leaf, treedef, i))
        else:
            kinds.append(_vjp.STATIC)
            statics.append(leaf)
    leaf_kinds, static_leaves = tuple(kinds), tuple(statics)
    key = (treedef, leaf_kinds, _vjp.static_key(static_leaves))  # 1, 1.0, True: three plans
    plans = function.plans
    try:
        plan = plans.get(key)
    except TypeError:  # an unhashable static leaf: a plan for this call alone, eager
        signature = _vjp.Signature(treedef, leaf_kinds, static_leaves)
        plan = _vjp.Plan(function, signature, jitted=False)
    if plan is None:
        if len(plans) >= MAX_PLANS:  # (another thread may evict the same one meanwhile)
            plans.pop(next(iter(plans), None), None)
        signature = _vjp.Signature(treedef, leaf_kinds, static_leaves)
        plan = plans[key] = _vjp.Plan(function, signature, jitted=function.jitted)
    n_diff = len(diff)
    slots_of_tensors = tuple(s + n_diff if s >= 0 else -1 for s in slots)
    wrapper = function.live() if function.needs_wrapper() else None
    call = Call(plan, n_diff, arrays, slots_of_tensors, wrapper=wrapper, lineage=lineage)
    apply: Any = JaxFunction.apply if _transforms_active() else _apply
    results = apply(call, *diff, *others)
    assert call.outputs is not None  # set by the forward (or the vmap rule)
    return call.outputs.rebuild(results)


def _needed(ctx: Any, call: Call) -> tuple[bool, ...]:
    """Which differentiated inputs the backward must give a gradient for."""
    return tuple(ctx.needs_input_grad[1 : 1 + call.n_diff])


def _legacy_batched_backward(
    call: Call,
    tensors: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    level: int,
    needed: tuple[bool, ...],
) -> list[torch.Tensor | None]:
    """The backward of a batch of cotangents from torch's legacy vmap: one call of
    ``jax.vmap`` of the VJP over them (``Plan.vjp_batched``)."""
    if torch.is_grad_enabled():
        raise NotImplementedError(
            "interop.jax_call: batched gradients (is_grads_batched=True, or "
            "torch.autograd.functional.jacobian(vectorize=True)) cannot be differentiated "
            "again (create_graph=True) through a jax_call: torch's legacy vmap has no rule "
            "for it. Use torch.func (vmap of vjp, jacrev, hessian) instead, which composes."
        )
    cotangents = [None if g is None else _private.legacy_unbatched(g, level) for g in grads]
    diff = list(tensors[: call.n_diff])
    arrays = [
        tensors[slot] if slot >= 0 else array
        for slot, array in zip(call.tensor_slots, call.arrays, strict=True)
    ]
    leaves, treedef = jax.tree_util.tree_flatten(((diff, arrays, cotangents, needed), {}))
    gradients = run(call.plan.vjp_batched, leaves, treedef, call.descent())
    batched = [None if g is None else _private.legacy_batched(g, level) for g in gradients]
    return [*batched, *[None] * (len(tensors) - call.n_diff)]


def higher_order(
    call: Call,
    tensors: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    needed: tuple[bool, ...],
) -> list[torch.Tensor | None]:
    """The backward as a differentiable call of ``Plan.vjp`` (``create_graph=True``, or a
    ``torch.func`` transform): the gradients keep a graph, so they can be differentiated
    (or transformed) again, to any order."""
    diff = list(tensors[: call.n_diff])
    arrays = [
        tensors[slot] if slot >= 0 else array
        for slot, array in zip(call.tensor_slots, call.arrays, strict=True)
    ]
    leaves, treedef = jax.tree_util.tree_flatten(((diff, arrays, list(grads), needed), {}))
    gradients = run(call.plan.vjp, leaves, treedef, call.descent())
    return [*gradients, *[None] * (len(tensors) - call.n_diff)]
