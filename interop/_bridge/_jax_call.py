"""``jax_call``: a JAX function for torch callers, zero-copy both ways, differentiable, and
compiled whole by ``torch.compile``.

Three paths, chosen per call (``_autograd.run``):

- no gradient needed (grad mode off, no input requires grad or carries a forward-mode
  tangent, no ``torch.func`` transform active): hand the tensors over with ``to_jax``,
  call the function, hand the results back with ``to_torch``;
- a gradient or a transform needed: one autograd node (``_autograd.py``) whose backward is
  JAX's vector-Jacobian product (``_vjp.py``), with ``jvp`` and ``vmap`` rules for forward
  mode and ``torch.func.vmap``;
- while ``torch.compile`` traces: the custom op ``functional_ws::jax_call``
  (``_custom_op.py``), so that the compiled graph holds the call whole.

What the bridge knows of the function (its plans, its op key) is kept per function, not
per wrapper (``_functions.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import torch

from .. import _private
from .._compile import run_eagerly
from .._errors import FunctionNotCallableError, FxTraceError
from . import _custom_op, _torch_callback
from ._autograd import run
from ._functions import WRAPS, Function, function_for

_is_compiling = torch.compiler.is_compiling
_flatten = jax.tree_util.tree_flatten


class Caller:
    """What a ``jax_call`` wrapper holds: the function, and what the bridge knows of it
    (its :class:`~interop._bridge._functions.Function`, shared by every wrapper of it)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.function: Function = function_for(fn)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        function = self.function
        if not function.is_live():  # the wrapper it called was freed: call ours
            function.adopt(self.fn)
        leaves, treedef = _flatten((args, kwargs))
        if _make_fx_tracing():
            _refuse_fx_trace(self.fn, leaves)
        for leaf in leaves:  # (a loop: no generator's frame per call)
            if isinstance(leaf, _Proxy):
                _refuse_fx_trace(self.fn, leaves)
        return run(function, leaves, treedef)


_make_fx_tracing = _private.make_fx_tracing
_Proxy = torch.fx.Proxy


def _refuse_fx_trace(fn: Callable[..., Any], leaves: list[Any]) -> None:
    """Refuse a call that a ``torch.fx`` tracer would record wrongly: ``symbolic_trace``
    hands it ``Proxy`` objects (which JAX cannot read), and ``make_fx`` (what
    ``torch.func.linearize`` traces its ``jvp_fn`` with) would keep the result (and its
    tangent) computed on the trace's example values as a constant of the graph: a
    ``jvp_fn`` ignoring its tangent, silently."""
    name = getattr(fn, "__name__", "fn")
    proxies = [leaf for leaf in leaves if isinstance(leaf, _Proxy)]
    if proxies:
        raise FxTraceError(
            f"jax_call({name}): torch.fx.symbolic_trace handed the call a Proxy "
            f"({proxies[0]!r}) for an argument: the JAX function cannot be traced "
            "symbolically. Keep the call whole in the graph with torch.fx.wrap (a module-level "
            "function calling the jax_call wrapper, wrapped by name), or trace with "
            "torch.compile or torch.export, which hold the call as the custom op "
            "functional_ws::jax_call."
        )
    raise FxTraceError(
        f"jax_call({name}): called while make_fx traces eagerly (torch.func.linearize "
        "traces its jvp_fn so; so does torch.export where a torch.func transform wraps the "
        "call): the trace would keep the JAX result computed on its example values as a "
        "constant (linearize's jvp_fn would ignore its tangent). For linearize, use "
        "torch.func.jvp (or forward-mode dual tensors) per tangent, or torch.func.jacfwd "
        "for the whole Jacobian. torch.compile and torch.export hold a call outside a "
        "torch.func transform as the custom op functional_ws::jax_call; apply the "
        "transform outside them."
    )


run_eagerly(Caller.__call__, _custom_op.EAGER_ADVICE)  # type: ignore[arg-type]


