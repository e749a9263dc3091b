"""``torch.export`` of code calling a ``jax_call``: saved, loaded, run in another process.

A saved program names its JAX function by the custom op's key alone; the process that loads
it runs the function of a live wrapper its key names. So the key tells apart closures of
one code over different values (a silent wrong answer: the loaded program ran the other
layer), the entry is made from the key where the loading process never traced the call, and
a program with no wrapper of its function is refused, naming what to do.
"""

from __future__ import annotations

import functools
import gc
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import interop
from interop._bridge import _custom_op, _functions

COMMON = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np, torch
    import interop

    def make_layer(w):
        return jax.jit(lambda x: x * w)  # one code; the weights decide the layer

    W_ENC = jnp.asarray(np.full((4,), 1.0, np.float32))
    W_DEC = jnp.asarray(np.full((4,), 10.0, np.float32))
    path, role = sys.argv[1], sys.argv[2]
    x = torch.arange(4.0)
    """
)

SAVE = COMMON + textwrap.dedent(
    """
    enc = interop.jax_call(make_layer(W_ENC))

    class Model(torch.nn.Module):
        def forward(self, x):
            return enc(x) + 1

    torch.export.save(torch.export.export(Model(), (x,)), path)
    print("REPORT", json.dumps((Model()(x)).tolist()))
    """
)

LOAD = COMMON + textwrap.dedent(
    """
    def warm(f):  # traced here under torch.compile: the key's entry exists
        torch.compile(lambda t: f(t), backend="eager", fullgraph=True)(x)

    if role == "other layer first":  # the other layer gets the lower number here
        dec = interop.jax_call(make_layer(W_DEC)); warm(dec)
        enc = interop.jax_call(make_layer(W_ENC)); warm(enc)
    elif role == "wrapped, never traced":
        enc = interop.jax_call(make_layer(W_ENC))
    elif role == "other weights only":
        dec = interop.jax_call(make_layer(W_DEC)); warm(dec)
    program = torch.export.load(path).module()
    try:
        print("REPORT", json.dumps(program(x).tolist()))
    except Exception as err:
        print("REPORT", json.dumps([type(err).__name__, str(err)]))
    """
)


def _run(script: str, *args: str, tmp_path: Path) -> object:
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(path), *args], env=env, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    folder = tmp_path_factory.mktemp("export")
    program = folder / "model.pt2"
    return program, _run(SAVE, str(program), "save", tmp_path=folder)


@pytest.mark.parametrize("role", ["other layer first", "wrapped, never traced"])
def test_a_loaded_program_runs_its_own_function_in_another_process(saved, role, tmp_path):
    """It ran the other layer (same code, other weights of the same shape) where that layer
    was met first; and a wrapper made but never run under torch.compile or torch.export
    raised a KeyError telling the user to make the wrapper they had made."""
    program, eager = saved
    assert eager == [1.0, 2.0, 3.0, 4.0]
    assert _run(LOAD, str(program), role, tmp_path=tmp_path) == eager


def test_a_loaded_program_without_its_function_is_refused_naming_the_fix(saved, tmp_path):
    program, _ = saved
    name, message = _run(LOAD, str(program), "other weights only", tmp_path=tmp_path)
    assert name == "LoadedGraphError"
    assert "computes what the graph's call" in message and "was traced with" in message
    assert "the same weights" in message


def test_a_program_saves_and_loads_in_one_process():
    """The probe that reads the results' dtypes ran under no_grad, a grad-mode node that
    torch.export.load refused (SpecViolationError) unless the program was decomposed."""
    double = interop.jax_call(jax.jit(lambda x: x * 2))

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return double(x) + 1

    x = torch.arange(4.0)
    buffer = io.BytesIO()
    torch.export.save(torch.export.export(Model(), (x,)), buffer)
    buffer.seek(0)
    torch.testing.assert_close(torch.export.load(buffer).module()(x), x * 2 + 1)


STRUCTURE = _custom_op._as_call(("tuple", (_custom_op.TENSOR,)))
SHAPES = (((4,), torch.float32),)


def _signature(fn: object) -> str:
    """The signature a graph traced with ``fn`` on a float32 vector of 4 holds: its
    results' dtypes and ranks, and its semantics."""
    entry = _custom_op.Entry(fn, STRUCTURE, jitted=True)  # type: ignore[arg-type]
    inputs = (SHAPES, (), ())
    _, leaves = _custom_op._abstract_results(entry, *inputs, fresh=True, semantics=True)
    results = _custom_op._digest(tuple((str(dtype), len(shape)) for shape, dtype in leaves))
    return f"{results}.{entry.semantics[inputs]}"


