"""The tensors a ``jax_call`` exchanges with torch's autograd and ``torch.func``: what torch
hands in (cotangents, tangents, batched slices) and what goes back (results, gradients).

In: torch makes these tensors, so they are not the user's to align. A cotangent may be a
slice of a larger gradient at any element offset (``cat``'s and ``stack``'s backward), a
step slice, a broadcast (stride 0) or a lazy conjugate. Each crosses over zero-copy where
JAX can alias it, and is otherwise copied once into a fresh tensor JAX can alias: never
refused (:func:`to_jax_or_copy`). Each copy is counted in :data:`COTANGENT_COPIES` and
logged at debug level on the ``interop`` logger. The user's own inputs are never copied:
a misaligned input is refused, as ``to_jax`` documents.

Out: every tensor handed back is a buffer of its own. Eager JAX may return one array for
several results, or hand a cotangent back as a gradient (the transpose of ``a + b``
returns the cotangent itself for both inputs); torch accumulates gradients in place and
tracks versions per tensor, so a shared buffer would be changed twice. Such a tensor is
copied (:func:`unshared`).

NumPy arguments: the user's, but host values JAX converts on the way in: each is copied
once, at the forward, on the host, and the call keeps the copy (:func:`host_argument`); a
64-bit one is refused with x64 off, as a 64-bit tensor is.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import numpy as np
import torch

from .._diagnostics import logger
from .._errors import LazyViewError, MisalignedViewError, UnsupportedLayoutError, X64DisabledError
from . import _dlpack
from ._handoff import _X64_HINT, to_jax, to_torch
from ._vjp import host_result, narrowed


@dataclasses.dataclass
class Copies:
    """How many values torch handed over were copied because JAX could not alias them."""

    count: int = 0


#: The copies of cotangents (and tangents, batched slices, and tensors a saved-tensor hook
#: unpacked) made so far, process-wide.
COTANGENT_COPIES = Copies()

_CANNOT_ALIAS = (MisalignedViewError, UnsupportedLayoutError, LazyViewError)


def to_jax_or_copy(tensor: torch.Tensor) -> Any:
    """``tensor`` as a JAX array: zero-copy where JAX can alias it, else a copy that it can
    (counted and logged); for values torch makes (cotangents, tangents, what a saved-tensor
    hook unpacks), never for the user's inputs as the call was given them.

    Example:
        >>> import torch
        >>> whole = torch.arange(9.0)
        >>> before = COTANGENT_COPIES.count
        >>> to_jax_or_copy(whole[1:]).tolist()  # one element in: not 64-byte aligned
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        >>> COTANGENT_COPIES.count - before
        1
    """
    try:
        return to_jax(tensor)
    except _CANNOT_ALIAS as err:
        copy = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
        copy.copy_(tensor)  # resolves a lazy conjugate or negation too
        COTANGENT_COPIES.count += 1
        logger.debug(
            "interop.jax_call: copied a tensor torch handed over (a cotangent, or what a "
            "saved-tensor hook unpacked) of shape %s (%s, stride %s) that JAX cannot alias "
            "(%s); a fresh tensor crosses over instead.",
            tuple(tensor.shape), tensor.dtype, tensor.stride(), type(err).__name__,
        )  # fmt: skip
        return to_jax(copy)


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
    is broadcast: :func:`compact_cotangent`); a layout JAX cannot alias (an address off
    JAX's alignment, a step slice, a lazy conjugate) is copied (:func:`to_jax_or_copy`).

    Example:
        >>> import torch
        >>> g = torch.ones(()).expand(3, 4)
        >>> a = cotangent_to_jax(g)
        >>> a.shape, a.unsafe_buffer_pointer() == g.data_ptr()
        ((1, 1), True)
    """
    if grad.is_contiguous():  # the usual case, handed over as it is
        try:
            return to_jax(grad.detach())
        except _CANNOT_ALIAS:
            pass
    return to_jax_or_copy(compact_cotangent(grad.detach()))


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """The bytes ``tensor`` covers, ``[start, end)``."""
    start = tensor.data_ptr()
    extent = 0
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        extent += (size - 1) * abs(stride)
    return start, start + (extent + 1) * tensor.element_size()