def jax_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a JAX function so it takes and returns torch tensors: zero-copy both ways,
    differentiable by torch's autograd, and compiled whole by ``torch.compile``.

    Torch tensors anywhere in the arguments (pytrees: tuples, lists, dicts) go through
    :func:`to_jax`; JAX arrays anywhere in the result come back through :func:`to_torch`.
    Other leaves (Python numbers, strings, JAX arrays) are passed as they are. When
    differentiating, Python numbers and strings are static, as ``static_argnums`` makes
    them in ``jax.jit``: each new value traces anew, so pass a value that changes from
    call to call (a step count, a learning rate) as a tensor.

    Gradients: when grad mode is on and a floating or complex input requires grad, every
    floating or complex result requires grad and ``backward()`` fills the inputs'
    gradients through JAX's vector-Jacobian product (``jax.vjp``); integer and bool inputs
    and results are not differentiated and never stop a backward. Cotangents go to JAX and
    gradients come back through the same handoff, zero-copy (a broadcast cotangent, as
    ``.sum()``'s backward makes, is handed over compact and broadcast inside JAX). For a
    jitted ``fn`` the forward and the backward are each one cached jitted call; an
    unjitted ``fn`` runs eagerly (``jax.vjp`` per call, much slower). Gradients of
    gradients (``create_graph=True``) work to any order. Complex gradients follow torch's
    convention (conjugate Wirtinger). Every gradient is a buffer of its own (never torch's
    incoming gradient, another gradient or a result), and any gradient torch hands the
    backward is accepted: one JAX cannot alias (a slice at an odd address, as ``cat``'s
    backward makes) is copied, not refused.

    ``torch.func`` and forward mode: ``grad``, ``vjp``, ``jacrev``, ``jacfwd``, ``hessian``,
    ``functional_call``, ``vmap`` (one ``jax.vmap`` call for the whole batch, so
    ``vmap(grad(loss))`` gives per-sample gradients), ``jvp`` and dual tensors
    (``jax.jvp``) work, composed in any order.

    Plans belong to the function: a wrapper made anew on every step
    (``jax_call(jax.jit(f))`` inside ``forward()``) reuses what the first compiled, as
    ``jax.jit`` does for the same ``f``.

    What the backward reads: the inputs and the results JAX's backward needs are kept as
    torch keeps its own (``save_for_backward``, no copy). Overwriting one of them in place
    before the backward (or any view of the same buffer: workspace views of one buffer
    share torch's version counter) makes the backward raise torch's usual "modified by an
    inplace operation" ``RuntimeError``, never a gradient from the new bytes. To reuse a
    workspace region before the backward, pass the call a copy (``view.clone()``). A view
    handed out under ``torch.inference_mode()`` is an inference tensor (as the original's
    are), with no version counter: a write through it goes unseen.

    Ordering: once the call returns, torch may overwrite the input regions (the next
    ``get_simultaneous`` hands them out again) without changing the result: every result
    comes back through :func:`to_torch`, which on CPU waits until it is ready and on CUDA
    makes the current torch stream wait for it on the device (no host sync). Inputs are
    ordered after the work queued on the current torch stream. Limits, as before: a result
    that *is* an input (an unjitted function returning its argument) aliases it, as in
    torch; work whose result is dropped is not waited for (it cannot change the result).
    An unjitted function's result or gradient that is an array the function keeps (a
    constant it closes over, a surrogate gradient) is copied, so that torch's in-place
    ops cannot rewrite it.

    ``torch.compile``: the call becomes the custom op ``functional_ws::jax_call`` (its
    shapes from ``jax.eval_shape``, its backward the op again on ``jax.vjp``, which
    recomputes the forward), so ``fullgraph=True`` works. Graphs are specialised per input
    shape, as JAX compiles per shape: pad to a few bucket sizes to bound recompilation.
    Arguments that cannot go through the op (JAX or NumPy arrays, custom pytree nodes) run
    the call eagerly at a graph break (an error under ``fullgraph=True``, saying so).

    Args:
        fn: a function of JAX arrays (jitted or not) returning a pytree of arrays.

    Returns:
        A function taking torch tensors (and any other leaves, passed through) and returning
        the same pytree structure with torch tensors in place of arrays.

    Raises:
        FunctionNotCallableError: (a ``TypeError``) ``fn`` is not callable; raised at once.
        NestedCallError: (a ``RuntimeError``) called inside a :func:`torch_call` function,
            where starting a JAX computation could deadlock.
        HandoffError: at call time, from :func:`to_jax` / :func:`to_torch` for an input or
            output that cannot be aliased (see those functions).

    Example:
        >>> import torch, jax, jax.numpy as jnp, interop
        >>> double = interop.jax_call(jax.jit(lambda x: x * 2))
        >>> x = torch.ones(3)
        >>> y = double(x)
        >>> x.fill_(5.0)  # reuse the input region at once: the result does not change
        tensor([5., 5., 5.])
        >>> y
        tensor([2., 2., 2.])
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> interop.jax_call(jax.jit(lambda v: jnp.sum(v**3)))(w).backward()
        >>> w.grad
        tensor([ 3., 12.])
        >>> interop.jax_call(3)
        Traceback (most recent call last):
        ...
        interop.errors.FunctionNotCallableError: jax_call: fn must be a callable JAX function, ...
    """
    if not callable(fn):
        raise FunctionNotCallableError(
            f"jax_call: fn must be a callable JAX function, got {fn!r} ({type(fn).__name__})"
        )
    caller = Caller(fn)
    key = _custom_op.register(caller)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _is_compiling():
            return _custom_op.traced_call(key, args, kwargs)
        if _torch_callback.inside():  # XLA is running a torch_call function on this thread
            _torch_callback.refuse_nested(f"jax_call({getattr(fn, '__name__', 'fn')})")
        return caller(args, kwargs)

    # No __wrapped__: torch.jit.script follows it and compiled the JAX function's source as
    # TorchScript (torch's x.std() for JAX's: another answer, silently); it now refuses.
    del call.__wrapped__
    setattr(call, WRAPS, fn)  # what a fingerprint of code that calls this wrapper reads
    return call