def test_closures_over_arrays_of_one_shape_compute_otherwise_by_their_values():
    def make(w):
        return jax.jit(lambda x: x * w)

    ones, tens = jnp.ones(4), jnp.full(4, 10.0)
    signatures = [_signature(make(w)) for w in (ones, tens, jnp.ones(4), np.ones(4, np.float32))]
    assert signatures[0] != signatures[1]
    assert signatures[0] == signatures[2] == signatures[3]


def test_an_eager_call_makes_no_fingerprint():
    """The fingerprint reads closed-over arrays by value: made only when a graph names the
    function, so eager callers never pay for it."""
    big = jnp.ones((256, 256))
    f = jax.jit(lambda x: x @ big)
    interop.jax_call(f)(torch.ones(2, 256))
    function = _functions.function_for(f)
    assert function._op_key is None
    assert function.op_key.startswith("<lambda>@")  # made when asked


def test_a_loaded_key_whose_function_returns_other_dtypes_is_refused():
    """A key made in another process names the results' dtypes and ranks its graph bakes
    in; a function that returns others here (a dtype read from a config) is refused at its
    first call, not read as the wrong dtype."""

    def to_half(x: jax.Array) -> jax.Array:  # (its name is its own: one candidate)
        return x.astype(jnp.float16)

    f = jax.jit(to_half)
    wrapper = interop.jax_call(f)
    function = _functions.function_for(f)
    structure = _custom_op._as_call(("tuple", (_custom_op.TENSOR,)))
    forward = _custom_op.forward_key(function.op_key, structure)
    elsewhere = _custom_op._digest((("torch.bfloat16", 1),))  # what the other process had
    with pytest.raises(interop.errors.LoadedGraphError, match="dtypes and ranks"):
        _custom_op.jax_call_op(f"{forward}|{elsewhere}", [torch.ones(3)], [], [])
    here = _custom_op._digest((("torch.float16", 1),))
    (out,) = _custom_op.jax_call_op(f"{forward}|{here}", [torch.ones(3)], [], [])
    assert out.dtype == torch.float16
    del wrapper


def test_a_function_named_with_the_keys_separators_is_found_from_a_loaded_key():
    """Keys are read from the right: a function's name may hold '/', '|' and a quote (the
    backward's mark), which read from the left split the key in the wrong place."""

    def f(x):
        return x * 3

    f.__name__ = f.__qualname__ = "we'ird/na|me"
    jitted = jax.jit(f)
    wrapper = interop.jax_call(jitted)
    function = _functions.function_for(jitted)
    structure = _custom_op._as_call(("tuple", (_custom_op.TENSOR,)))
    forward = _custom_op.forward_key(function.op_key, structure)
    signed = f"{forward}|{_custom_op._digest((('torch.float32', 1),))}"
    assert signed not in _custom_op._entries  # as in a process that loaded the graph
    (out,) = _custom_op.jax_call_op(signed, [torch.ones(2)], [], [])
    torch.testing.assert_close(out, torch.full((2,), 3.0))
    backward = _custom_op.backward_key(signed, (True,), (True,))
    (grad,) = _custom_op.jax_call_op(backward, [torch.ones(2), torch.ones(2)], [], [])
    torch.testing.assert_close(grad, torch.full((2,), 3.0))
    del wrapper


class _Layer:
    """A layer keeping its weights two objects deep, as Flax and Equinox models do."""

    def __init__(self, value: float) -> None:
        self.params = types.SimpleNamespace(dense={"kernel": [jnp.full(4, value)]})

    def __call__(self, x: jax.Array) -> jax.Array:
        return x * self.params.dense["kernel"][0]


@pytest.mark.parametrize(
    "make",
    [
        lambda v: jax.jit(_Layer(v)),  # a callable object
        lambda v: jax.jit(_Layer(v).__call__),  # a bound method
        lambda v: functools.partial(lambda w, x: x * w["a"]["b"], {"a": {"b": jnp.full(4, v)}}),
        lambda v: (lambda k: jax.jit(lambda x: x + jax.random.normal(k, (4,))))(
            jax.random.key(int(v))
        ),
        lambda v: (lambda t: jax.jit(lambda x: x * t.sum().item()))(torch.full((4,), v)),
    ],
    ids=["object", "method", "partial of nested dicts", "typed key", "torch tensor read"],
)
def test_a_loaded_key_runs_the_function_it_was_traced_with_wherever_it_keeps_its_values(make):
    """A graph traced elsewhere names its function by a fingerprint that reads values by
    shape, to a depth: the loading process runs the live function whose jaxpr on the
    call's inputs (closed-over values included) is the traced one, whichever it met
    first, and refuses where none is."""
    saved = make(1.0)
    key = _custom_op.forward_key(_functions.function_for(saved).op_key, STRUCTURE)
    key = f"{key}|{_signature(saved)}"
    other, mine = make(10.0), make(1.0)
    wrappers = [interop.jax_call(f) for f in (other, mine)]  # the other layer met first
    x = torch.arange(4.0)
    (out,) = _custom_op.jax_call_op(key, [x], [], [])
    torch.testing.assert_close(out, interop.jax_call(mine)(x))
    del wrappers[1], mine
    _custom_op._entries.pop(key)  # a process that has the other layer alone
    with pytest.raises(interop.errors.LoadedGraphError, match="computes what the graph"):
        _custom_op.jax_call_op(key, [x], [], [])
    del saved


