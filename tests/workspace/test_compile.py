"""``torch.compile`` around code that asks for scratch (issue 10, item 13).

Default mode: the compiled function gives the eager results, the workspace grows as in
eager mode, Dynamo compiles no frame of this package, and nothing is printed (no ``Exception
ignored in StorageWeakRef.__del__``, no retired-buffer warning). ``fullgraph=True``: Dynamo's
``Unsupported`` error, carrying :data:`interop._compile.ADVICE`. The manager runs in a child
process (compiled with the default backend, as users do) so that its whole stderr is seen.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from interop._compile import ADVICE, run_eagerly_under_compile

_SCRIPT = r"""
import json, os, sys
import torch

try:  # the platform's compiler toolchain (inductor needs a C++ compiler on CPU)
    torch.compile(lambda x: x + 1)(torch.ones(2))
except Exception as err:
    print(json.dumps({"skip": f"{type(err).__name__}: {err}"[:500]}))
    sys.exit(0)

import torch._dynamo
from torch._dynamo.convert_frame import input_codes
from interop import WorkspaceManager

ours = tuple(os.path.dirname(m.__file__) for m in map(__import__, ("interop", "functional_ws")))
traced = set()  # frames of this package Dynamo tried to compile

def note_traced():  # before each reset, which forgets them
    for code in (ref() for ref in input_codes.seen):
        if code is not None and code.co_filename.startswith(ours):
            traced.add(f"{os.path.basename(code.co_filename)}:{code.co_name}")

def step(ws, x):
    intact = ws.get_retained("kv", (4,), torch.float32)[1]  # the view may overlap b: dropped
    a, b = ws.get_simultaneous(((x.shape[0],), torch.float32), ((2, x.shape[0]), torch.int8))
    a.copy_(x * 2)
    b.fill_(1)
    return a.sum() + b.sum(), intact

def run(sizes, compiled, compiled_ws, eager_ws):
    rows = []
    for n in sizes:
        x = torch.arange(n, dtype=torch.float32)
        got, got_intact = compiled(compiled_ws, x)
        want, want_intact = step(eager_ws, x)
        rows.append({
            "n": n,
            "results": [float(got), float(want)],
            "intact": [got_intact, want_intact],
            "capacity": [compiled_ws.state.slots[0].capacity, eager_ws.state.slots[0].capacity],
        })
    return rows

compiled_ws, eager_ws = WorkspaceManager("cpu"), WorkspaceManager("cpu")
rows = run([16, 64, 16, 1024], torch.compile(step), compiled_ws, eager_ws)
note_traced()
torch._dynamo.reset()  # else the default mode's compiled code serves the call
try:
    torch.compile(step, fullgraph=True)(compiled_ws, torch.ones(8))
    fullgraph = None
except Exception as err:
    fullgraph = {
        "type": f"{type(err).__module__}.{type(err).__qualname__}",
        "runtime_error": isinstance(err, RuntimeError),
        "message": str(err),
    }
note_traced()
torch._dynamo.reset()  # the marks outlive a reset
rows += run([4096], torch.compile(step), compiled_ws, eager_ws)
growths = [compiled_ws.stats().slots[0].growths, eager_ws.stats().slots[0].growths]
note_traced()
sys.stdout.flush()
result = {"rows": rows, "fullgraph": fullgraph, "growths": growths, "traced": sorted(traced)}
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def compiled_run() -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("TORCH_LOGS", None)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"torch.compile is unavailable here: {result['skip']}")
    result["stderr"] = done.stderr
    return result


def test_compiled_requests_give_the_eager_results(compiled_run):
    for row in compiled_run["rows"]:
        got, want = row["results"]
        assert got == want, row
        assert row["intact"][0] == row["intact"][1], row


def test_compiled_requests_grow_as_eager_ones(compiled_run):
    assert all(row["capacity"][0] == row["capacity"][1] for row in compiled_run["rows"])
    got, want = compiled_run["growths"]
    assert got == want >= 3


#: torch's own notice, not this package's: a CUDA build of torch with nvcc on PATH but no GPU
#: logs it once when inductor imports torch.utils.cpp_extension.
_TORCH_ENVIRONMENT_NOTICE = re.compile(
    r"^W\d{4} [\d:.]+ +\d+ torch/utils/cpp_extension\.py:\d+\] (\[[^]]*\] )?"
    r"No CUDA runtime is found, using CUDA_HOME=.*$"
)


def test_compiled_requests_print_nothing(compiled_run):
    lines = compiled_run["stderr"].splitlines()
    assert [line for line in lines if not _TORCH_ENVIRONMENT_NOTICE.match(line)] == []


def test_dynamo_compiles_no_frame_of_this_package(compiled_run):
    assert compiled_run["traced"] == []


