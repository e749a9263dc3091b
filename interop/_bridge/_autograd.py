"""The torch side of a differentiable ``jax_call``: one ``torch.autograd.Function`` whose
forward and backward run a :class:`~interop._bridge._vjp.Plan`, handing every tensor over with
``to_jax``/``to_torch`` (zero-copy, loss-free, stream-ordered).

What autograd keeps between forward and backward (see ``_vjp.py`` for the JAX side): the
input tensors and the outputs JAX's backward reads, with ``save_for_backward``, so that
torch's version counter refuses a backward after any of them was overwritten in place
(torch's usual "modified by an inplace operation" error; workspace views of one buffer
share one counter, so any write to the buffer counts). JAX's other residuals are fresh JAX
buffers no torch code can reach; they are handed to torch as tensors (zero-copy) and saved
the same way, so that autograd frees them after the backward, as it frees its own.

With ``create_graph=True`` the backward runs the vector-Jacobian product as a JAX function
of the inputs and cotangents through this same Function, so gradients of gradients work to
any order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import torch

from .._errors import ZeroCopyError
from . import _vjp
from ._handoff import to_jax, to_torch

OVERWRITE_NOTE = (
    "interop.jax_call: an input of a jax_call (or an output its backward reads) was "
    "overwritten between the forward and the backward, so the gradient would have used "
    "the new bytes. Workspace views of one buffer share torch's version counter: any "
    "write to the buffer counts, as for torch's own operations. Hand the call a copy "
    "(view.clone()) of scratch you reuse before the backward, or ask for the scratch "
    "after the backward."
)


@dataclasses.dataclass
class Call:
    """One differentiable call: its plan, its non-differentiated arrays, and what the
    forward found out.

    ``arrays`` holds the non-differentiated array leaves: torch tensors (which also go to
    :meth:`JaxFunction.apply`, at ``tensor_slots``) and JAX or NumPy arrays.
    """

    plan: _vjp.Plan
    n_diff: int
    arrays: list[Any]
    tensor_slots: tuple[int, ...]  # per array: its index among apply's tensors, or -1
    outputs: _vjp.Outputs | None = None


def _jax_arrays(call: Call, tensors: Sequence[torch.Tensor]) -> list[Any]:
    return [
        to_jax(tensors[slot].detach()) if slot >= 0 else array
        for slot, array in zip(call.tensor_slots, call.arrays, strict=True)
    ]


def _input_array(call: Call, tensors: Sequence[torch.Tensor], index: int) -> Any:
    """Input ``index`` of the plan's forward (differentiated ones first), handed over anew
    from the saved tensor (so never stale), or the JAX or NumPy array it was."""
    if index < call.n_diff:
        return to_jax(tensors[index].detach())
    slot = call.tensor_slots[index - call.n_diff]
    return to_jax(tensors[slot].detach()) if slot >= 0 else call.arrays[index - call.n_diff]


def _as_input(out: torch.Tensor, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``out``, or the input it aliases (an eager function returning an argument as is):
    torch then tracks it as that input, version counter included."""
    if not out.numel():
        return out
    pointer = out.data_ptr()
    for tensor in tensors:
        if tensor.data_ptr() == pointer:
            same = tensor.shape == out.shape and tensor.stride() == out.stride()
            return tensor if same and tensor.dtype == out.dtype else out.clone()
    return out


def _saved_as_tensor(array: Any) -> Any:
    """A kept residual as a tensor for ``save_for_backward`` (zero-copy), or the array
    itself where torch has no such dtype."""
    try:
        return to_torch(array)
    except (ZeroCopyError, TypeError):
        return array


def compact_cotangent(grad: torch.Tensor) -> torch.Tensor:
    """Torch's gradient of an output, its broadcast dimensions cut to size 1 (a view).

    A broadcast gradient (stride 0, as ``.sum()``'s backward gives) goes to JAX compact and
    is broadcast there (``_vjp.cotangents``): JAX cannot alias a stride-0 layout.

    Example:
        >>> import torch
        >>> g = torch.ones(()).expand(3, 4)
        >>> c = compact_cotangent(g)
        >>> c.shape, c.data_ptr() == g.data_ptr()
        (torch.Size([1, 1]), True)
    """
    if 0 not in grad.stride() or grad.numel() <= 1:
        return grad
    # JAX's DLPack import ignores the strides of size-1 dimensions: the view aliases.
    return grad[tuple(slice(0, 1) if s == 0 else slice(None) for s in grad.stride())]


def cotangent_to_jax(grad: torch.Tensor) -> Any:
    """Torch's gradient of an output as a JAX array over the same bytes (compact where it
    is broadcast: :func:`compact_cotangent`). Only a layout JAX cannot alias otherwise (a
    lazy conjugate, a step slice) is made dense first, a copy.

    Example:
        >>> import torch
        >>> g = torch.ones(()).expand(3, 4)
        >>> a = cotangent_to_jax(g)
        >>> a.shape, a.unsafe_buffer_pointer() == g.data_ptr()
        ((1, 1), True)
    """
    grad = compact_cotangent(grad.detach())
    try:
        return to_jax(grad)
    except ZeroCopyError:
        return to_jax(grad.resolve_conj().resolve_neg().contiguous())