def unshared(
    tensors: Sequence[torch.Tensor | None], others: Iterable[torch.Tensor | None] = ()
) -> list[torch.Tensor | None]:
    """``tensors``, each copied where its bytes overlap another's of ``tensors`` or any of
    ``others`` (torch's incoming gradients, the saved tensors, another result).

    Example:
        >>> import torch
        >>> grad = torch.ones(3)
        >>> a, b = unshared([grad, grad.view(3)])
        >>> a is grad, b.data_ptr() == grad.data_ptr()
        (True, False)
        >>> unshared([grad], [grad])[0] is grad
        False
    """
    taken = [_span(t) for t in others if t is not None and t.numel()]
    out: list[torch.Tensor | None] = []
    for tensor in tensors:
        if tensor is not None and tensor.numel():
            start, end = _span(tensor)
            if any(start < e and s < end for s, e in taken):
                tensor = tensor.clone()
                start, end = _span(tensor)
            taken.append((start, end))
        out.append(tensor)
    return out


def held_elsewhere(array: Any, ours: int) -> bool:
    """Whether something besides the caller's ``ours`` references holds the JAX array
    ``array``: a constant a function closes over, a global, a surrogate gradient a
    ``custom_vjp`` returns as is. Its buffer handed to torch as is would be written by
    torch's in-place ops (a gradient accumulated into ``.grad``, ``add_`` on a result),
    which JAX takes as immutable. (CPython's reference count: an array the caller alone
    holds is one an eager call computed. A reference JAX itself keeps in some settings
    only costs a copy; the tests pin that the library's calls copy nothing else.)

    Example:
        >>> import jax.numpy as jnp
        >>> kept = jnp.arange(3.0)
        >>> [held_elsewhere(array, 1) for array in [kept]]  # ours: the list; kept: global
        [True]
    """
    # + the caller's loop variable, this function's parameter and getrefcount's argument:
    # 3, as _references_a_call_adds measures it now (after a failed fullgraph compile,
    # Dynamo's frame hook holds one more for a called function's arguments: 4).
    return sys.getrefcount(array) > ours + _references_a_call_adds()


def _references_a_call_adds() -> int:
    """What ``held_elsewhere`` counts of a fresh object its caller holds in one local:
    the same calls made on an object nothing else holds."""
    probe = object()
    return _count_references(probe)


def _count_references(value: object) -> int:
    return sys.getrefcount(value)


def input_path(path: Sequence[Any]) -> str:
    """``args[0]['w']`` or ``kwargs['x']`` for a key path into ``(args, kwargs)``."""
    head = "args" if path and getattr(path[0], "idx", 0) == 0 else "kwargs"
    return head + jax.tree_util.keystr(tuple(path[1:]))


def argument_path(treedef: Any, index: int) -> str:
    """Where leaf ``index`` of the ``(args, kwargs)`` pytree ``treedef`` sits, as the caller
    wrote it (``args[1]``, ``kwargs['n'][0]``), for an error naming the argument.

    Example:
        >>> _, treedef = jax.tree_util.tree_flatten(((1, [2, 3]), {"n": 4}))
        >>> argument_path(treedef, 2), argument_path(treedef, 3)
        ('args[1][1]', "kwargs['n']")
    """
    try:
        paths = jax.tree_util.tree_flatten_with_path(
            jax.tree_util.tree_unflatten(treedef, range(treedef.num_leaves))
        )[0]
        return input_path(paths[index][0])
    except Exception:  # (a custom node may refuse ints as leaves): its position instead
        return f"leaf {index} of the arguments"


