"""Hot-path benchmark: the torch façade against the original's algorithm, warm and locked.

    .venv/bin/python benchmarks/bench_hot_path.py            # full run (about 20 s)
    .venv/bin/python benchmarks/bench_hot_path.py --quick    # a few seconds, numbers rough
    .venv/bin/python benchmarks/bench_hot_path.py --device cuda

Every candidate runs in the same process, in interleaved rounds (the order rotates each
round), each round timing a batch of calls. The microseconds are medians over rounds; each
ratio is the median over rounds of the ratio within a round, which cancels load that drifts
on a shared machine. The baseline, :class:`OriginalAlgorithm`, is our own code that takes
the original ``WorkspaceManager``'s steps one by one on every call: context-variable reads,
a byte count per view, ``round_up``, ``accumulate`` for the offsets, the size check, the
retained-span check, then slice, ``view(dtype)`` and ``reshape`` per view. Targets (issue 3):
``get_simultaneous`` at most 0.2x the baseline and faster than ``torch.empty`` for the same
tensors, ``get_retained`` at most 0.3x, ``get_persistent`` no slower.
"""

from __future__ import annotations

import argparse
import contextvars
import gc
import math
import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from itertools import accumulate
from typing import Any

import torch

from interop import WorkspaceManager

ALIGNMENT = 256
_lane: contextvars.ContextVar[int] = contextvars.ContextVar("bench_lane", default=0)
_ubatch_of_thread: dict[int, int] = {}  # what vLLM's dual-batch overlap keeps; empty here


def _current_ubatch() -> int:
    return _ubatch_of_thread.get(0, 0) if _ubatch_of_thread else 0