def test_fullgraph_raises_the_documented_error(compiled_run):
    error = compiled_run["fullgraph"]
    assert error is not None
    assert error["type"] == "torch._dynamo.exc.Unsupported"
    assert error["runtime_error"]
    assert ADVICE in error["message"]


# ----- the mark itself, on a class of its own (Dynamo only, no inductor: quick) -----

_STEP: contextvars.ContextVar[int] = contextvars.ContextVar("step", default=0)


class _Counter:
    """Does what Dynamo cannot trace (a context variable) and has side effects to count."""

    def __init__(self) -> None:
        self.calls = 0

    def next(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return _plus(x + _STEP.get(), self.calls)


def _plus(y: torch.Tensor, n: int) -> torch.Tensor:
    """Called by the marked method, not marked itself: Dynamo would compile it alone."""
    return y + n


@pytest.fixture
def counter_class():
    yield run_eagerly_under_compile(_Counter)  # marking again changes nothing
    torch._dynamo.reset()


def _calls_into(counter):
    def f(x):
        return counter.next(x * 2) * 3

    return f


def test_a_marked_method_runs_eagerly_under_compile(counter_class):
    from torch._dynamo.convert_frame import input_codes

    counter = counter_class()
    compiled = torch.compile(_calls_into(counter), backend="eager")
    for n in (1, 2, 3):
        assert torch.equal(compiled(torch.full((n,), 1.0)), torch.full((n,), 3.0 * (2 + n)))
    assert counter.calls == 3
    codes = {ref() for ref in input_codes.seen}
    assert counter_class.next.__code__ not in codes
    assert _plus.__code__ not in codes  # called by the marked method: not compiled either


def test_a_marked_method_under_fullgraph_raises_with_the_advice(counter_class):
    counter = counter_class()
    compiled = torch.compile(_calls_into(counter), backend="eager", fullgraph=True)
    with pytest.raises(RuntimeError, match=r"outside torch\.compile graphs") as caught:
        compiled(torch.ones(2))
    assert type(caught.value).__name__ == "Unsupported"
    assert ADVICE in str(caught.value)
    assert counter.calls == 0


def test_marking_leaves_eager_calls_alone(counter_class):
    counter = counter_class()
    assert torch.equal(counter.next(torch.zeros(1)), torch.ones(1))
    assert counter.calls == 1
    assert counter_class.next._torchdynamo_disable
    assert counter_class.__init__._torchdynamo_disable


def test_only_this_package_s_bases_are_marked():
    class Derived(argparse.Namespace):
        def twice(self, key):
            return [getattr(self, key)] * 2

    run_eagerly_under_compile(Derived)
    assert Derived.twice._torchdynamo_disable
    assert not hasattr(argparse.Namespace.__init__, "_torchdynamo_disable")


# A step whose retained span overlaps its scratch in a 512-byte slot (the documented limit:
# views that share bytes in one compiled region), and not once the slot is reserved large.
_OVERLAP_STEP = r"""
import json, sys
import torch
from interop import WorkspaceManager

ws = WorkspaceManager("cpu")
if int(sys.argv[1]):
    ws.reserve(((int(sys.argv[1]),), torch.float32))


def step(x):
    a, b = ws.get_simultaneous(((x.shape[0],), torch.float32), ((x.shape[0],), torch.float32))
    a.copy_(x * 2)
    b.copy_(x + 1)
    r, _ = ws.get_retained("acc", (x.shape[0],), torch.float32)
    r.zero_()
    r.add_(a * b)
    return r.clone()


x = torch.arange(8, dtype=torch.float32)
compiled = torch.compile(step)(x).sum().item()
print("REPORT", json.dumps({"compiled": compiled, "eager": step(x).sum().item()}))
"""


def test_the_documented_cache_setting_keeps_a_run_after_an_overlapping_one_exact(tmp_path):
    """README ("torch.compile ... one limit, torch's"): on torch 2.13 AOTAutograd's disk
    cache keys a graph without which inputs share bytes, so a process whose views do not
    overlap, run after one whose views did, got the other's graph (measured: an
    ``AssertionError`` from the graph's input check, or 0.0 for 336.0 silently). With
    ``TORCHINDUCTOR_AUTOGRAD_CACHE=0``, the setting the README gives, it is exact."""
    script = tmp_path / "step.py"
    script.write_text(_OVERLAP_STEP)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "cache")
    reports = []
    for reserve in ("0", "1024"):  # the overlapping run fills the cache first
        done = subprocess.run(
            [sys.executable, str(script), reserve],
            env=env, capture_output=True, text=True, timeout=540,
        )  # fmt: skip
        lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
        assert done.returncode == 0 and lines, done.stderr[-3000:]
        reports.append(json.loads(lines[-1].removeprefix("REPORT ")))
    overlapping, apart = reports
    assert overlapping == {"compiled": 0.0, "eager": 0.0}  # the span over b zeroed it
    assert apart == {"compiled": 336.0, "eager": 336.0}