def host_argument(leaf: Any, treedef: Any, index: int, copy: bool = True) -> Any:
    """The NumPy argument ``leaf`` (an array or a scalar, leaf ``index`` of ``treedef``)
    copied now, on the host as it was (JAX converts it at each use, as it converted the
    argument; ``copy=False``: checked only, passed as it is).

    A differentiable call keeps its arguments for the backward and for the ``jvp`` and
    ``vmap`` rules: a NumPy array kept as it is would be read again then, so a write to it
    in between (a loader refilling a reused batch) would change the gradient, not the loss.
    (A JAX array made now would sit on JAX's default device, perhaps a GPU the call's
    tensors are not on.)

    Raises:
        X64DisabledError: (a ``TypeError``) a 64-bit NumPy argument while JAX's x64 mode is
            off: JAX would narrow it to 32 bits, where a 64-bit tensor is refused.

    Example:
        >>> import numpy as np
        >>> _, treedef = jax.tree_util.tree_flatten(((0, 0), {}))
        >>> m = np.ones(2, np.float32)
        >>> kept = host_argument(m, treedef, 1)
        >>> m[:] = 5.0
        >>> kept
        array([1., 1.], dtype=float32)
        >>> host_argument(np.int64(2**40 + 5), treedef, 1)
        Traceback (most recent call last):
        ...
        interop.errors.X64DisabledError: jax_call: argument args[1] is a NumPy int64 value ...
    """
    dtype = leaf.dtype
    if narrowed(dtype):
        value = f"{leaf!r}" if leaf.size <= 4 else f"shape {leaf.shape}"
        raise X64DisabledError(
            f"jax_call: argument {argument_path(treedef, index)} is a NumPy {dtype} value "
            f"({value}) while JAX's x64 mode is off: JAX would narrow it to 32 bits on the "
            "way in (2**40 + 5 becomes 5, 1e300 becomes inf), as it would a 64-bit tensor, "
            "which is refused too. " + _X64_HINT
        )
    return np.array(leaf, copy=True) if copy else leaf


def as_input(out: torch.Tensor, tensor: torch.Tensor, *, recorded: bool = True) -> torch.Tensor:
    """``tensor`` again, the input an eager function returned as is (``out`` is over its
    bytes), sharing its version counter (a write to either is seen by any backward that
    saved the other). Recorded (an autograd node's result): a view of it, which torch
    tracks as a view of that input (not the input itself: torch refuses to save an input
    returned as is for the backward, and ``setup_context`` saves the inputs). Not recorded:
    ``tensor.detach()``, which requires no grad even where the input does (a view made
    under ``no_grad`` would)."""
    same = tensor.shape == out.shape and tensor.stride() == out.stride()
    if not same or tensor.dtype != out.dtype:
        return out.clone()
    return tensor.view_as(tensor) if recorded else tensor.detach()


def results_to_torch(
    result: Any, inputs: Sequence[Any] | None = None, originals: Sequence[Any] = ()
) -> Any:
    """The arrays in a function's result as tensors (:func:`~interop.to_torch`; NumPy
    results converted as :func:`host_result` says), one tensor per array: an array that
    appears twice comes back as two tensors with buffers of their own.

    ``inputs``: the arguments of an eager call (an unjitted function, or ``jax.disable_jit``)
    whose result is read here, and ``originals`` the leaves they were handed over from (torch
    tensors among them). An input returned as is comes back over its tensor's bytes with its
    version counter (:func:`as_input`: documented, it aliases the input); any other array
    over an input tensor's bytes, and one something else holds (a constant the function
    closes over: :func:`held_elsewhere`), gets a buffer of its own."""
    leaves, treedef = jax.tree_util.tree_flatten(result)
    own: dict[int, Any] = {}
    if inputs is not None:  # an input tensor's array: returned as is, the input again
        own = {
            id(array): t
            for array, t in itertools.zip_longest(inputs, originals)
            if isinstance(t, torch.Tensor)
        }
    seen = {t.data_ptr() for t in originals if isinstance(t, torch.Tensor) and t.numel()}
    tensors = []
    for leaf in leaves:
        leaf = host_result(leaf)
        if _dlpack.is_array_impl(leaf):
            input_tensor = own.get(id(leaf))
            # ours: the result's container (or the result itself) and the leaves' list
            copy = inputs is not None and id(leaf) not in own and held_elsewhere(leaf, 2)
            tensor = to_torch(leaf)
            if isinstance(input_tensor, torch.Tensor):
                tensor = as_input(tensor, input_tensor, recorded=False)
            elif tensor.numel():
                if copy or tensor.data_ptr() in seen:
                    tensor = tensor.clone()
                seen.add(tensor.data_ptr())
            leaf = tensor
        tensors.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, tensors)
