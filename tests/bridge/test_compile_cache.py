"""A warm ``torch.compile`` cache gives the gradients a cold one gives.

torch caches AOTAutograd's and inductor's results on disk, so a second process running the
same compiled training step skips tracing the backward. The custom op's keys are in those
cached graphs: they must mean the same function and the same grad mask in every process.
Three fresh processes share one cache directory: a cold run, a warm run, and a warm run
that makes its wrappers in the other order and compiles the step for two grad masks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

STEP = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, torch
    from torch._dynamo.utils import counters
    import interop

    def make_wide():
        return interop.jax_call(jax.jit(lambda w, x: jnp.tanh(x @ w)))

    def make_narrow():
        return interop.jax_call(jax.jit(lambda w, x, n: {"s": jnp.sin(x @ w).sum(1) * n}))

    order = sys.argv[1]
    masks = sys.argv[2:]
    if order == "swapped":
        narrow, wide = make_narrow(), make_wide()
    else:
        wide, narrow = make_wide(), make_narrow()

    def step(w, x):
        return (wide(w, x) ** 2).sum() + narrow(w, x, 3)["s"].sum()

    compiled = torch.compile(step, backend="inductor")
    generator = torch.Generator().manual_seed(0)
    w0, x0 = torch.randn(4, 3, generator=generator), torch.randn(5, 4, generator=generator)
    report = {}
    for mask in masks:
        got = [w0.clone().requires_grad_(mask[0] == "1"), x0.clone().requires_grad_(mask[1] == "1")]
        want = [t.detach().clone().requires_grad_(t.requires_grad) for t in got]
        compiled(*got).backward()
        step(*want).backward()
        report[mask] = [
            None if g.grad is None else float((g.grad - r.grad).abs().max())
            for g, r in zip(got, want)
        ]
    report["hits"] = counters["aot_autograd"]["autograd_cache_hit"]
    print("REPORT", json.dumps(report))
    """
)


def _run(script: Path, cache: Path, *args: str) -> dict[str, object]:
    env = dict(os.environ)
    env.update(
        JAX_PLATFORMS="cpu",
        TORCHINDUCTOR_CACHE_DIR=str(cache),
        TORCHINDUCTOR_FX_GRAPH_CACHE="1",
        TORCHINDUCTOR_AUTOGRAD_CACHE="1",
        TRITON_CACHE_DIR=str(cache / "triton"),
    )
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))  # type: ignore[no-any-return]


def test_a_warm_cache_gives_the_cold_gradients(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(STEP)
    cache = tmp_path / "cache"
    cold = _run(script, cache, "usual", "11")
    warm = _run(script, cache, "usual", "11")
    masks = _run(script, cache, "swapped", "01", "11")
    assert cold["hits"] == 0 and warm["hits"] >= 1 and masks["hits"] >= 1  # the cache served
    for report in (cold, warm, masks):
        for mask, errors in report.items():
            if mask != "hits":
                assert all(e is None or e < 1e-5 for e in errors), (mask, report)
    assert masks["01"][0] is None and masks["01"][1] is not None


CONFIGURED = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, torch
    from torch._dynamo.utils import counters
    import interop

    # Read from the command line where the function runs: the fingerprint sees the module
    # sys, not what it holds, so two runs make functions alike in every way it reads but
    # the dtype of their result (a config object's value it would read).
    @jax.jit
    def head(w, x):
        return jnp.tanh(x @ w).astype(sys.argv[1])

    layer = interop.jax_call(head)

    def step(w, x):
        return (layer(w, x).float() ** 2).sum()

    compiled = torch.compile(step, backend="inductor")
    generator = torch.Generator().manual_seed(0)
    w0, x0 = torch.randn(8, 8, generator=generator), torch.randn(4, 8, generator=generator)
    got, want = w0.clone().requires_grad_(), w0.clone().requires_grad_()
    loss = compiled(got, x0)
    loss.backward()
    expected = step(want, x0)
    expected.backward()
    report = {
        "loss": abs(float(loss) - float(expected)),
        "grad": float((got.grad - want.grad).abs().max()),
        "hits": counters["aot_autograd"]["autograd_cache_hit"],
    }
    print("REPORT", json.dumps(report))
    """
)


def _served_anew_then_warm(script_text: str, tmp_path: Path, first: str, then: str) -> None:
    """Three fresh processes on one cache: ``first``, ``then`` (a graph of its own, never
    the first one's) and ``then`` again (served warm); each computes what eager does."""
    script = tmp_path / "step.py"
    script.write_text(script_text)
    cache = tmp_path / "cache"
    reports = [_run(script, cache, arg) for arg in (first, then, then)]
    assert reports[0]["hits"] == reports[1]["hits"] == 0 and reports[2]["hits"] >= 1
    for report in reports:
        assert report["loss"] < 1e-3 and report["grad"] < 1e-2, report


def test_a_warm_cache_never_serves_a_graph_built_for_other_result_dtypes(tmp_path):
    # The dtype came from what the function's fingerprint does not read: the second
    # run hit the first run's graph, which read bfloat16 results as float16 (loss 72.5
    # against 13.2, gradients off by 186; a module edited between runs corrupted the heap).
    _served_anew_then_warm(CONFIGURED, tmp_path, "float16", "bfloat16")


SIZED = CONFIGURED.replace(
    "return jnp.tanh(x @ w).astype(sys.argv[1])", "return jnp.tanh(x @ w)[:, : int(sys.argv[1])]"
)


def test_a_warm_cache_never_serves_a_graph_built_for_other_result_shapes(tmp_path):
    """A function whose results' shapes alone changed between runs (a size read from what
    its fingerprint does not read) was served the first run's graph: inductor's own size
    check raised (an AssertionError until the cache was cleared). The key names what the
    function computes on the traced inputs (its jaxpr), shapes included."""
    assert SIZED != CONFIGURED
    _served_anew_then_warm(SIZED, tmp_path, "8", "4")
