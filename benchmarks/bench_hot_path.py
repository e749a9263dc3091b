"""Hot-path benchmark: the torch façade against the original's algorithm, warm and locked.

    .venv/bin/python benchmarks/bench_hot_path.py            # full run (about 20 s)
    .venv/bin/python benchmarks/bench_hot_path.py --quick    # a few seconds, numbers rough
    .venv/bin/python benchmarks/bench_hot_path.py --device cuda

Every candidate runs in the same process, in interleaved rounds (the order rotates each
round), each round timing a batch of calls with ``timeit`` (the bare call statement in a
loop, garbage collector off). The microseconds are medians over rounds; each
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
import math
import statistics
import threading
import timeit
from collections.abc import Callable, Hashable, Sequence
from itertools import accumulate
from typing import Any, cast

import torch

from interop import WorkspaceManager

ALIGNMENT = 256
_lane: contextvars.ContextVar[int] = contextvars.ContextVar("bench_lane", default=0)
_ubatch_of_thread: dict[int, int] = {}  # what vLLM's dual-batch overlap keeps; empty here


def _current_ubatch() -> int:
    if len(_ubatch_of_thread) == 0:
        return 0
    return _ubatch_of_thread[threading.get_ident()]


def _bytes_of(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _round_up(n: int, alignment: int) -> int:
    return ((n + alignment - 1) // alignment) * alignment


def _round_down(n: int, alignment: int) -> int:
    return (n // alignment) * alignment


class OriginalAlgorithm:
    """The original manager's per-call work, step by step, for one slot that is big enough.

    The same calls in the same order as the original: the slot lookup (a context-variable
    read and the ubatch lookup) twice per request, a byte count per view, ``round_up``,
    ``accumulate``, the size check through a static helper, the retained-span check, then
    slice, ``view(dtype)`` and ``reshape`` per view; ``get_persistent`` builds its factory
    lambda and goes through ``get_persistent_resource``. Growth is left out: the benchmark
    measures the warm, locked path.

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

    @staticmethod
    def _size(buffer: torch.Tensor | None) -> int:
        if buffer is None:
            return 0
        return buffer.numel() * buffer.element_size()

    def _slot(self) -> int:
        lane = _lane.get()
        if lane >= self._num_lanes:
            raise RuntimeError(f"lane {lane} is not configured")
        return _current_ubatch() * self._num_lanes + lane

    def _ensure(self, required: int) -> torch.Tensor:
        buffer = self._buffers[self._slot()]
        if self._size(buffer) < required:
            raise AssertionError("the benchmark never grows")
        assert buffer is not None
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
        start = _round_down(buffer.numel() - nbytes, ALIGNMENT)
        intact = self._retained[slot] == (key, start)
        self._retained[slot] = (key, start)
        return buffer[start : start + nbytes].view(dtype).reshape(shape), intact

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        resources = self._resources[self._slot()]
        if key not in resources:
            if self._locked:
                raise AssertionError(f"{key!r} was not allocated during warmup")
            resources[key] = factory()
        return cast(Any, resources[key])

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


def _cases(device: torch.device) -> dict[str, dict[str, timeit.Timer]]:
    """Per case, one timer per candidate: each times the bare call statement (no wrapper)."""
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
    names = {
        "ours": ours,
        "base": base,
        "torch": torch,
        "device": device,
        "S1": SPECS_1,
        "S3": SPECS_3,
        "R": RETAINED,
        "P": PERSISTENT,
    }
    empty = "[torch.empty(shape, dtype=dtype, device=device) for shape, dtype in {}]"
    statements = {
        "get_simultaneous x1": {
            "baseline": "base.get_simultaneous(*S1)",
            "ours": "ours.get_simultaneous(*S1)",
            "torch.empty": empty.format("S1"),
        },
        "get_simultaneous x3": {
            "baseline": "base.get_simultaneous(*S3)",
            "ours": "ours.get_simultaneous(*S3)",
            "torch.empty": empty.format("S3"),
        },
        "get_retained": {
            "baseline": "base.get_retained(*R)",
            "ours": "ours.get_retained(*R)",
        },
        "get_persistent": {
            "baseline": "base.get_persistent(*P)",
            "ours": "ours.get_persistent(*P)",
        },
    }
    return {
        case: {name: timeit.Timer(stmt, globals=names) for name, stmt in by_name.items()}
        for case, by_name in statements.items()
    }


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
        case: {name: [] for name in timers} for case, timers in cases.items()
    }
    for r in range(rounds):  # timeit turns the garbage collector off while it times
        for case, timers in cases.items():
            names = list(timers)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                seconds = timers[name].timeit(number=calls)
                samples[case][name].append(seconds / calls * 1e6)
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
        versus_empty = f"{m['ratio_empty']:.3f}" if "ratio_empty" in m else ""
        lines.append(
            f"{case:<22}{m['baseline']:>12.2f}{m['ours']:>9.2f}{empty:>10}{m['ratio']:>11.3f}"
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