def _bytes_of(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _round_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


class OriginalAlgorithm:
    """The original manager's per-call work, step by step, for one slot that is big enough.

    Args:
        device: where the buffer lives.
        nbytes: the buffer's size (allocated once; the benchmark never grows it).
    """

    def __init__(self, device: torch.device, nbytes: int) -> None:
        self._num_lanes = 1
        self._buffers: list[torch.Tensor | None] = [
            torch.empty((nbytes,), dtype=torch.uint8, device=device)
        ]
        self._retained: list[tuple[Hashable, int] | None] = [None]
        self._resources: list[dict[Hashable, Any]] = [{}]
        self._device = device
        self._locked = True

    def _slot(self) -> int:
        lane = _lane.get()
        if lane >= self._num_lanes:
            raise RuntimeError(f"lane {lane} is not configured")
        return _current_ubatch() * self._num_lanes + lane

    def _ensure(self, required: int) -> torch.Tensor:
        buffer = self._buffers[self._slot()]
        assert buffer is not None
        if buffer.numel() * buffer.element_size() < required:
            raise AssertionError("the benchmark never grows")
        return buffer

    def get_simultaneous(self, *specs: tuple[tuple[int, ...], torch.dtype]) -> list[torch.Tensor]:
        exact = [_bytes_of(shape, dtype) for shape, dtype in specs]
        padded = [_round_up(n, ALIGNMENT) for n in exact]
        total = sum(padded)
        offsets = list(accumulate([0, *padded[:-1]]))
        buffer = self._ensure(total)
        slot = self._slot()
        retained = self._retained[slot]
        if retained is not None and total > retained[1]:
            self._retained[slot] = None
        return [
            buffer[offsets[i] : offsets[i] + exact[i]].view(specs[i][1]).reshape(specs[i][0])
            for i in range(len(specs))
        ]

    def get_retained(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, bool]:
        nbytes = _bytes_of(shape, dtype)
        slot = self._slot()
        buffer = self._ensure(nbytes)
        start = (buffer.numel() - nbytes) // ALIGNMENT * ALIGNMENT
        intact = self._retained[slot] == (key, start)
        self._retained[slot] = (key, start)
        return buffer[start : start + nbytes].view(dtype).reshape(shape), intact

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        resources = self._resources[self._slot()]
        if key not in resources:
            if self._locked:
                raise AssertionError(f"{key!r} was not allocated during warmup")
            resources[key] = factory()
        return resources[key]

    def get_persistent(
        self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        factory = torch.zeros if zero_init else torch.empty
        tensor = self.get_persistent_resource(
            (torch.Tensor, key), lambda: factory(shape, dtype=dtype, device=self._device)
        )
        if tensor.shape != shape or tensor.dtype != dtype:
            raise ValueError(f"requested shape={shape}, dtype={dtype}")
        return tensor  # type: ignore[no-any-return]


SPECS_1 = (((2048, 4096), torch.bfloat16),)
SPECS_3 = (((2048, 4096), torch.bfloat16), ((2048,), torch.float32), ((2048, 8), torch.int32))
RETAINED = ("kv-scratch", (4096, 64), torch.float16)
PERSISTENT = ("scales", (128,), torch.float32)
#: (case, target ratio to the baseline, whether it must also beat torch.empty)
TARGETS = {
    "get_simultaneous x1": (0.2, True),
    "get_simultaneous x3": (0.2, True),
    "get_retained": (0.3, False),
    "get_persistent": (1.0, False),
}


def _cases(device: torch.device) -> dict[str, dict[str, Callable[[], object]]]:
    ours = WorkspaceManager(device)
    ours.reserve(list(SPECS_3), RETAINED[1:], slots=[(0, 0)])
    capacity = ours.stats().slots[0].capacity
    base = OriginalAlgorithm(device, capacity)
    base._locked = False
    for manager in (ours, base):
        manager.get_persistent(*PERSISTENT)
        manager.get_retained(*RETAINED)
    ours.lock()
    base._locked = True

    def empty(specs: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> Callable[[], object]:
        return lambda: [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs]

    return {
        "get_simultaneous x1": {
            "baseline": lambda: base.get_simultaneous(*SPECS_1),
            "ours": lambda: ours.get_simultaneous(*SPECS_1),
            "torch.empty": empty(SPECS_1),
        },
        "get_simultaneous x3": {
            "baseline": lambda: base.get_simultaneous(*SPECS_3),
            "ours": lambda: ours.get_simultaneous(*SPECS_3),
            "torch.empty": empty(SPECS_3),
        },
        "get_retained": {
            "baseline": lambda: base.get_retained(*RETAINED),
            "ours": lambda: ours.get_retained(*RETAINED),
        },
        "get_persistent": {
            "baseline": lambda: base.get_persistent(*PERSISTENT),
            "ours": lambda: ours.get_persistent(*PERSISTENT),
        },
    }


def _per_call_us(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def measure(
    device: torch.device, *, rounds: int = 41, calls: int = 1000
) -> dict[str, dict[str, float]]:
    """Per case: the median per-call µs of each candidate, and the median per-round ratios.

    Returns:
        ``{case: {candidate: µs, ..., "ratio": ours/baseline, "ratio_empty": ours/empty}}``;
        each ratio is the median over rounds of the ratio within a round, so that load
        which drifts between rounds (a shared machine) cancels out.
    """
    cases = _cases(device)
    samples: dict[str, dict[str, list[float]]] = {
        case: {name: [] for name in fns} for case, fns in cases.items()
    }
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            for case, fns in cases.items():
                names = list(fns)
                names = names[r % len(names) :] + names[: r % len(names)]
                for name in names:
                    samples[case][name].append(_per_call_us(fns[name], calls))
    finally:
        if gc_was_enabled:
            gc.enable()
    results: dict[str, dict[str, float]] = {}
    for case, by_name in samples.items():
        medians = {name: statistics.median(values) for name, values in by_name.items()}
        for key, other in (("ratio", "baseline"), ("ratio_empty", "torch.empty")):
            if other in by_name:
                pairs = zip(by_name["ours"], by_name[other], strict=True)
                medians[key] = statistics.median(o / b for o, b in pairs)
        results[case] = medians
    return results


def report(results: dict[str, dict[str, float]]) -> list[str]:
    """Table lines: per-call µs, ratio to the baseline and to ``torch.empty``, verdict."""
    lines = [
        f"{'case':<22}{'baseline µs':>12}{'ours µs':>9}{'empty µs':>10}{'ours/base':>11}"
        f"{'target':>8}{'ours/empty':>12}  verdict"
    ]
    for case, m in results.items():
        target, beat_empty = TARGETS[case]
        ok = m["ratio"] <= target and (not beat_empty or m["ratio_empty"] < 1)
        empty = f"{m['torch.empty']:.2f}" if "torch.empty" in m else ""
        versus_empty = f"{m['ratio_empty']:.2f}" if "ratio_empty" in m else ""
        lines.append(
            f"{case:<22}{m['baseline']:>12.2f}{m['ours']:>9.2f}{empty:>10}{m['ratio']:>11.2f}"
            f"{target:>8.2f}{versus_empty:>12}  {'meets' if ok else 'MISSES'}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the benchmark and print the table; returns the medians (for gpu_check).

    Args:
        argv: command-line arguments (``--quick``, ``--device``, ``--rounds``, ``--calls``).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 200 calls")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args(argv)
    rounds, calls = (3, 200) if args.quick else (args.rounds, args.calls)
    device = torch.device(args.device)
    results = measure(device, rounds=rounds, calls=calls)
    print(
        f"hot path on {device} (torch {torch.__version__}), warm and locked; medians of "
        f"{rounds} interleaved rounds of {calls} calls"
    )
    for line in report(results):
        print(line)
    return results


if __name__ == "__main__":
    main()
