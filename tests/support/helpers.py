"""Test helpers written once: managers prepared for a test (one builder per meaning), the
benchmark scripts as modules, and the kit imported without Hypothesis.

Each builder's name says what the manager is ready for; the many ``_warm`` helpers they
replace meant four different things.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import torch
from conftest import TEST_DEVICE

from interop import WorkspaceManager
from support.allocators import workspace

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
U8, F32 = torch.uint8, torch.float32


def manager(**kwargs: Any) -> WorkspaceManager:
    """A manager on the test device (``FUNCTIONAL_WS_TEST_DEVICE``) with the current test's
    allocator (:func:`_allocators.workspace`; ``kwargs`` go to the constructor)."""
    return workspace(TEST_DEVICE, **kwargs)


def memoised_manager() -> WorkspaceManager:
    """A CPU manager whose ``get_simultaneous`` and ``get_retained`` requests (one
    ``float32[4]`` each) are memoised: a later bad call meets the hot path first."""
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((4,), F32))  # seen once
    ws.get_simultaneous(((4,), F32))  # memoised: later bad calls hit the hot path first
    ws.get_retained("kv", (4,), F32)
    ws.get_retained("kv", (4,), F32)
    return ws


def manager_with_patterned_tail(**kwargs: Any) -> WorkspaceManager:
    """A manager with a 1 KiB slot (0, 0) whose retained tail ``"kv"`` holds bytes 0..15
    (``kwargs`` go to the constructor)."""
    ws = workspace("cpu", **kwargs)
    ws.get_simultaneous(((1024,), U8))
    tail, _ = ws.get_retained("kv", (16,), U8)
    tail.copy_(torch.arange(16, dtype=U8))
    return ws


def patterned_tail_is_intact(ws: WorkspaceManager) -> bool:
    """Whether :func:`manager_with_patterned_tail`'s tail is intact and still holds 0..15."""
    tail, intact = ws.get_retained("kv", (16,), U8)
    return intact and tail.tolist() == list(range(16))


def reserved_manager(num_ubatches: int = 1, nbytes: int = 4096) -> WorkspaceManager:
    """A CPU manager each of whose slots reserved ``nbytes`` (a plan worth saving)."""
    ws = WorkspaceManager("cpu", num_ubatches=num_ubatches)
    ws.reserve(((nbytes,), torch.uint8))
    return ws


def load_benchmark(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` imported as a module (its sibling imports resolved)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


IMPORT_WITHOUT_HYPOTHESIS = """
import sys
sys.modules["hypothesis"] = None  # as if it were not installed
try:
    import {package}
except ImportError as err:
    print(err)
    print(type(err.__cause__).__name__, err.__cause__.name)
"""


def import_without_hypothesis(package: str) -> subprocess.CompletedProcess[str]:
    """Import ``package`` in a fresh interpreter where Hypothesis is missing; it prints the
    ImportError and its cause."""
    code = IMPORT_WITHOUT_HYPOTHESIS.format(package=package)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
