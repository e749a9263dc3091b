"""``jax_call`` inside ``torch.compile``: one torch custom op, ``functional_ws::jax_call``.

While Dynamo traces a compiled function, a ``jax_call`` wrapper describes its arguments
with plain Python that Dynamo can trace (:func:`describe`: tuples, lists, dicts, tensors,
Python numbers, strings and ``None``), registers the description once
(as ``torch.compiler.assume_constant_result`` does: a constant key, no shapes in it; see
``_private.py``), and calls
the op on the flat tensors, ints and floats. So a compiled function or training step calling it
compiles whole, under ``fullgraph=True`` too:

- the op's fake implementation is ``jax.eval_shape`` of the function (the JAX trace, no
  computation) and records the result's structure, which the wrapper then rebuilds;
- its real implementation hands the tensors to JAX with ``to_jax`` and the results back
  with ``to_torch`` (zero-copy; a result that would alias an input or another result is
  copied, as torch requires of a custom op);
- its autograd saves the inputs (``save_for_backward``: torch's version counter refuses a
  backward after an in-place overwrite) and runs the vector-Jacobian product as a second
  call of the same op: inside a graph a custom op can hand autograd only tensors, so the
  backward recomputes the JAX forward (rematerialisation) instead of keeping JAX's
  residuals. Gradients of gradients work the same way, to any order. A cotangent JAX
  cannot alias (a slice at an odd address) is copied there, not refused.

Keys: the op's first argument names what it runs, and torch caches compiled graphs, that
argument in them, on disk (AOTAutograd's and inductor's caches, on by default), and
``torch.export`` saves them: a later process may run a graph it never traced. So a key
means the same in every process: a forward's is the function's key (``_functions.py``: a
fingerprint of its code, closures, arrays by value, and globals read), the argument
description and a digest (:func:`forward_key`), and a process that never traced it makes
its entry from the key, for a live wrapper of that function (:func:`_loaded_entry`); a
backward's is its forward's key and the grad masks (:func:`backward_key`), and its entry
is made from the forward's on first use, when a cached backward graph runs it. A
fingerprint cannot see everything a function reads (a dtype in a config object, a module
edited between runs), and a cached graph bakes in the dtypes of the op's results: so the
key of the call a graph keeps also names the dtypes and ranks of the results this
process's function returns (:func:`traced_call` reads them from a probe, an op whose node
is dead code), and a graph built for other results is never served to it (a loaded one
is refused when they differ).

Shapes: JAX compiles per shape, so the fake implementation specialises the graph on the
inputs' shapes and ints (a symbolic size becomes a guard on its value). A new shape
recompiles torch's graph, as it recompiles JAX's; past Dynamo's recompile limit the
function runs eagerly, with the same results. Pad inputs to a few bucket sizes to keep
the number of compilations small.

What cannot become the op (an argument that is a JAX or NumPy array, a custom pytree
node...) runs eagerly at a graph break, and ``fullgraph=True`` reports it with
:data:`EAGER_ADVICE`.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import hashlib
import re
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .._compile import run_eagerly
from .._errors import LoadedGraphError, UnsupportedDtypeError, UnsupportedPytreeError
from .._locks import renew_after_fork
from .._private import constant_result, dual_level_active, transforms_active
from . import _vjp
from ._autograd import OVERWRITE_NOTE, is_differentiated
from ._dlpack import dense_strides
from ._exchange import compact_cotangent, to_jax_or_copy
from ._functions import Function
from ._functions import describe as describe_function
from ._handoff import JAX_DTYPES, SHARED_DTYPES, TORCH_DTYPES, check_wide_dtype, to_jax, to_torch
from ._reach import reached

#: The op's name; it is registered when this module is imported.
OP_NAME = "functional_ws::jax_call"
#: The probe :func:`traced_call` reads the results' dtypes from.
PROBE_NAME = "functional_ws::jax_call_probe"

#: Why a jax_call runs outside the graph, and what to do instead.
EAGER_ADVICE = (
    "functional-ws: this interop.jax_call runs eagerly, outside the torch.compile graph "
    "(the graph breaks at the call): an argument is neither a torch tensor, a Python "
    "number, a string nor None (nor a tuple, list or dict of those), so the call cannot "
    "become the custom op functional_ws::jax_call. Pass JAX and NumPy arrays as torch "
    "tensors (interop.to_torch), and other values as Python numbers or strings."
)

#: Why a jax_call inside a torch.func transform runs outside the graph.
TRANSFORM_ADVICE = (
    "functional-ws: this interop.jax_call runs eagerly, outside the torch.compile graph "
    "(the graph breaks at the call): it is called inside a torch.func transform (grad, "
    "vjp, jacrev, vmap) that torch.compile traces, and the custom op "
    "functional_ws::jax_call cannot be transformed there. Put the torch.func transform "
    "outside torch.compile (torch.func.grad(torch.compile(loss))), or call it uncompiled."
)

#: Why a jax_call whose trace failed runs outside the graph (its error is raised there).
TRACE_FAILED_ADVICE = (
    "functional-ws: this interop.jax_call cannot become the custom op "
    "functional_ws::jax_call: tracing its function for the graph failed (the function "
    "raised, or returned a pytree other than tuples, lists, dicts and None, which is "
    "UnsupportedPytreeError). Without fullgraph=True the call runs eagerly at a graph "
    "break, where that error is raised as itself; call the function uncompiled to see it."
)

TENSOR, INT, FLOAT = "T", "I", "F"
_NONE: Iterator[Any] = iter(())  # no floats


class _Caller(Protocol):
    fn: Callable[..., Any]
    function: Function

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...


_lock = threading.Lock()
renew_after_fork(sys.modules[__name__], "_lock")  # after a fork: free
#: Per key, the callers of the wrappers of that function (any live one serves).
_callers: dict[str, list[weakref.ReferenceType[Any]]] = {}
#: How many functions ``_callers`` held when its dead ones were last dropped.
_callers_pruned_at = 64


def register(caller: _Caller) -> str:
    """Register a ``jax_call`` wrapper's caller; returns what its traces find it by (its
    function's token: the op's key, the same in every process, is made from it when a
    graph first calls it, :func:`op_key`)."""
    key = caller.function.token
    global _callers_pruned_at
    with _lock:
        alive = [ref for ref in _callers.get(key, ()) if ref() is not None]
        _callers[key] = [*alive, weakref.ref(caller)]
        if len(_callers) > 2 * _callers_pruned_at:  # the dead functions' keys go (amortised)
            for token in [t for t, refs in _callers.items() if all(r() is None for r in refs)]:
                del _callers[token]
            _callers_pruned_at = max(len(_callers), 64)
    return key


def _caller(key: str) -> _Caller:
    """A live caller of the function named ``key`` (the one registered first)."""
    for ref in _callers.get(key, ()):
        caller = ref()
        if caller is not None:
            return caller  # type: ignore[no-any-return]
    raise KeyError(f"jax_call: no live wrapper of the function named {key!r}")


# ----- the description Dynamo traces (plain Python only) -----


def describe(tree: Any, tensors: list[Any], ints: list[Any], floats: list[Any]) -> Any:
    """A constant description of ``tree``, appending its tensors, ints and floats in order;
    ``None`` where a leaf cannot go through the op.

    Floats go through the op as values, not in the description: Dynamo makes a Python
    float that changes between calls symbolic, which no constant can hold (the op's fake
    implementation then specialises the graph on its value, as on an int's).

    Example:
        >>> import torch
        >>> tensors, ints, floats = [], [], []
        >>> describe(((torch.ones(2), 3), {"scale": 0.5, "name": "a"}), tensors, ints, floats)
        ('tuple', (('tuple', ('T', 'I')), ('dict', ('scale', 'name'), ('F', ('C', 'a')))))
        >>> len(tensors), ints, floats
        (1, [3], [0.5])
    """
    if isinstance(tree, torch.Tensor):
        tensors.append(tree)
        return TENSOR
    if tree is None or isinstance(tree, (bool, complex, str)):
        return ("C", tree)
    if isinstance(tree, float):  # a symbolic float too: it goes through the op
        floats.append(tree)
        return FLOAT
    if isinstance(tree, int):  # a symbolic int too: it goes through the op as a SymInt
        ints.append(tree)
        return INT
    if type(tree) is tuple or type(tree) is list:
        children = []
        for item in tree:
            child = describe(item, tensors, ints, floats)
            if child is None:
                return None
            children.append(child)
        return ("tuple" if type(tree) is tuple else "list", tuple(children))
    if type(tree) is dict:
        keys, children = [], []
        for name, item in tree.items():
            child = describe(item, tensors, ints, floats)
            if child is None:
                return None
            keys.append(name)
            children.append(child)
        return ("dict", tuple(keys), tuple(children))
    return None


def rebuild(
    structure: Any, tensors: Iterator[Any], ints: Iterator[Any], floats: Iterator[Any] = _NONE
) -> Any:
    """The tree :func:`describe` described, with values from ``tensors``, ``ints`` and
    ``floats``.

    Example:
        >>> rebuild(("tuple", ("T", ("C", None), "I", "F")), iter(["x"]), iter([3]), iter([0.5]))
        ('x', None, 3, 0.5)
    """
    if structure == TENSOR:
        return next(tensors)
    if structure == INT:
        return next(ints)
    if structure == FLOAT:
        return float(next(floats))  # the op hands floats over as floats; Dynamo too
    tag = structure[0]
    if tag == "C":
        return structure[1]
    if tag == "dict":
        return {
            k: rebuild(c, tensors, ints, floats)
            for k, c in zip(structure[1], structure[2], strict=True)
        }
    children = [rebuild(child, tensors, ints, floats) for child in structure[1]]
    return tuple(children) if tag == "tuple" else children


def traced_call(caller_key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a ``jax_call`` wrapper does while Dynamo traces it: the op, or a graph break."""
    tensors: list[Any] = []
    ints: list[Any] = []
    floats: list[Any] = []
    structure = describe((args, kwargs), tensors, ints, floats)
    if structure is None or dual_level_active():
        # (Forward mode: the op has no tangent rule; on torch 2.13 the compiled graph then
        # dropped the tangent silently. The eager call has one, the jvp rule.)
        return _call_eagerly(caller_key, args, kwargs)
    if transforms_traced():
        return _call_under_transform(caller_key, args, kwargs)
    key = op_key(caller_key, structure)
    # A probe (its node unused: dead code aot_eager and inductor drop; it computes no
    # results) gives the results' dtypes and ranks, constants even under dynamic shapes;
    # the key of the call names them:
    # a graph torch cached on disk bakes them in, and a process whose function returns
    # others (a dtype read from a config, a module edited between runs) must not run it.
    # (On detached tensors, not under no_grad: torch.export keeps a grad-mode switch as a
    # node of its own, which torch.export.load refuses.)
    probe = jax_call_probe(key, [t.detach() for t in tensors], ints, floats)
    reason = trace_failure(key)
    if reason:  # fn raised, or returned what the graph cannot rebuild
        # (a runner whose graph-break reason carries the trace's error: fullgraph=True's)
        runner: Callable[..., Any] = _failing_runners.get(reason, _call_failing_trace)
        return runner(caller_key, args, kwargs)
    key = signed_key(key, tuple((r.dtype, r.dim()) for r in probe))
    results = jax_call_op(key, tensors, ints, floats)
    return rebuild(result_structure(key), iter(results), iter(()))


def _call_eagerly(caller_key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _caller(caller_key)(args, kwargs)


def _call_failing_trace(caller_key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call whose trace for the graph failed (:func:`_probe_fake`), run eagerly at a graph
    break: the same trace on the real arguments raises its error as itself (an exception
    of the function's own, :class:`~interop.errors.UnsupportedPytreeError`), where Dynamo
    would have wrapped it in its ``TorchRuntimeError``. Should it pass now, the call runs
    eagerly."""
    tensors: list[Any] = []
    ints: list[Any] = []
    floats: list[Any] = []
    key = _op_key(caller_key, describe((args, kwargs), tensors, ints, floats))
    _abstract_results(_entry(key), *_empty_inputs(tensors, ints, floats), fresh=True)
    return _call_eagerly(caller_key, args, kwargs)


def _call_under_transform(caller_key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call traced inside a ``torch.func`` transform, run eagerly at a graph break, where
    the transform's rules (``setup_context``, vmap, jvp) run it: the op's autograd, made by
    ``torch.library``, is no ``autograd.Function`` torch.func can transform (torch 2.13
    refused it in the op's fake run: "must override the setup_context staticmethod",
    about a class the caller never wrote)."""
    return _call_eagerly(caller_key, args, kwargs)


def _transforms_traced() -> bool:
    """Whether Dynamo traces this call inside a ``torch.func`` transform (it enters the
    transform's level while tracing, so torch's own check answers)."""
    return transforms_active()


#: :func:`_transforms_traced`, read while Dynamo traces (a constant of the graph).
transforms_traced = constant_result(_transforms_traced)

run_eagerly(_call_eagerly, EAGER_ADVICE)  # type: ignore[arg-type]
run_eagerly(_call_under_transform, TRANSFORM_ADVICE)  # type: ignore[arg-type]
run_eagerly(_call_failing_trace, TRACE_FAILED_ADVICE)  # type: ignore[arg-type]

#: Per graph-break reason (:data:`TRACE_FAILED_ADVICE` and a trace's error), a copy of
#: :func:`_call_failing_trace` breaking with that reason, so that ``fullgraph=True``'s error
#: shows the function's own error. Made outside Dynamo's tracing (:func:`_probe_fake`),
#: where Dynamo only looks one up; the oldest leaves past :data:`MAX_FAILING_RUNNERS`.
_failing_runners: dict[str, Callable[..., Any]] = {}
_runners_lock = threading.Lock()
renew_after_fork(sys.modules[__name__], "_runners_lock")  # after a fork: free
MAX_FAILING_RUNNERS = 64
#: How much of a trace's error message a graph-break reason quotes.
QUOTED_ERROR_CHARS = 2000


def _failure_reason(err: BaseException) -> str:
    """The graph-break reason of a call whose trace raised ``err``, with a runner for it
    in :data:`_failing_runners`."""
    kind = type(err)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    try:
        text = str(err)
    except Exception:  # (an exception's own __str__ may raise anything)
        text = "<its message could not be read>"
    if len(text) > QUOTED_ERROR_CHARS:
        text = text[:QUOTED_ERROR_CHARS] + " [...]"
    reason = f"{TRACE_FAILED_ADVICE} The trace's error: {name}: {text}"
    with _runners_lock:
        if reason not in _failing_runners:
            if len(_failing_runners) >= MAX_FAILING_RUNNERS:
                del _failing_runners[next(iter(_failing_runners))]
            base = _call_failing_trace
            runner = types.FunctionType(
                base.__code__, base.__globals__, base.__name__, base.__defaults__, base.__closure__
            )
            run_eagerly(runner, reason)
            _failing_runners[reason] = runner
    return reason


# ----- entries: one per (wrapper, description); the op's key names one -----


@dataclasses.dataclass
class Entry:
    """What the op runs for one key: ``fn`` on the arguments ``structure`` describes."""

    fn: Callable[..., Any]
    structure: Any
    jitted: bool
    #: The result's description, recorded by the op's implementations.
    result: Any = None
    #: Whether tensors JAX cannot alias are copied (a backward's cotangents), not refused.
    copies_inputs: bool = False
    #: The function's :class:`Function`, held: its number (in the key) is then never given
    #: to a twin while this entry can run (a twin would find this entry under its key).
    owner: Any = None
    #: Per inputs (shapes and dtypes, ints, floats): the results' description and shapes
    #: and dtypes (:func:`_abstract_results`).
    abstract: dict[Any, Any] = dataclasses.field(default_factory=dict)
    #: Per inputs, the digest of the function's jaxpr on them (:func:`_semantics`).
    semantics: dict[Any, str] = dataclasses.field(default_factory=dict)
    #: The signature a loaded graph's key names (results' dtypes and ranks, and the
    #: semantics), until the first call checked it (:func:`_loaded_entry`); else ``None``.
    signature: str | None = None
    #: A loaded entry's possible functions, until its first call chose one (:func:`_choose`).
    candidates: list[Any] | None = None


_entries: dict[str, Entry] = {}
#: Per thread, ``(key, semantics)`` of the probe traced last (:func:`_signed_key` reads it).
_traced = threading.local()
#: Held while a loaded entry's function is chosen (:func:`_choose`).
_choosing = threading.Lock()
renew_after_fork(sys.modules[__name__], "_choosing")  # after a fork: free
#: Bumped whenever what the op's graphs compute changes (torch caches compiled graphs on
#: disk, keyed by the graph, which names the op's key, not by this library's code):
#: 2 = a result the loss ignores gets no cotangent, an input no gradient reaches ``None``;
#: 3 = a call's signed key names what the function computes (loaded graphs choose by it).
OP_SEMANTICS = 3
#: Marks a backward's key: ``<forward key>'<differentiated mask>.<given mask>``.
BACKWARD = "'"
_MASKS = re.compile(r"[01]*\.[01]*")


def _digest(structure: Any) -> str:
    return hashlib.sha256(repr(structure).encode()).hexdigest()[:12]


def _op_key(caller_key: str, structure: Any) -> str:
    """The key of a wrapper's function called with arguments ``structure`` describes (see
    :func:`forward_key`)."""
    caller = _caller(caller_key)
    function = caller.function
    key = forward_key(function.op_key, structure)  # (a fingerprint made now, unlocked)
    with _lock:
        if key not in _entries:  # a compiled graph may call it later: keep the wrapper
            _entries[key] = Entry(caller.fn, structure, function.jitted, owner=function)
    return key


def forward_key(function_key: str, structure: Any) -> str:
    """``<function's key>/<structure>/<digest>``: the function, the arguments' description
    (in the clear, base64: a process that loads a saved program makes the entry from it),
    and a digest of the description, of JAX's settings that decide result dtypes and of
    :data:`OP_SEMANTICS`. So the same in every process that would compute the same (a
    graph cached with x64 off must not serve a process with it on: it would read float64
    results as float32; a graph cached by a version whose op meant otherwise is not
    served).

    Example:
        >>> key = forward_key("f@0123#0", ("tuple", (("tuple", ("T",)), ("dict", (), ()))))
        >>> _structure_of(key.split("/")[1])
        ('tuple', (('tuple', ('T',)), ('dict', (), ())))
    """
    text = repr(structure)
    encoded = base64.urlsafe_b64encode(text.encode()).decode() if _reads_back(text) else "-"
    return f"{function_key}/{encoded}/{_digest((structure, _dtype_settings(), OP_SEMANTICS))}"


def _reads_back(text: str) -> bool:
    """Whether a description's text reads back as the same description (not so for a
    constant such as ``complex("nan")`` or a dict key that is an ``Enum``)."""
    try:
        return repr(ast.literal_eval(text)) == text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _structure_of(encoded: str) -> Any:
    """The arguments' description a key carries (:func:`forward_key`)."""
    return ast.literal_eval(base64.urlsafe_b64decode(encoded.encode()).decode())


def _signed_key(key: str, results: tuple[tuple[torch.dtype, int], ...]) -> str:
    """``key`` with the dtypes and ranks of its results and what the function computes on
    the traced inputs (its jaxpr's digest, :func:`_semantics`, which the probe's trace just
    read): another key where either differs, so that no cached graph built for other
    results runs this one (it read float16 bytes as bfloat16, or wrote past a buffer), and
    a loaded graph runs the function it was traced with (:func:`_choose`)."""
    traced = getattr(_traced, "semantics", None)  # what the probe's trace just read
    semantics = traced[1] if traced is not None and traced[0] == key else "-"
    results_digest = _digest(tuple((str(dtype), rank) for dtype, rank in results))
    signed = f"{key}|{results_digest}.{semantics}"
    with _lock:
        if signed not in _entries:
            parent = _entries[key]
            _entries[signed] = Entry(  # its own result and abstract results
                parent.fn,
                parent.structure,
                parent.jitted,
                copies_inputs=parent.copies_inputs,
                owner=parent.owner,
            )
    return signed


def _entry(key: str) -> Entry:
    """The entry of ``key``; a backward's is made from its forward's on first use (a warm
    compile cache runs a backward graph this process never traced), and a forward's from
    the key, for a live wrapper of its function, where the graph was traced elsewhere
    (:func:`_loaded_entry`)."""
    entry = _entries.get(key)
    if entry is not None:
        return entry
    forward, mark, masks = key.rpartition(BACKWARD)
    if not mark or _MASKS.fullmatch(masks) is None:  # (a function's name may hold a quote)
        return _loaded_entry(key)
    parent = _entry(forward)
    diff, given = (tuple(c == "1" for c in bits) for bits in masks.split("."))
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            entry = _entries[key] = _backward_entry(parent, diff, given)
    return entry


def _dtype_settings() -> tuple[Any, ...]:
    """JAX's settings that change what dtype (or PRNG key shape) a function returns."""
    return tuple(getattr(jax.config, name, None) for name in _DTYPE_SETTINGS)


_DTYPE_SETTINGS = ("jax_enable_x64", "jax_default_prng_impl")


def _loaded_entry(key: str) -> Entry:
    """The entry of a forward ``key`` that no graph traced in this process names: a
    program ``torch.export`` saved, or an AOTInductor package, run here. Made from the key
    for the live ``jax_call`` wrappers that may be its function (of its fingerprint, else
    of its name); its first call runs the one that computes what the key says the graph
    was traced with (:func:`_choose`).

    Raises:
        LoadedGraphError: (``KeyError``) no live wrapper of that name, or a key of another
            version of this library or other JAX settings.
    """
    try:  # from the right: a function's name may hold any character, the rest cannot
        function_key, encoded, tail = key.rsplit("/", 2)
        digest, _, signature = tail.partition("|")
        structure = None if encoded == "-" else _structure_of(encoded)
    except (ValueError, SyntaxError, TypeError):
        raise LoadedGraphError(
            f"jax_call: a graph calls the op with key {key!r}, which this version of "
            "functional-ws cannot read (a graph saved by another version): export or "
            "compile it again."
        ) from None
    if structure is None:
        raise LoadedGraphError(
            f"jax_call: a graph calls {function_key!r} with an argument its key cannot "
            "carry (a constant such as complex('nan'), or a dict key such as an Enum, "
            "does not read back from its repr), so a process that did not trace the call "
            "cannot run it. Pass that value as a string, a number or a tensor, or trace "
            "the call in this process first (torch.compile or torch.export of it)."
        )
    if _digest((structure, _dtype_settings(), OP_SEMANTICS)) != digest:
        raise LoadedGraphError(
            f"jax_call: a graph calls {function_key!r} with a key made under other JAX "
            "settings that decide result dtypes (jax_enable_x64, jax_default_prng_impl) "
            f"or by another version of functional-ws; this process has {_dtype_settings()}. "
            "Run it with the settings it was made under, or export or compile it again."
        )
    candidates = _live_callers(function_key)
    if not candidates:
        raise LoadedGraphError(
            f"jax_call: a graph calls {function_key!r}, and no live jax_call wrapper in "
            "this process wraps a function of that name. A compiled graph (torch.compile's "
            "cache), a program torch.export saved or an AOTInductor package runs the JAX "
            "function of a wrapper this process made: make it (jax_call of the function "
            "the graph was made with, over the same values) before running the graph, and "
            "keep it alive while the graph runs."
        )
    first = candidates[0]
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            entry = Entry(first.fn, structure, first.function.jitted, owner=first.function)
            entry.signature = signature or None
            entry.candidates = candidates
            _entries[key] = entry
    return entry


def _live_callers(function_key: str) -> list[_Caller]:
    """The live callers that may run the function ``function_key`` names: those of that
    fingerprint first (the number after ``#`` counts functions alike in the order a
    process met them), then the others of that name (a fingerprint reads what a function
    closes over by shape, not by value, and stops at a depth)."""
    name = function_key.rpartition("@")[0]
    alike = function_key.rpartition("#")[0]
    with _lock:
        callers = [ref() for refs in _callers.values() for ref in refs]
    found = []
    for caller in callers:
        if caller is not None and caller.function.name == name:
            same = caller.function.op_key.rpartition("#")[0] == alike  # (made now if need be)
            found.append((not same, caller))
    return [caller for _, caller in sorted(found, key=lambda pair: pair[0])]


def _choose(
    key: str, entry: Entry, tensors: list[torch.Tensor], ints: list[int], floats: list[float]
) -> None:
    """Before a loaded entry's first call: run the candidate whose jaxpr on these inputs
    (and its gradient's) is the one the graph was traced with (its semantics, in the key's
    signature), and refuse where none is. A key that names no semantics runs its candidate
    only where the candidates all compute alike. One thread chooses; the others wait."""
    with _choosing:
        candidates = entry.candidates
        if candidates is None:  # another thread chose meanwhile
            return
        wanted = (entry.signature or "").partition(".")[2]
        inputs = _empty_inputs(tensors, ints, floats)
        found: dict[str, _Caller] = {}
        for caller, trial in _trials(entry.structure, candidates, inputs, semantics=True):
            found.setdefault(trial.semantics[inputs], caller)
        chosen = found.get(wanted)
        if chosen is None and wanted in ("", "-") and len(found) == 1:  # nothing to tell apart
            (chosen,) = found.values()
        if chosen is not None:
            entry.fn, entry.jitted, entry.owner = chosen.fn, chosen.function.jitted, chosen.function
            entry.candidates = None  # last: a reader that sees None sees the function
            return
        with _lock:  # the next call looks for the candidates again (they hold no wrapper)
            if _entries.get(key) is entry:
                del _entries[key]
    name = candidates[0].function.name if candidates else "?"
    raise LoadedGraphError(
        f"jax_call: no live jax_call wrapper of {name!r} in this process computes what the "
        f"graph's call {key.rpartition('|')[0]!r} (arguments {entry.structure}, shapes and "
        f"dtypes {inputs[0]}) was traced with (it was traced in another process; its jaxpr on "
        "these inputs, closed-over values and gradient rules included, is another"
        + (", or several compute otherwise and the key names none" if len(found) > 1 else "")
        + "): make the wrapper of the function the graph was made with, over the same "
        "values (the same weights), or export or compile it again."
    )


def _trials(
    structure: Any, candidates: list[_Caller], inputs: Any, *, semantics: bool
) -> Iterator[tuple[_Caller, Entry]]:
    """Each candidate that takes ``inputs`` (a loaded entry's), with an entry of its own
    that traced it there (its results, and with ``semantics`` what it computes)."""
    for caller in candidates:
        trial = Entry(caller.fn, structure, caller.function.jitted)
        try:
            _abstract_results(trial, *inputs, fresh=True, semantics=semantics)
        except Exception:  # not this one: it cannot take these arguments
            continue
        yield caller, trial


def _check_signature(entry: Entry, results: list[torch.Tensor]) -> None:
    """Refuse results whose dtypes and ranks are not those a loaded graph's key names."""
    assert entry.signature is not None
    made = _digest(tuple((str(r.dtype), r.dim()) for r in results))
    if made != entry.signature.partition(".")[0]:
        raise LoadedGraphError(
            "jax_call: the JAX function returned results of dtypes and ranks "
            f"{[(str(r.dtype), r.dim()) for r in results]}, which are not those the graph "
            "running it was made for (it was traced in another process, where the function "
            "returned others: a dtype read from a config, code edited since). Export or "
            "compile it again."
        )
    entry.signature = None  # checked once


def _result_structure(key: str) -> Any:
    return _entry(key).result


def _trace_failure(key: str) -> str:
    """Why the probe's trace of entry ``key``'s function, just made, failed: the graph
    break's reason, naming the trace's error; ``""`` where it did not fail."""
    failed = getattr(_traced, "failed", None)
    return failed[1] if failed is not None and failed[0] == key else ""


#: The entry's key for a wrapper and a description (a constant of the traced graph).
op_key = constant_result(_op_key)
#: The key naming the results' dtypes and ranks too (see :func:`traced_call`).
signed_key = constant_result(_signed_key)
#: The description of the entry's result, once the op's fake implementation has run.
result_structure = constant_result(_result_structure)
#: Why the probe's trace failed, or ``""`` (:func:`traced_call` then runs the call eagerly).
trace_failure = constant_result(_trace_failure)


def _describe_result(result: Any) -> tuple[Any, list[Any]]:
    """``result``'s description (arrays as tensors) and its array leaves, in order."""
    if isinstance(result, (jax.ShapeDtypeStruct, *_vjp.ARRAY_TYPES, int, float, complex)):
        return TENSOR, [result]
    if result is None:
        return ("C", None), []
    if type(result) is tuple or type(result) is list:
        pairs = [_describe_result(item) for item in result]
        tag = "tuple" if type(result) is tuple else "list"
        return (tag, tuple(d for d, _ in pairs)), [a for _, leaves in pairs for a in leaves]
    if type(result) is dict:
        try:
            names = sorted(result)  # the order JAX's pytrees give (jax.eval_shape's too)
        except TypeError:
            names = list(result)
        pairs = [_describe_result(result[name]) for name in names]
        described = ("dict", tuple(names), tuple(d for d, _ in pairs))
        return described, [a for _, leaves in pairs for a in leaves]
    raise UnsupportedPytreeError(
        f"jax_call under torch.compile: the function returned a {type(result).__name__}, "
        "which the compiled graph cannot rebuild: return arrays in tuples, lists or dicts "
        "(or call the function outside the compiled code)."
    )


def _record(entry: Entry, structure: Any) -> None:
    if entry.result is not None and entry.result != structure:
        raise UnsupportedPytreeError(
            "jax_call under torch.compile: the function's result changed structure between "
            f"calls with arguments of one structure ({entry.result} then {structure}): its "
            "input shapes, or the value of an int or float argument (those go through the "
            "compiled op as values, not as part of its key), decided it. A compiled call "
            "needs one result structure per argument structure: return the same structure "
            "(pad, or return None leaves), or pass the deciding value as a string."
        )
    entry.result = structure


# ----- the op -----


def _dense(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with the strides of a contiguous tensor (a view where only the strides
    of size-1 or empty dimensions differ, a copy only for another layout)."""
    strides = dense_strides(tensor.shape)
    if tensor.stride() == strides:
        return tensor
    if tensor.is_contiguous():
        return tensor.as_strided(tensor.shape, strides)
    return tensor.contiguous()


def _unaliased(results: list[torch.Tensor], inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Results sharing no memory with the inputs or each other (a custom op's contract)."""
    seen = {t.data_ptr() for t in inputs if t.numel()}
    out = []
    for result in results:
        if result.numel():
            if result.data_ptr() in seen:
                result = result.clone()
            seen.add(result.data_ptr())
        out.append(result)
    return out


@torch.library.custom_op(OP_NAME, mutates_args=())
def jax_call_op(
    key: str, tensors: list[torch.Tensor], ints: list[int], floats: list[float]
) -> list[torch.Tensor]:
    """Run entry ``key``'s JAX function on ``tensors``, ``ints`` and ``floats``; its array
    results.

    Example:
        >>> import jax.numpy as jnp, torch
        >>> key = add_entry(lambda x, n, s: x * n * s, ("tuple", ("T", "I", "F")), jitted=False)
        >>> jax_call_op(key, [torch.ones(2)], [3], [0.5])
        [tensor([1.5000, 1.5000])]
    """
    entry = _entry(key)
    handoff = to_jax_or_copy if entry.copies_inputs else to_jax
    arrays = iter([handoff(t.detach()) for t in tensors])
    args, kwargs = _call_arguments(entry, arrays, iter(ints), iter(floats))
    if entry.candidates is not None:  # a graph traced elsewhere: its first call here
        _choose(key, entry, tensors, ints, floats)
    structure, leaves = _describe_result(entry.fn(*args, **kwargs))
    _record(entry, structure)
    results = [_dense(to_torch(jnp.asarray(leaf))) for leaf in leaves]
    if entry.signature is not None:
        _check_signature(entry, results)
    traced = entry.abstract.get(_empty_inputs(tensors, ints, floats))
    if traced is not None:
        _check_traced(traced[1], results)
    return _unaliased(results, tensors)


def _check_traced(
    traced: list[tuple[tuple[int, ...], torch.dtype]], results: list[torch.Tensor]
) -> None:
    """Refuse results of other dtypes or shapes than the graph calling the op was traced
    with: its kernels would read them as those (float64 bytes as float32: wrong numbers;
    the reverse writes past a buffer)."""
    got = [(tuple(r.shape), r.dtype) for r in results]
    if got != traced:
        raise LoadedGraphError(
            "jax_call: the JAX function returned results of shapes and dtypes "
            f"{_listed(got)}, but the compiled graph calling it was traced when it returned "
            f"{_listed(traced)}: JAX's x64 setting changed since (jax.enable_x64, "
            "jax.config.update), or the function reads a setting that changed. Call it "
            "under the settings it was compiled with, or compile again "
            "(torch._dynamo.reset())."
        )


def _listed(leaves: list[tuple[tuple[int, ...], torch.dtype]]) -> str:
    parts = [f"{shape} {str(dtype).removeprefix('torch.')}" for shape, dtype in leaves]
    return f"[{', '.join(parts)}]"


def _call_arguments(
    entry: Entry, arrays: Iterator[Any], ints: Iterator[Any], floats: Iterator[Any]
) -> Any:
    """``(args, kwargs)`` for ``entry.fn``, from the values of one op call."""
    return rebuild(entry.structure, arrays, ints, floats)


def _array_results(
    entry: Entry, arrays: Sequence[Any], ints: Sequence[Any], floats: Sequence[Any]
) -> list[Any]:
    """``entry.fn`` on these values (a JAX function of them): its array results, in order."""
    args, kwargs = _call_arguments(entry, iter(arrays), iter(ints), iter(floats))
    _, leaves = _describe_result(entry.fn(*args, **kwargs))
    return [jnp.asarray(leaf) for leaf in leaves]


def _as_call(args_structure: Any) -> Any:
    """The description of a call ``(args, {})`` whose positional arguments ``args``
    describes (a ``("tuple", ...)``)."""
    return ("tuple", (args_structure, ("dict", (), ())))


def _jax_dtype(dtype: torch.dtype) -> Any:
    if dtype not in SHARED_DTYPES:
        check_wide_dtype(dtype)  # refuses what to_jax refuses, with its message
    return JAX_DTYPES[dtype]


def _torch_dtype(dtype: Any) -> torch.dtype:
    found = TORCH_DTYPES.get(jnp.dtype(dtype))
    if found is None:
        raise UnsupportedDtypeError(
            f"to_torch: JAX dtype {dtype} has no torch equivalent that DLPack can carry "
            "(the function's result, under torch.compile)."
        )
    return found


def _default_device() -> torch.device:
    device = jax.devices()[0]
    if device.platform == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", device.local_hardware_id)


@jax_call_op.register_fake
def _fake(
    key: str, tensors: list[torch.Tensor], ints: list[int], floats: list[float]
) -> list[torch.Tensor]:
    entry = _entry(key)
    if entry.candidates is not None:  # a loaded graph compiled: its function, as it runs
        _choose(key, entry, tensors, ints, floats)
    structure, results = _empty_results(key, tensors, ints, floats, fresh=True)
    _record(entry, structure)
    return results


def _empty_results(
    key: str, tensors: list[torch.Tensor], ints: list[int], floats: list[float], *, fresh: bool
) -> tuple[Any, list[torch.Tensor]]:
    """The description of entry ``key``'s results on these arguments, and empty tensors of
    their shapes and dtypes (:func:`_abstract_results`; ``fresh`` as there)."""
    inputs = _empty_inputs(tensors, ints, floats)
    structure, leaves = _abstract_results(_entry(key), *inputs, fresh=fresh)
    return structure, _empties(leaves, tensors)


def _empty_inputs(
    tensors: list[torch.Tensor], ints: list[int], floats: list[float]
) -> tuple[Any, tuple[int, ...], tuple[float, ...]]:
    """The inputs :func:`_abstract_results` keys its answers by (shapes and dtypes, ints,
    floats), from the op's arguments."""
    # int() of a symbolic size guards on its value: the graph is specialised per shape.
    shapes = tuple((tuple(int(d) for d in t.shape), t.dtype) for t in tensors)
    values = tuple(int(i) for i in ints)
    reals = tuple(float(f) for f in floats)  # likewise a guard on a symbolic float's value
    return shapes, values, reals


def _empties(
    leaves: list[tuple[tuple[int, ...], torch.dtype]], tensors: list[torch.Tensor]
) -> list[torch.Tensor]:
    """Empty tensors of these shapes and dtypes, on the inputs' device."""
    device = tensors[0].device if tensors else _default_device()
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in leaves]


def _abstract_results(
    entry: Entry,
    shapes: tuple[Any, ...],
    ints: tuple[int, ...],
    floats: tuple[float, ...],
    *,
    fresh: bool,
    semantics: bool = False,
) -> tuple[Any, list[tuple[tuple[int, ...], torch.dtype]]]:
    """The description of ``entry``'s results on tensors of ``shapes`` (``(shape, torch
    dtype)`` pairs), ``ints`` and ``floats``, and each array's shape and torch dtype
    (the JAX trace, no computation). ``fresh``: traced again (what a trace reads: the
    function may return another dtype now, read from a config), else what the last trace
    found, kept per inputs (the eager backend's probe, whose results nothing reads). With
    ``semantics``, what the function computes on them is kept too (:func:`_semantics`)."""
    inputs = (shapes, ints, floats)
    kept: tuple[Any, list[tuple[tuple[int, ...], torch.dtype]]] | None = entry.abstract.get(inputs)
    if kept is not None and not fresh:
        return kept
    specs = [jax.ShapeDtypeStruct(shape, _jax_dtype(dtype)) for shape, dtype in shapes]  # type: ignore[no-untyped-call]

    def fn(*arrays: Any) -> Any:
        args, kwargs = _call_arguments(entry, iter(arrays), iter(ints), iter(floats))
        return entry.fn(*args, **kwargs)

    closed, shapes_out = jax.make_jaxpr(fn, return_shape=True)(*specs)
    structure, leaves = _describe_result(shapes_out)
    found = structure, [(tuple(a.shape), _torch_dtype(a.dtype)) for a in leaves]
    entry.abstract[inputs] = found
    if semantics:
        entry.semantics[inputs] = _semantics(closed, _backward_jaxpr(fn, specs))
    return found


def _backward_jaxpr(fn: Callable[..., Any], specs: list[Any]) -> Any:
    """The jaxpr of ``fn``'s vector-Jacobian product on arguments of ``specs`` (its
    ``custom_vjp`` and ``custom_jvp`` rules traced in: the forward's jaxpr names them
    only), or ``None`` where ``fn`` has none (integers only, a ``while_loop``)."""

    def pulled_back(arrays: list[Any], cotangents: list[Any]) -> Any:
        _, pullback = jax.vjp(lambda *xs: _array_leaves(fn(*xs)), *arrays)
        return pullback(cotangents)

    try:
        outs = jax.eval_shape(lambda *xs: _array_leaves(fn(*xs)), *specs)
        cotangents = [
            jax.ShapeDtypeStruct(o.shape, o.dtype)  # type: ignore[no-untyped-call]
            if jnp.issubdtype(o.dtype, jnp.inexact)
            else jax.ShapeDtypeStruct(o.shape, jax.dtypes.float0)  # type: ignore[no-untyped-call]
            for o in outs
        ]
        return jax.make_jaxpr(pulled_back)(list(specs), cotangents)
    except Exception:  # not differentiable: the forward says what it computes
        return None


def _array_leaves(result: Any) -> list[Any]:
    return [jnp.asarray(leaf) for leaf in _describe_result(result)[1]]


def _semantics(closed: Any, backward: Any) -> str:
    """A digest of what a traced function computes: its jaxpr's text and that of its
    vector-Jacobian product (JAX prints no addresses; nested jaxprs included), the values
    of the constants they close over, at any depth, and what each callback's function
    reads (:func:`_functions.describe`). Alike in every process tracing the same
    computation with the same JAX; not alike for two closures of one code over other
    weights, or with other gradient rules."""
    digest = hashlib.sha256(f"{closed}\n{backward}".encode())
    for callback in _callbacks(closed):
        digest.update(repr(describe_function(callback)).encode())
    for const in [*_consts(closed), *_consts(backward)]:
        digest.update(
            repr((getattr(const, "shape", None), str(getattr(const, "dtype", "")))).encode()
        )
        try:
            if jnp.issubdtype(const.dtype, jax.dtypes.prng_key):
                const = jax.random.key_data(const)
            data: Any = np.ascontiguousarray(np.asarray(const)).reshape(-1).view(np.uint8)
        except Exception:  # not an array: its repr
            data = repr(const).encode()
        digest.update(data)
    return digest.hexdigest()[:16]


def _callbacks(closed: Any) -> Iterator[Any]:
    """The Python functions the callbacks of a closed jaxpr (nested ones included) call."""
    jaxpr = getattr(closed, "jaxpr", closed)
    for eqn in getattr(jaxpr, "eqns", ()):
        for name, param in eqn.params.items():
            found = getattr(param, "callback_func", None)
            if found is not None or name == "callback":
                yield found if found is not None else param
            for inner in param if isinstance(param, (tuple, list)) else (param,):
                if hasattr(inner, "eqns") or hasattr(inner, "consts"):
                    yield from _callbacks(inner)


def _consts(closed: Any) -> Iterator[Any]:
    """The constants of a closed jaxpr and of every jaxpr nested in its equations."""
    if closed is None:
        return
    yield from getattr(closed, "consts", ())
    jaxpr = getattr(closed, "jaxpr", closed)
    for eqn in getattr(jaxpr, "eqns", ()):
        for param in eqn.params.values():
            for inner in param if isinstance(param, (tuple, list)) else (param,):
                if hasattr(inner, "eqns") or hasattr(inner, "consts"):
                    yield from _consts(inner)


@torch.library.custom_op(PROBE_NAME, mutates_args=())
def jax_call_probe(
    key: str, tensors: list[torch.Tensor], ints: list[int], floats: list[float]
) -> list[torch.Tensor]:
    """Empty tensors of the shapes and dtypes ``jax_call_op`` returns for the same
    arguments, computed by no JAX call (:func:`traced_call` reads their dtypes; aot_eager
    and inductor drop the unused node, the eager backend runs it: a lookup)."""
    entry = _entry(key)
    if entry.candidates is not None:  # a loaded graph's probe: no choice is made here
        return _empties(_any_candidates_results(entry, tensors, ints, floats), tensors)
    try:
        return _empty_results(key, tensors, ints, floats, fresh=False)[1]
    except Exception:  # as its fake implementation: the probe computes nothing, and a
        # failing trace never reaches the op it probes for (traced_call runs the call at
        # a graph break, where the error is raised as itself)
        return []


def _any_candidates_results(
    entry: Entry, tensors: list[torch.Tensor], ints: list[int], floats: list[float]
) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """The results' shapes and dtypes of the first of a loaded entry's candidates that
    takes these arguments (nothing reads a probe's results: only their number matters);
    the choice is the op's (:func:`_choose`)."""
    inputs = _empty_inputs(tensors, ints, floats)
    for _, trial in _trials(entry.structure, entry.candidates or [], inputs, semantics=False):
        leaves: list[tuple[tuple[int, ...], torch.dtype]] = trial.abstract[inputs][1]
        return leaves
    raise LoadedGraphError(
        "jax_call: no live jax_call wrapper of this name in this process takes the "
        "arguments the loaded graph passes it: make the wrapper of the function the graph "
        "was made with before running it."
    )


@jax_call_probe.register_fake
def _probe_fake(
    key: str, tensors: list[torch.Tensor], ints: list[int], floats: list[float]
) -> list[torch.Tensor]:
    # The op's fake implementation, but for the check of one result structure per key: the
    # probe's key names no results (the signed key that follows it does, and checks).
    # What the trace read is kept for that signed key (traced_call makes it next).
    # A trace that fails is kept as failed, not raised: raised here, inside Dynamo's
    # fake-tensor run, the error reached the caller wrapped in Dynamo's TorchRuntimeError
    # (whose hint says eager code may fail too); traced_call raises it at a graph break.
    _traced.failed = None
    entry = _entry(key)
    if entry.candidates is not None:  # a loaded graph compiled: as the probe runs
        return _empties(_any_candidates_results(entry, tensors, ints, floats), tensors)
    inputs = _empty_inputs(tensors, ints, floats)
    try:
        _, found = _abstract_results(entry, *inputs, fresh=True, semantics=True)
    except Exception as err:
        _traced.failed = (key, _failure_reason(err))
        return []
    _traced.semantics = (key, entry.semantics[inputs])
    return _empties(found, tensors)


def add_entry(fn: Callable[..., Any], args_structure: Any, *, jitted: bool) -> str:
    """Register ``fn`` for the op under a new key, its positional arguments described by
    ``args_structure`` (a ``("tuple", ...)`` of :func:`describe`'s form): how the tests
    call the op directly.

    Example:
        >>> key = add_entry(lambda x: x, ("tuple", ("T",)), jitted=False)
        >>> _entries[key].structure
        ('tuple', (('tuple', ('T',)), ('dict', (), ())))
    """
    structure = _as_call(args_structure)
    with _lock:
        key = f"{getattr(fn, '__name__', 'fn')}@{id(fn):x}/{_digest(structure)}"
        _entries[key] = Entry(fn, structure, jitted)
    return key


# ----- autograd: the backward is the op again, on the vector-Jacobian product -----


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    key, tensors, ints, floats = inputs
    ctx.key, ctx.ints, ctx.floats = key, list(ints), list(floats)
    ctx.diff = tuple(is_differentiated(t) for t in tensors)
    ctx.inexact = tuple(o.is_floating_point() or o.is_complex() for o in output)
    # A result the loss ignores gets no cotangent (None, not zeros), so that an input read
    # only for it gets None too, as in the eager backward (_reaching).
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*tensors)


def _backward(ctx: Any, grads: list[torch.Tensor | None]) -> tuple[Any, ...]:
    try:
        tensors = ctx.saved_tensors
    except RuntimeError as err:
        if "inplace operation" in str(err) and hasattr(err, "add_note"):
            err.add_note(OVERWRITE_NOTE)
        raise
    given = tuple(g is not None and inexact for g, inexact in zip(grads, ctx.inexact, strict=True))
    diff = _reaching(ctx, tensors, given)
    key = backward_key(ctx.key, diff, given)
    cotangents = [
        compact_cotangent(g) for g, has in zip(grads, given, strict=True) if g is not None and has
    ]
    results = iter(jax_call_op(key, [*tensors, *cotangents], ctx.ints, ctx.floats))
    # No gradient for the ints and floats, in the structure torch 2.13 checks: an empty
    # list stays a list node, a list of numbers counts as one leaf.
    gradients = [next(results) if d else None for d in diff]
    return None, gradients, None if ctx.ints else [], None if ctx.floats else []


def _reaching(
    ctx: Any, tensors: Sequence[torch.Tensor], given: tuple[bool, ...]
) -> tuple[bool, ...]:
    """The differentiated tensors a gradient reaches from the results with a cotangent
    (``given``): torch's ``None`` for the others, as in the eager backward (``_reach.py``).
    Read from the function's jaxpr when the backward is traced (the graph is specialised
    on the shapes already); a cached graph keeps the answer in its key."""
    entry = _entry(ctx.key)
    if _vjp.runs_eagerly(entry.jitted) or not any(ctx.diff):
        return tuple(ctx.diff)  # unjitted (or jit disabled): JAX's zeros (Plan.reaching)
    ints, floats = [int(i) for i in ctx.ints], [float(f) for f in ctx.floats]
    specs = [
        jax.ShapeDtypeStruct(tuple(int(d) for d in t.shape), _jax_dtype(t.dtype))  # type: ignore[no-untyped-call]
        for t in tensors
    ]

    def fn(*arrays: Any) -> list[Any]:
        return _array_results(entry, arrays, ints, floats)

    found = reached(fn, specs, given)
    return tuple(d and r for d, r in zip(ctx.diff, found, strict=True))


def backward_key(key: str, diff: tuple[bool, ...], given: tuple[bool, ...]) -> str:
    """The key of entry ``key``'s vector-Jacobian product for these masks: derived from
    them, so that a cached backward graph names the same product in every process.

    Example:
        >>> backward_key("f@0123#0/abc", (True, False), (True,))
        "f@0123#0/abc'10.1"
    """
    bits = ("".join("1" if b else "0" for b in mask) for mask in (diff, given))
    return f"{key}{BACKWARD}{'.'.join(bits)}"


def _backward_entry(entry: Entry, diff: tuple[bool, ...], given: tuple[bool, ...]) -> Entry:
    """The entry of ``entry``'s vector-Jacobian product for these masks."""
    vjp = _vjp_function(entry, diff, given)
    n_ints = sum(1 for _ in _leaves_of(entry.structure, INT))
    n_floats = sum(1 for _ in _leaves_of(entry.structure, FLOAT))
    arguments = (
        ("list", (TENSOR,) * len(diff)),
        ("list", (TENSOR,) * sum(given)),
        ("tuple", (INT,) * n_ints),
        ("tuple", (FLOAT,) * n_floats),
    )
    structure = _as_call(("tuple", arguments))
    return Entry(vjp, structure, entry.jitted, copies_inputs=True)


def _leaves_of(structure: Any, kind: str) -> Iterator[None]:
    """One item per leaf of ``kind`` (:data:`INT` or :data:`FLOAT`) in ``structure``."""
    if structure == kind:
        yield None
    elif structure not in (TENSOR, INT, FLOAT) and structure[0] != "C":
        for child in structure[-1]:
            yield from _leaves_of(child, kind)


def _vjp_function(
    entry: Entry, diff: tuple[bool, ...], given: tuple[bool, ...]
) -> Callable[..., list[Any]]:
    """``entry``'s vector-Jacobian product as a JAX function of (its tensors, the given
    cotangents, its ints and floats): one gradient per differentiated tensor."""
    positions = [i for i, d in enumerate(diff) if d]

    def vjp(
        inputs: list[Any],
        cotangents: list[Any],
        ints: tuple[int, ...],
        floats: tuple[float, ...],
    ) -> list[Any]:
        def primal(*values: Any) -> list[Any]:
            arrays = list(inputs)
            for position, value in zip(positions, values, strict=True):
                arrays[position] = value
            return _array_results(entry, arrays, ints, floats)

        outs, pullback = jax.vjp(primal, *(inputs[p] for p in positions))
        avals = _vjp.avals_of(outs)
        kinds = tuple(
            _vjp.GIVEN if g else _vjp.ZERO if jnp.issubdtype(o.dtype, jnp.inexact) else _vjp.FLOAT0
            for g, o in zip(given, outs, strict=True)
        )
        return _vjp.gradients(pullback(_vjp.cotangents(avals, kinds, cotangents)))

    return jax.jit(vjp, static_argnums=(2, 3)) if entry.jitted else vjp


jax_call_op.register_autograd(_backward, setup_context=_setup_context)