class JaxFunction(torch.autograd.Function):
    """``Plan.forward`` and ``Plan.backward`` as one autograd node (see the module)."""

    @staticmethod
    def forward(ctx: Any, call: Call, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        diff = [to_jax(t.detach()) for t in tensors[: call.n_diff]]
        outs, residuals = call.plan.forward(diff, _jax_arrays(call, tensors))
        info = residuals.info
        call.outputs = info.outputs
        # From here on the tensors are reached only as saved tensors (freed by backward).
        slots = call.tensor_slots
        call.arrays = [None if s >= 0 else a for s, a in zip(slots, call.arrays, strict=True)]
        results = tuple(_as_input(to_torch(out), tensors) for out in outs)
        read = [results[j] for kind, j in info.where if kind == _vjp.OUTPUT]
        kept = [_saved_as_tensor(array) for array in residuals.kept]
        ctx.save_for_backward(*tensors, *read, *(k for k in kept if isinstance(k, torch.Tensor)))
        ctx.call, ctx.info = call, info
        ctx.untensored = {i: k for i, k in enumerate(kept) if not isinstance(k, torch.Tensor)}
        ctx.inexact = tuple(r.dtype.is_floating_point or r.dtype.is_complex for r in results)
        ctx.set_materialize_grads(False)
        return results

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        try:
            saved = ctx.saved_tensors
        except RuntimeError as err:
            if "inplace operation" in str(err) and hasattr(err, "add_note"):
                err.add_note(OVERWRITE_NOTE)
            raise
        call: Call = ctx.call
        n_tensors = call.n_diff + sum(slot >= 0 for slot in call.tensor_slots)
        tensors = saved[:n_tensors]
        if torch.is_grad_enabled():  # create_graph=True: a differentiable backward
            return (None, *higher_order(call, tensors, grads))
        info: _vjp.ResidualInfo = ctx.info
        n_read = sum(kind == _vjp.OUTPUT for kind, _ in info.where)
        read = iter(saved[n_tensors : n_tensors + n_read])
        kept = iter(saved[n_tensors + n_read :])
        leaves = []
        for kind, index in info.where:
            if kind == _vjp.KEPT:
                array = ctx.untensored.get(index)
                leaves.append(to_jax(next(kept)) if array is None else array)
            elif kind == _vjp.OUTPUT:
                leaves.append(to_jax(next(read).detach()))
            else:
                leaves.append(_input_array(call, tensors, index))
        kinds, given = [], []
        for grad, inexact in zip(grads, ctx.inexact, strict=True):
            if not inexact:
                kinds.append(_vjp.FLOAT0)
            elif grad is None:
                kinds.append(_vjp.ZERO)
            else:
                kinds.append(_vjp.GIVEN)
                given.append(cotangent_to_jax(grad))
        gradients = call.plan.backward(info, tuple(kinds))(leaves, given)
        return (None, *(to_torch(g) for g in gradients), *[None] * (n_tensors - call.n_diff))


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


def call_differentiably(
    fn: Any, jitted: bool, plans: dict[Any, _vjp.Plan], leaves: list[Any], treedef: Any
) -> Any:
    """Call ``fn`` on the pytree ``treedef`` of ``leaves`` (torch tensors among them, some
    differentiated) as one autograd node; returns its result with tensors for arrays.

    Args:
        fn: the JAX function.
        jitted: whether ``fn`` is jitted (see :class:`~interop._bridge._vjp.Plan`).
        plans: the function's plans by signature (filled here).
        leaves: the leaves of ``(args, kwargs)``.
        treedef: their pytree.
    """
    kinds: list[int] = []
    diff: list[torch.Tensor] = []
    others: list[torch.Tensor] = []
    arrays: list[Any] = []
    slots: list[int] = []
    statics: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if is_differentiated(leaf):
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
            arrays.append(leaf)
        else:
            kinds.append(_vjp.STATIC)
            statics.append(leaf)
    key = (treedef, tuple(kinds), tuple(statics))
    try:
        plan = plans.get(key)
    except TypeError:  # an unhashable static leaf: a plan for this call alone, eager
        plan = _vjp.Plan(fn, _vjp.Signature(*key), jitted=False)
    if plan is None:
        if len(plans) >= MAX_PLANS:
            del plans[next(iter(plans))]
        plan = plans[key] = _vjp.Plan(fn, _vjp.Signature(*key), jitted=jitted)
    n_diff = len(diff)
    call = Call(plan, n_diff, arrays, tuple(s + n_diff if s >= 0 else -1 for s in slots))
    results = JaxFunction.apply(call, *diff, *others)  # type: ignore[no-untyped-call]
    assert call.outputs is not None  # set by the forward
    return call.outputs.rebuild(results)


def higher_order(
    call: Call, tensors: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]
) -> list[torch.Tensor | None]:
    """The backward as a differentiable call of ``Plan.vjp`` (``create_graph=True``): the
    gradients keep a graph, so they can be differentiated again (to any order)."""
    diff = list(tensors[: call.n_diff])
    arrays = [
        tensors[slot] if slot >= 0 else array
        for slot, array in zip(call.tensor_slots, call.arrays, strict=True)
    ]
    # Dense cotangents: a broadcast one cannot be handed over as an argument (a copy).
    cotangents = [None if g is None else g.contiguous() for g in grads]
    leaves, treedef = jax.tree_util.tree_flatten(((diff, arrays, cotangents), {}))
    plan = call.plan
    gradients = call_differentiably(plan.vjp, plan.jitted, plan.vjp_plans, leaves, treedef)
    return [*gradients, *[None] * (len(tensors) - call.n_diff)]
