"""JAX -> torch lifetime: whatever happens to the JAX array, the torch tensor keeps its bytes
and the process lives (issue 10, item 1).

jaxlib's DLPack export holds a reference on the buffer but not its owner, so deleting the
exported array aborted the process (``Check failed: holds_[i] == 0``). Each scenario runs in
a subprocess, through both handoff paths, and reuses the freed memory before checking the
tensor's bytes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

PRELUDE = """
import gc, sys, warnings
import jax, jax.numpy as jnp, numpy as np, torch
import interop
from interop._bridge import _dlpack

N = 1 << 16

def churn():
    # allocate (and keep) what would reuse the freed memory
    return [jnp.full((N,), 7, jnp.int32) + i for i in range(24)]

def expected():
    return torch.arange(N, dtype=torch.int32) * 3

def handed(private):
    with _dlpack.forced_path(private):
        array = jnp.arange(N, dtype=jnp.int32) * 3
        return array, interop.to_torch(array)
"""

SCENARIOS = {
    "delete": """
        for private in (True, False):
            array, tensor = handed(private)
            array.delete()
            kept = churn()
            assert torch.equal(tensor, expected()), private
            del tensor, kept
        print("ok")
    """,
    "donate": """
        double = jax.jit(lambda x: x * 2, donate_argnums=0)
        for private in (True, False):
            array, tensor = handed(private)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # JAX may say the donation was not usable
                result = double(array)  # torch still uses the buffer: JAX must not reuse it
            kept = churn()
            assert torch.equal(tensor, expected()), private
            assert torch.equal(interop.to_torch(result), expected() * 2), private
            del tensor, kept
            array, tensor = handed(private)
            del tensor  # once the tensor is gone, the array can be donated again
            double(array)
            assert array.is_deleted(), "the handoff kept a hold after the tensor died"
        print("ok")
    """,
    "collect": """
        for private in (True, False):
            array, tensor = handed(private)
            del array
            gc.collect()
            kept = churn()
            assert torch.equal(tensor, expected()), private
            del tensor, kept
        print("ok")
    """,
    "sweep-live-arrays": """
        for private in (True, False):
            array, tensor = handed(private)
            view = tensor[1:]  # a view outliving the tensor it was made from
            del tensor
            for live in jax.live_arrays():
                live.delete()
            gc.collect()
            kept = churn()
            assert torch.equal(view, expected()[1:]), private
            del view, kept
        print("ok")
    """,
    "sweep-after-jax-call-with-jax-allocator": """
        triple = interop.jax_call(jax.jit(lambda v: v * 3))
        for private in (True, False):
            with _dlpack.forced_path(private):
                ws = interop.WorkspaceManager("cpu", allocator="jax")
                (x,) = ws.get_simultaneous(((N,), torch.float32))
                x.fill_(2.0)
                y = triple(x)
                for live in jax.live_arrays():
                    live.delete()
                gc.collect()
                kept = churn()
                assert x.eq(2.0).all() and y.eq(6.0).all(), private
                (again,) = ws.get_simultaneous(((N,), torch.float32))  # the same buffer
                assert again.data_ptr() == x.data_ptr() and again.eq(2.0).all()
                assert triple(again.fill_(5.0)).eq(15.0).all()
                (grown,) = ws.get_simultaneous(((4 * N,), torch.float32))  # a growth
                assert triple(grown.fill_(1.0)).eq(3.0).all()
                del ws, x, y, again, grown, kept
        print("ok")
    """,
    "deleted-array": """
        for private in (True, False):
            array = jnp.arange(4.0) + 1
            array.delete()
            with _dlpack.forced_path(private):
                try:
                    interop.to_torch(array)
                except interop.errors.DeletedArrayError as err:
                    assert isinstance(err, RuntimeError) and isinstance(err, BufferError)
                    assert "deleted" in str(err) and "float32" in str(err)
                else:
                    raise AssertionError("a deleted array was handed over")
        print("ok")
    """,
}


#: Scenarios sharing one subprocess (an import of torch and JAX costs seconds here).
GROUPS = {
    "delete-collect-deleted": ("delete", "collect", "deleted-array"),
    "donate": ("donate",),
    "sweep": ("sweep-live-arrays", "sweep-after-jax-call-with-jax-allocator"),
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_the_tensor_outlives_whatever_happens_to_the_array(group):
    scenarios = GROUPS[group]
    code = PRELUDE + "".join(
        f"\nprint({name!r}, end=': ')\n" + textwrap.dedent(SCENARIOS[name]) for name in scenarios
    )
    env = {"JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{TESTS.parents[1]}"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    expected = "".join(f"{name}: ok\n" for name in scenarios)
    assert out.returncode == 0 and out.stdout == expected, (
        out.returncode,
        out.stdout[-500:],
        out.stderr[-3000:],
    )


def test_the_groups_cover_every_scenario():
    assert sorted(name for group in GROUPS.values() for name in group) == sorted(SCENARIOS)
