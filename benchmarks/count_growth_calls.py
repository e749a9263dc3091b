"""How many Python calls one growth makes, and through which of the library's modules.

    .venv/bin/python benchmarks/count_growth_calls.py

A deterministic count (``sys.setprofile``: every Python function entered, C functions
left out), not a timing: it says how much Python a growth walks through, which is what a
newcomer must read to follow it. Counted for the growths a caller meets: a request seen
for the first time that grows its slot, the same after the slot's request was seen twice
(memoised, so the growth retires a memo), a ``get_retained`` that grows, ``reserve``, and
a growth with a callable allocator. Only frames whose code lives in ``functional_ws/`` or
``interop/`` count (Python's own and torch's do not); generated code (dataclasses'
methods, ``functional_ws._build``'s constructors) counts under the module of its class.

``tests/workspace/test_growth_calls.py`` holds a ``get_simultaneous`` growth to
:data:`MAX_CALLS`. The module budget (:data:`MAX_MODULES`) is printed, not held: a growth
walks through one module per room it needs (the façade, requests, memo, engine, buffers,
carving, the adaptors, the provider, the device's allocation and the private storage count,
and the core's transition, state and growth: 13), and the rooms are the layout issue 28
asks for. A ``get_retained`` or ``reserve`` that grows makes more calls than a growth: the
first sight of a retained key or a reservation is validated and planned in full (about 40
calls) before the same growth.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import interop  # noqa: E402

#: A growth's budget (issue 28): at most this many Python calls of the library ...
MAX_CALLS = 32
#: ... through at most this many of its modules (printed; see the module's docstring).
MAX_MODULES = 9
U8 = torch.uint8
LIBRARY = (str(ROOT / "functional_ws"), str(ROOT / "interop"))


def _module_of(frame: Any) -> str | None:
    """The library module a frame's code belongs to, or ``None`` outside the library."""
    filename = frame.f_code.co_filename
    if filename.startswith(LIBRARY):
        return str(Path(filename).relative_to(ROOT).with_suffix(""))
    if filename.startswith("<"):  # generated code (a dataclass's or _build's): its module
        module = str(frame.f_globals.get("__name__", ""))
        if module.split(".")[0] in ("functional_ws", "interop"):
            return module.replace(".", "/")
    return None


def count_calls(call: Callable[[], Any]) -> tuple[int, Counter[str], list[str]]:
    """Run ``call`` once under a profiler: the library's Python calls, per module, in order."""
    per_module: Counter[str] = Counter()
    order: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = _module_of(frame)
        if module is not None:
            per_module[module] += 1
            order.append(f"{module}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return sum(per_module.values()), per_module, order


def _grown(make: Callable[[], interop.WorkspaceManager], sightings: int) -> Callable[[], Any]:
    """A manager that saw 512 KiB ``sightings`` times; the call grows it to 1 MiB."""
    ws = make()
    for _ in range(sightings):
        ws.get_simultaneous(((512 * 1024,), U8))
    return lambda: ws.get_simultaneous(((1024 * 1024,), U8))


def _retained() -> Callable[[], Any]:
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((512 * 1024,), U8))
    return lambda: ws.get_retained("tail", (1024 * 1024,), U8)


def _reserved() -> Callable[[], Any]:
    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((512 * 1024,), U8))
    return lambda: ws.reserve(((1024 * 1024,), U8))


def _pool(nbytes: int, device: torch.device) -> torch.Tensor:
    return torch.empty(nbytes, dtype=U8, device=device)


def growths() -> dict[str, Callable[[], Any]]:
    """Each growth a caller meets, prepared (the call returned grows once)."""
    cpu = lambda: interop.WorkspaceManager("cpu")  # noqa: E731
    return {
        "get_simultaneous, first sighting": _grown(cpu, 1),
        "get_simultaneous, after two sightings": _grown(cpu, 2),
        "get_retained": _retained(),
        "reserve": _reserved(),
        "callable allocator": _grown(lambda: interop.WorkspaceManager("cpu", allocator=_pool), 2),
    }


def main() -> None:
    print(f"{'growth':40} {'calls':>6} {'modules':>8}   (budget {MAX_CALLS} / {MAX_MODULES})")
    for name, call in growths().items():
        calls, per_module, _ = count_calls(call)
        print(f"{name:40} {calls:6d} {len(per_module):8d}")
    calls, per_module, order = count_calls(growths()["get_simultaneous, after two sightings"])
    print("\nafter two sightings, per module:")
    for module, n in per_module.most_common():
        print(f"  {n:3d}  {module}")
    print("\nin order:")
    for step in order:
        print(f"  {step}")


if __name__ == "__main__":
    main()
