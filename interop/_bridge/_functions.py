"""What the bridge knows of one JAX function, shared by every ``jax_call`` wrapper of it.

A :class:`Function` holds the plans of a function (``_vjp.Plan``, one per call signature)
and the key that names it to the custom op under ``torch.compile``. It is found by what
the function *is*, not by the wrapper: ``jax_call(jax.jit(f))`` made anew inside
``forward()`` on every step finds the same :class:`Function`, so its plans, compiled once,
serve every step (JAX's own ``jit`` caches by the function the same way). The identity is
the function (for a ``jax.jit`` wrapper: the function it wraps, and its options; for an
unjitted bound method: its object and its function), held weakly: the table never keeps a
function alive, and forgets it when it dies.

A jitted bound method, ``jax.jit(self.layer)``, is found by the bound method itself: made
anew (``self.layer`` is a new object on every access) it is a new function, traced anew,
as JAX traces it anew, so it reads what ``self`` holds now (a scale, ``self.training``).
Its plans trace the method's function with its object (:meth:`Function.traced`), never
through JAX's trace cache, which finds a trace by an *equal* bound method while one is
alive; and a graph keeps no bound method alive for its backward, so no old one serves a
new one there either.

The custom op's key names the function in a compiled graph; torch caches graphs (the key
in them) on disk and ``torch.export`` saves them, so the key must be the same in every
process that makes the function. Its function part is derived from a fingerprint of the
function's code, of the values it closes over and the globals it loads (arrays by shape
and dtype, small NumPy arrays by value too; objects by their attributes, ``__slots__``
included, to a depth), and of its ``jit`` options; functions alike in all of these
(closures over different arrays of one shape, say) are numbered in the order they are met,
a number freed by a function's death going to the next one met. The fingerprint names the
function cheaply; what it computes is read from its jaxpr, per shape, into the key of each
call (``_custom_op.py``: the semantics), which tells such functions apart across
processes. It is made when a graph first names the function, not when a wrapper is made:
an eager call never pays for it.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import itertools
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _private
from .._locks import renew_after_fork


class Function:
    """One JAX function as the bridge calls it: a live callable of it (a wrapper the user
    made: calling it shares JAX's own trace cache), whether it is jitted, and its plans.

    Calling a :class:`Function` calls the function.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> double = jax.jit(lambda x: x * 2)
        >>> function = function_for(double)
        >>> function is function_for(jax.jit(double.__wrapped__)), function.jitted
        (True, True)
        >>> function(jnp.ones(2))
        Array([2., 2.], dtype=float32)
    """

    def __init__(
        self, fn: Callable[..., Any], name: str, *, shared: bool, copies_inputs: bool = False
    ) -> None:
        self.name = name
        self.jitted = callable(getattr(fn, "lower", None))  # jax.jit's wrappers have .lower
        #: Whether a tensor argument JAX cannot alias is copied rather than refused: for
        #: the functions the bridge derives (backward, tangents, batches), whose tensors
        #: torch makes; never for the user's function.
        self.copies_inputs = copies_inputs
        #: The plans by call signature (``_autograd.py`` fills it).
        self.plans: dict[Any, Any] = {}
        self._strong: Callable[..., Any] | None = None if shared else fn
        self._weak: Any = weakref.ref(fn) if shared else None
        self._op_key: str | None = None
        #: What this process's wrappers of it are registered by (``_custom_op.register``):
        #: unique in the process, made at once, unlike :attr:`op_key`.
        self.token = f"{name}~{next(_tokens)}"
        #: Its key in the table of shared functions (``None`` for one of its own).
        self.table_key: tuple[int, Any] | None = None
        #: What it is found by (``_anchor``), held weakly; ``None`` for one of its own.
        self.anchor: Callable[[], Any] = _no_anchor
        #: What a plan traces (:meth:`traced`): for a jitted bound method, the method's
        #: function with its object (see :func:`function_for`); else a live wrapper.
        self._traced: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.live()(*args, **kwargs)

    def live(self) -> Callable[..., Any]:
        """A live wrapper of the function (any one: they are alike)."""
        if self._strong is not None:
            return self._strong
        fn: Callable[..., Any] | None = self._weak()
        if fn is None:
            raise RuntimeError(
                f"interop.jax_call: every wrapper of {self.name} was freed while it was "
                "being called; keep the jax_call wrapper alive while it runs."
            )
        return fn

    def traced(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function inside a trace of the bridge's own (a plan's forward)."""
        if self._traced is not None:
            return self._traced(*args, **kwargs)
        return self.live()(*args, **kwargs)

    def needs_wrapper(self) -> bool:
        """Whether a trace of it after the call needs a live wrapper (a graph keeps one)."""
        return self._traced is None

    def adopt(self, fn: Callable[..., Any]) -> None:
        """Call ``fn`` from now on if the wrapper called so far was freed."""
        if self._strong is None and self._weak() is None:
            self._weak = weakref.ref(fn)

    def is_live(self) -> bool:
        """Whether the wrapper this calls is alive."""
        return self._strong is not None or self._weak() is not None

    @property
    def op_key(self) -> str:
        """The name of this function in the custom op's graphs, the same in every process
        that makes the same function (see the module docstring)."""
        if self._op_key is None:
            fingerprint = _fingerprint(self)  # (unlocked: it may read much)
            with _lock:
                if self._op_key is None:  # (not another thread's meanwhile)
                    self._op_key = _number(self, fingerprint)
        return self._op_key


def _no_anchor() -> None:
    return None


_tokens = itertools.count()


_lock = threading.Lock()
renew_after_fork(sys.modules[__name__], "_lock")  # after a fork: free
#: Functions by (id of the anchor, options); an entry leaves when its anchor dies.
_table: dict[tuple[int, Any], Function] = {}
#: Per fingerprint, its functions by number (a dead one's number is free again).
_numbered: dict[str, dict[int, weakref.ReferenceType[Function]]] = {}


def _anchor(fn: Callable[..., Any]) -> tuple[Any, tuple[Any, ...]] | None:
    """What ``fn`` is: ``(anchor, options)``, the anchor held weakly; ``None`` where it
    cannot be known (a ``jit`` wrapper whose options are not readable, an object that
    cannot be referenced weakly): ``fn`` then has a :class:`Function` of its own."""
    options: tuple[Any, ...] = ()
    target: Any = fn
    if callable(getattr(fn, "lower", None)):
        jitted = _private.jit_options(fn)
        target = getattr(fn, "__wrapped__", None)
        if jitted is None or target is None:
            return None
        options = ("jit", jitted)
    if isinstance(target, types.MethodType):
        if options:  # jitted: found by the bound method itself, as JAX's trace cache
            return target, (*options, "method")  # finds it (see function_for)
        options = ("method", target.__func__)
        target = target.__self__
    try:
        weakref.ref(target)
    except TypeError:
        return None
    return target, options


def function_for(fn: Callable[..., Any]) -> Function:
    """The :class:`Function` of ``fn``: the same for every wrapper of one function.

    Args:
        fn: a JAX function, jitted or not.

    Returns:
        Its :class:`Function` (made on first use; ``fn`` becomes its live wrapper if the
        previous one was freed).
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    found = _anchor(fn)
    if found is None:
        return Function(fn, name, shared=False)
    anchor, options = found
    key = (id(anchor), options)
    function = _table.get(key)
    # An entry of a dead anchor whose address a new one took (its finalizer interrupted by
    # a Ctrl-C, or never registered): not this function's, whatever its id says.
    if function is None or function.anchor() is not anchor:
        with _lock:
            function = _table.get(key)
            if function is None or function.anchor() is not anchor:
                function = _table[key] = Function(fn, name, shared=True)
                function.table_key = key
                function.anchor = weakref.ref(anchor)
                weakref.finalize(anchor, _forget, key, function)
                if isinstance(anchor, types.MethodType):
                    function._traced = functools.partial(anchor.__func__, anchor.__self__)
    function.adopt(fn)
    return function


def _forget(key: tuple[int, Any], function: Function) -> None:
    with _lock:
        if _table.get(key) is function:  # (not a newer function's entry under that id)
            del _table[key]


def _number(function: Function, fingerprint: str) -> str:
    """``name@fingerprint#n``: n is the lowest number no live function of this fingerprint
    holds (see the module). A dead function's number serves the next one, never a live
    one's: two live functions sharing a key would run each other's code in compiled
    graphs. (A function a compiled graph calls stays alive with its entry, number
    included.) Called under the lock."""
    same = _numbered.setdefault(fingerprint, {})
    number = 0
    while number in same and same[number]() is not None:
        number += 1
    same[number] = weakref.ref(function)
    return f"{function.name}@{fingerprint}#{number}"


def _fingerprint(function: Function) -> str:
    fn = function.live()
    found = _anchor(fn)
    described = describe(fn if found is None else found)
    return hashlib.sha256(repr(described).encode()).hexdigest()[:16]


#: The attribute a ``jax_call`` wrapper names its JAX function by (a description reads it,
#: not the wrapper's closure, which holds what this process registered it as).
WRAPS = "__jax_call_wraps__"
#: How deep :func:`describe` looks into values (a function's globals' globals...).
DEPTH = 4
#: NumPy arrays of up to this many bytes are described by value too: a mask or an index
#: list closed over can decide a result's shape (larger ones, weights, by shape and dtype).
SMALL_ARRAY = 32 * 1024
_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def describe(value: Any, depth: int = DEPTH, seen: frozenset[int] = frozenset()) -> Any:
    """A description of ``value`` that is the same in every process making it alike: code
    by its bytecode and constants, arrays by shape and dtype, scalars by value, other
    objects by type (and their attributes, to a depth).

    Example:
        >>> import jax.numpy as jnp
        >>> describe(jnp.zeros((2, 3))) == describe(jnp.ones((2, 3)))
        True
        >>> describe(lambda x: x * 2) == describe(lambda x: x * 3)
        False
    """
    if isinstance(value, _SCALARS):
        return repr(value)
    if depth <= 0 or id(value) in seen:
        return ("...", _type_name(type(value)))
    try:
        return _describe(value, depth - 1, seen | {id(value)})
    except Exception:  # an attribute that raises when read: the type says enough
        return ("object", _type_name(type(value)))


def _describe(value: Any, deeper: int, seen: frozenset[int]) -> Any:
    if isinstance(value, types.FunctionType):
        return _describe_function(value, deeper, seen)
    if isinstance(value, types.CodeType):
        return _describe_code(value, deeper, seen)
    if isinstance(value, types.MethodType):
        return (
            "method",
            describe(value.__func__, deeper, seen),
            describe(value.__self__, deeper, seen),
        )
    if isinstance(value, functools.partial):
        keywords = tuple(sorted((k, describe(v, deeper, seen)) for k, v in value.keywords.items()))
        return (
            "partial",
            describe(value.func, deeper, seen),
            describe(value.args, deeper, seen),
            keywords,
        )
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if isinstance(value, type):
        return ("type", _type_name(value))
    if callable(getattr(value, "lower", None)) and hasattr(value, "__wrapped__"):
        options = _private.jit_options(value)
        return ("jit", describe(value.__wrapped__, deeper, seen), repr(options))
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None:
        if (  # a small array may decide shapes; objects' bytes are addresses
            type(value) is np.ndarray and value.nbytes <= SMALL_ARRAY and not value.dtype.hasobject
        ):
            digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
            return ("array", "numpy.ndarray", shape, str(dtype), digest)
        return ("array", _type_name(type(value)), shape, str(dtype))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(describe(v, deeper, seen) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(repr(describe(v, deeper, seen)) for v in value)))
    if isinstance(value, dict):
        return (  # a key's description, not its repr (an object's holds its address)
            "dict",
            tuple((describe(k, deeper, seen), describe(v, deeper, seen)) for k, v in value.items()),
        )
    attributes = getattr(value, "__dict__", None)
    slots = _slot_values(value)
    if isinstance(attributes, dict) or slots:
        described = describe(attributes, deeper, seen) if isinstance(attributes, dict) else None
        return ("object", _type_name(type(value)), described, describe(slots, deeper, seen))
    return ("object", _type_name(type(value)))


def _slot_values(value: Any) -> dict[str, Any]:
    """The attributes ``value`` keeps in ``__slots__`` (a slots dataclass's fields), by name."""
    found: dict[str, Any] = {}
    for cls in type(value).__mro__:
        names = cls.__dict__.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            if name not in found and name not in ("__dict__", "__weakref__"):
                attribute = getattr(value, name, _EMPTY)
                if attribute is not _EMPTY:
                    found[name] = attribute
    return found


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe_function(fn: types.FunctionType, depth: int, seen: frozenset[int]) -> Any:
    wrapped = getattr(fn, WRAPS, None)
    if wrapped is not None:  # a jax_call wrapper: its closure holds this process's token
        return ("jax_call", describe(wrapped, depth, seen))
    cells = tuple(_cell_contents(cell) for cell in fn.__closure__ or ())
    names = _global_names(fn.__code__)
    globals_read = tuple(
        (name, describe(fn.__globals__[name], depth, seen))
        for name in names
        if name in fn.__globals__
    )
    return (
        "function",
        fn.__module__,
        fn.__qualname__,
        _describe_code(fn.__code__, depth, seen),
        describe(fn.__defaults__, depth, seen),
        describe(fn.__kwdefaults__, depth, seen),
        tuple(describe(c, depth, seen) for c in cells),
        globals_read,
    )


_EMPTY = object()


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a name not yet bound)
        return _EMPTY


def _global_names(code: types.CodeType) -> tuple[str, ...]:
    """The globals ``code`` (and the code nested in it) loads, in order: not every name in
    ``co_names``, which holds attribute names too (``cfg.layer`` is no read of a global
    ``layer``: reading one, a jax_call wrapper say, put what it holds into the key)."""
    names = [
        instruction.argval
        for instruction in dis.get_instructions(code)
        if instruction.opname in _GLOBAL_LOADS
    ]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_global_names(const))
    return tuple(dict.fromkeys(names))


_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})


def _describe_code(code: types.CodeType, depth: int, seen: frozenset[int]) -> Any:
    consts = tuple(
        _describe_code(c, depth, seen)
        if isinstance(c, types.CodeType)
        else describe(c, depth, seen)
        for c in code.co_consts
    )
    signature = (code.co_argcount, code.co_kwonlyargcount, code.co_flags)
    return ("code", code.co_name, signature, code.co_code.hex(), consts, code.co_names)