def _loaded_key(fn: object) -> str:
    """The key a graph traced in another process would hold for a one-tensor call of ``fn``."""
    structure = _custom_op._as_call(("tuple", (_custom_op.TENSOR,)))
    return _custom_op.forward_key(_functions.function_for(fn).op_key, structure)


def test_a_loaded_key_of_other_settings_says_so_before_looking_for_the_function():
    f = jax.jit(lambda x: x + 1)
    key = _loaded_key(f)
    elsewhere = key[: key.rindex("/") + 1] + "0" * 12  # its digest under other settings
    with pytest.raises(interop.errors.LoadedGraphError, match="other JAX settings"):
        _custom_op._entry(elsewhere)


def test_a_constant_that_does_not_read_back_is_refused_when_loaded():
    f = jax.jit(lambda x, c: x)
    wrapper = interop.jax_call(f)
    function = _functions.function_for(f)
    odd = _custom_op._as_call(("tuple", (_custom_op.TENSOR, ("C", complex("nan")))))
    key = _custom_op.forward_key(function.op_key, odd)
    assert key.split("/")[-2] == "-"
    with pytest.raises(interop.errors.LoadedGraphError, match="does not read back"):
        _custom_op._entry(key)
    del wrapper


def test_wrappers_of_short_lived_functions_leave_no_registration_behind():
    """Each function registers its wrappers under a token of its own; a fresh lambda per
    step left one entry per step in the table (20,000 steps: 20,001 entries)."""
    for _ in range(2000):
        interop.jax_call(lambda x: x + 1)
    assert len(_custom_op._callers) < 300


KEYED = textwrap.dedent(
    """
    import types
    import jax, jax.numpy as jnp
    import interop
    from interop._bridge import _functions

    cfg = types.SimpleNamespace(layer=types.SimpleNamespace(scale=2.0))

    @jax.jit
    def head(x):
        return x * cfg.layer.scale  # reads cfg; 'layer' is an attribute, not the global

    layer = interop.jax_call(head)  # a global of that name: this process's registration
    print("REPORT", _functions.function_for(head).op_key)
    """
)


def test_a_function_keys_alike_in_every_process_whatever_globals_share_its_attribute_names(
    tmp_path,
):
    """Every name in co_names was read as a global: an attribute 'layer' made the global
    jax_call wrapper 'layer' part of the fingerprint, with this process's registration in
    it, so no two processes agreed on the key (a warm cache never hit)."""
    path = tmp_path / "keyed.py"
    path.write_text(KEYED)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    keys = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=300
        )
        (line,) = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
        keys.append(line.split()[1:])
    assert keys[0] == keys[1], keys


def test_a_loaded_key_naming_no_semantics_runs_no_function_it_cannot_tell_apart():
    """A key whose probe's trace was not read names no semantics: with two live wrappers
    of its name that compute otherwise, the first met ran, whichever it was."""

    def scaled_by(w: jax.Array) -> Any:
        def tell_apart_layer(x: jax.Array) -> jax.Array:
            return x * w

        return jax.jit(tell_apart_layer)

    one, ten = scaled_by(jnp.ones(4)), scaled_by(jnp.full(4, 10.0))
    wrappers = [interop.jax_call(f) for f in (one, ten)]
    forward = _custom_op.forward_key(_functions.function_for(one).op_key, STRUCTURE)
    key = f"{forward}|{_custom_op._digest((('torch.float32', 1),))}.-"
    with pytest.raises(interop.errors.LoadedGraphError, match="several compute otherwise"):
        _custom_op.jax_call_op(key, [torch.ones(4)], [], [])
    del wrappers[1], ten
    gc.collect()
    (out,) = _custom_op.jax_call_op(key, [torch.ones(4)], [], [])  # one left: it runs
    torch.testing.assert_close(out, torch.ones(4))


