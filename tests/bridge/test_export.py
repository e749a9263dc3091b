"""``torch.export`` of code calling a ``jax_call``: saved, loaded, run in another process.

A saved program names its JAX function by the custom op's key alone; the process that loads
it runs the function of a live wrapper its key names. So the key tells apart closures of
one code over different values (a silent wrong answer: the loaded program ran the other
layer), the entry is made from the key where the loading process never traced the call, and
a program with no wrapper of its function is refused, naming what to do.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
    assert "no live jax_call wrapper" in message and "torch.export" in message
    assert "closing over the same values" in message


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


def test_closures_over_arrays_of_one_shape_are_told_apart_by_value():
    def make(w):
        return jax.jit(lambda x: x * w)

    ones, tens = jnp.ones(4), jnp.full(4, 10.0)
    fns = [make(w) for w in (ones, tens, np.ones(4))]  # (alive while their keys are made)
    keys = [_functions.function_for(f).op_key for f in fns]
    prints = [key.rpartition("#")[0] for key in keys]
    assert prints[0] != prints[1] != prints[2]
    assert _functions.describe(make(ones)) == _functions.describe(make(jnp.ones(4)))


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
    f = jax.jit(lambda x: x.astype(jnp.float16))
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
