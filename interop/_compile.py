"""``torch.compile`` and the manager: its methods always run as plain Python, outside graphs.

What Dynamo did when it met ``ws.get_simultaneous(...)`` in a compiled function (torch
2.13, CPU, at 7660c5d): it traced into the method, broke the graph at the context-variable
read (as it does in the original) and then compiled the rest of the method and every
function it calls as frames of their own: the memo lookup with symbolic sizes (a
dynamic-shape recompile got the 16-element view of an earlier call for a 64-element
request), the core's planning, one compiled frame per allocation size (recompiled until the
cache limit), and the growth path down to ``StorageWeakRef``, whose construction Dynamo's
polyfill started with ``__new__`` and abandoned at a graph break (``Exception ignored in
StorageWeakRef.__del__``), while the tracer's own references to the old buffer made the
retired-buffer report warn.

So every function of the manager's classes is marked the way ``torch.compiler.disable``
marks one, without its wrapper: Dynamo graph-breaks at the call, with :data:`ADVICE` as the
reason, and runs the method and everything it calls eagerly (the code object's frame
strategy: skip, recursively). Eager calls cost nothing more; ``torch.compiler.disable``'s
wrapper would add a call to every method call, and import ``torch._dynamo`` (over a second)
when this package is imported.

With ``fullgraph=True`` the call is an error, as it is for the original: Dynamo raises
``torch._dynamo.exc.Unsupported`` (a ``RuntimeError``) whose message carries
:data:`ADVICE`. Torch releases without frame strategies (before 2.6) still get the graph
break and its reason, but Dynamo may then compile the method's inner frames.
"""

from __future__ import annotations

import types
from typing import TypeVar

from ._private import dynamo_runs_eagerly

#: Why a compiled function cannot trace the manager, and what to do instead.
ADVICE = (
    "functional-ws: WorkspaceManager methods run eagerly, outside torch.compile graphs "
    "(the graph breaks at the call; vLLM's original breaks there too). With "
    "fullgraph=True, ask for the views before the compiled function and pass them in, "
    "or put the code that asks for scratch in a custom op (torch.library.custom_op), "
    "as vLLM's docstring says."
)

_C = TypeVar("_C", bound=type)


def run_eagerly_under_compile(cls: _C) -> _C:
    """Mark every function ``cls`` and its bases from this package define to run eagerly.

    Args:
        cls: a class; functions of bases from other packages (``object``) are left alone.

    Returns:
        ``cls``, its functions marked in place (the bases' too: they are shared).

    Example:
        >>> class Scratch:
        ...     def get(self) -> int:
        ...         return 1
        >>> run_eagerly_under_compile(Scratch) is Scratch, Scratch.get._torchdynamo_disable
        (True, True)
    """
    package = __name__.split(".")[0]
    for klass in cls.__mro__:
        for attribute in vars(klass).values():
            function = getattr(attribute, "__func__", attribute)  # static and class methods
            if isinstance(function, types.FunctionType) and (
                klass is cls or function.__module__.split(".")[0] == package
            ):
                run_eagerly(function)
    return cls


def run_eagerly(function: types.FunctionType, advice: str = ADVICE) -> None:
    """Make Dynamo graph-break at calls of ``function`` and run it, and all it calls, eagerly.

    Args:
        function: a plain Python function (a method's ``__func__``).
        advice: the graph break's reason, which ``fullgraph=True``'s error carries: why
            the call cannot be traced and what to do instead.

    Example:
        >>> def scratch() -> int:
        ...     return 1
        >>> run_eagerly(scratch, "why, and what to do")
        >>> scratch._torchdynamo_disable_msg
        'why, and what to do'
    """
    dynamo_runs_eagerly(function, advice)  # the marks and frame strategy: _private.py