def _reversal(strength: float) -> Any:
    """A gradient-reversal layer: the identity forward, ``-strength`` times the gradient."""
    lam = jnp.float32(strength)

    @jax.custom_vjp
    def reverse_gradient(x: jax.Array) -> jax.Array:
        return x

    reverse_gradient.defvjp(lambda x: (x, None), lambda _, g: (-lam * g,))
    return jax.jit(lambda x: reverse_gradient(x) * 2.0)


def test_a_loaded_key_runs_the_gradient_rules_it_was_traced_with():
    """Two gradient-reversal layers have one forward jaxpr (the rule is named, not
    printed): the loading process ran the first it met, and its backward gave -0.2 where
    the traced layer's gives -2."""
    saved = _reversal(1.0)
    signed = f"{_custom_op.forward_key(_functions.function_for(saved).op_key, STRUCTURE)}"
    signed += f"|{_signature(saved)}"
    other, mine = _reversal(0.1), _reversal(1.0)
    wrappers = [interop.jax_call(f) for f in (other, mine)]
    x = torch.arange(4.0)
    _custom_op.jax_call_op(signed, [x], [], [])  # the forward chooses
    backward = _custom_op.backward_key(signed, (True,), (True,))
    (grad,) = _custom_op.jax_call_op(backward, [x, torch.ones(4)], [], [])
    torch.testing.assert_close(grad, torch.full((4,), -2.0))
    del wrappers, saved


def test_a_loaded_probe_runs_before_any_choice_and_takes_the_arguments_it_is_given():
    """An exported graph keeps the probe node, which runs before the op chooses: it traced
    the first wrapper of the name met, one of two arguments here (TypeError)."""

    def pair() -> Any:
        def probe_layer(a: jax.Array, b: jax.Array) -> jax.Array:
            return a - b

        return jax.jit(probe_layer)

    def single() -> Any:
        def probe_layer(x: jax.Array) -> jax.Array:
            return x * 2

        return jax.jit(probe_layer)

    wrappers = [interop.jax_call(f()) for f in (pair, single)]  # the pair met first
    key = _custom_op.forward_key(f"probe_layer@{'0' * 16}#0", STRUCTURE)  # traced elsewhere
    (empty,) = _custom_op.jax_call_probe(key, [torch.ones(4)], [], [])
    assert empty.shape == (4,) and empty.dtype == torch.float32
    del wrappers


def test_one_thread_chooses_a_loaded_functions_while_the_others_wait():
    """Thread A was trying the right candidate when thread B made its first call: B ran the
    candidate A was trying, or A ran the one B had set (times ten, silently)."""
    tracing = threading.Event()

    def make(scale: float, flag: threading.Event | None = None) -> Any:
        s = jnp.float32(scale)

        def slow_layer(x: jax.Array) -> jax.Array:
            if flag is not None and threading.current_thread().name == "A":
                flag.set()
            time.sleep(0.2)  # Python work while tracing
            return x * s

        return slow_layer

    saved = make(1.0)
    key = f"{_custom_op.forward_key(_functions.function_for(saved).op_key, STRUCTURE)}"
    key += f"|{_signature(saved)}"
    wrappers = [interop.jax_call(make(10.0)), interop.jax_call(make(1.0, tracing))]
    x = torch.arange(4.0)
    out: dict[str, list[float]] = {}

    def run(name: str) -> None:
        if name == "B":
            tracing.wait(timeout=30)
            time.sleep(0.05)
        out[name] = _custom_op.jax_call_op(key, [x], [], [])[0].tolist()

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in "AB"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert out == {"A": x.tolist(), "B": x.tolist()}
    del wrappers


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_loaded_program_compiled_before_its_first_call_runs_its_own_function(backend):
    """torch.compile of a loaded program traced the op's fake implementation (and so the
    backward) with the first live wrapper of the name: the forward ran the right one, the
    gradients were the other layer's (aot_eager: off by 4.3), or inductor's size check
    raised on another result shape."""

    def scaled(w: jax.Array) -> Any:
        def compiled_layer(x: jax.Array) -> jax.Array:
            return x * w

        return jax.jit(compiled_layer)

    saved = scaled(jnp.full(4, 3.0))
    key = f"{_custom_op.forward_key(_functions.function_for(saved).op_key, STRUCTURE)}"
    key += f"|{_signature(saved)}"
    other = interop.jax_call(jax.jit(lambda x: x.sum(0)))  # another shape, met first
    wrappers = [
        interop.jax_call(scaled(jnp.full(4, 10.0))),
        interop.jax_call(scaled(jnp.full(4, 3.0))),
    ]
    torch._dynamo.reset()
    step = torch.compile(
        lambda x: _custom_op.jax_call_op(key, [x], [], [])[0].sum(), backend=backend
    )
    x = torch.arange(4.0, requires_grad=True)
    step(x).backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0))
    del other, wrappers, saved
