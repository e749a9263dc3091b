"""Which inputs of a JAX function a gradient can reach: where torch's autograd would leave
``.grad`` at ``None``.

JAX answers a gradient for every input it is asked about, zeros for one the results do
not depend on. Torch has no such zero: an input its graph does not reach gets ``None``,
``torch.autograd.grad`` refuses it (unless ``allow_unused=True``), and an optimizer skips
it (``AdamW`` does not decay it). So the bridge asks the function's jaxpr, once per shape,
which differentiated inputs a gradient reaches from the results that have a cotangent,
and gives ``None`` for the others, as the same model written in torch would.

The answer is ``False`` only where the gradient is certainly zero by construction: no path
of inexact values leads from the input to a result with a cotangent, or every path goes
through ``stop_gradient`` (torch's ``detach()``). Integer and boolean values carry no
gradient (``argmax``, a comparison: torch's graph does not reach through them either).
Calls of a jaxpr (a jitted function inside, ``jax.checkpoint``) are read inside; any other
equation with a sub-jaxpr (``cond``, ``scan``, ``while``, ``custom_jvp``, ``custom_vjp``,
callbacks) is taken whole: every inexact operand reaches every result. A function that
cannot be traced abstractly (Python control flow on values), or one with effects (a value
written to a ``jax.new_ref`` flows to its reads through the ref, which no equation's
variables show; callbacks, prints), reaches every input: it keeps JAX's zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Literal

#: Primitives that call a jaxpr on their operands as they are, one result for one result.
_CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "remat2", "checkpoint"})
#: The same sub-jaxpr under the names its primitives give it.
_SUB_JAXPR = ("jaxpr", "call_jaxpr")


def reached(
    fn: Callable[..., Sequence[Any]], specs: Sequence[Any], given: Sequence[bool]
) -> tuple[bool, ...]:
    """Per argument of ``fn``, whether a gradient from its results can reach it.

    Args:
        fn: a JAX function of arrays returning a sequence of arrays.
        specs: its arguments' shapes and dtypes (``jax.ShapeDtypeStruct``, or arrays).
        given: per result, whether it has a cotangent.

    Returns:
        One flag per argument; ``True`` where it is not known (see the module).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> spec = jax.ShapeDtypeStruct((3,), jnp.float32)
        >>> reached(lambda a, b, c: [a * 2, jax.lax.stop_gradient(b)], [spec] * 3, [True, True])
        (True, False, False)
        >>> reached(lambda a, b: [a, b], [spec] * 2, [True, False])
        (True, False)
    """
    everything = (True,) * len(specs)
    try:
        closed = jax.make_jaxpr(fn)(*specs)
    except Exception:  # value-dependent Python, say: not known, so every input
        return everything
    jaxpr = closed.jaxpr
    if len(jaxpr.outvars) != len(given) or len(jaxpr.invars) != len(specs):
        return everything
    if closed.effects or _has_effects(jaxpr):  # a value written to a ref (jax.new_ref) is
        return everything  # read back through it, not through the equations' variables
    return tuple(_flows(jaxpr, given))


def _flows(jaxpr: Any, live_outputs: Sequence[bool]) -> list[bool]:
    """Per input variable of ``jaxpr``, whether a gradient flows to it from the outputs
    marked in ``live_outputs`` (read backwards, equation by equation)."""
    live: set[Any] = {
        v for v, on in zip(jaxpr.outvars, live_outputs, strict=True) if on and _carries(v)
    }
    for eqn in reversed(jaxpr.eqns):
        outs = [not isinstance(v, Literal) and v in live for v in eqn.outvars]
        if not any(outs) or eqn.primitive.name == "stop_gradient":
            continue
        operands = eqn.invars
        sub = _called(eqn)
        if sub is not None:
            inner = _flows(sub, outs)
            operands = [v for v, on in zip(eqn.invars, inner, strict=True) if on]
        live.update(v for v in operands if _carries(v))
    return [_carries(v) and v in live for v in jaxpr.invars]


def _has_effects(jaxpr: Any) -> bool:
    """Whether an equation of ``jaxpr``, or of a jaxpr inside one, has an effect."""
    for eqn in jaxpr.eqns:
        if eqn.effects:
            return True
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns") and _has_effects(inner):
                    return True
    return False


def _called(eqn: Any) -> Any:
    """The jaxpr a call equation runs on its operands as they are, else ``None``."""
    if eqn.primitive.name not in _CALLS:
        return None
    for name in _SUB_JAXPR:
        sub = eqn.params.get(name)
        if sub is not None:
            inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's, or an open Jaxpr
            if len(inner.invars) == len(eqn.invars) and len(inner.outvars) == len(eqn.outvars):
                return inner
    return None


def _carries(var: Any) -> bool:
    """Whether ``var`` is a variable that can carry a gradient (of an inexact dtype)."""
    if isinstance(var, Literal):
        return False
    dtype = getattr(getattr(var, "aval", None), "dtype", None)
    return dtype is not None and bool(jnp.issubdtype(dtype, jnp.inexact))
