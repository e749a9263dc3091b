"""How many stateful steps the CI profile runs on the pure core's state machine.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/count_stateful_steps.py

Runs the machine in each configuration of ``tests/core/test_stateful_core.py`` and counts runs and
steps by wrapping it (invariants are checked once per run at the start and once after every
step).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

from hypothesis.stateful import run_state_machine_as_test

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import conftest  # noqa: F401  (registers and loads the `ci` profile)
import test_stateful_core as core

from functional_ws.testing import WorkspaceMachine


class CountingMachine(WorkspaceMachine):
    """:class:`WorkspaceMachine` that counts its runs and invariant checks."""

    counts: ClassVar[dict[str, int]] = {"runs": 0, "checks": 0}

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.counts["runs"] += 1

    def check_invariants(self, *args: Any, **kwargs: Any) -> None:
        self.counts["checks"] += 1
        super().check_invariants(*args, **kwargs)


def count(config: dict[str, Any]) -> tuple[int, int]:
    """``(runs, steps)`` of the machine in one configuration under the loaded profile."""
    CountingMachine.counts.update(runs=0, checks=0)
    # Hypothesis documents any zero-argument factory here; its annotation says a class.
    run_state_machine_as_test(lambda: CountingMachine(**config))  # type: ignore[arg-type]
    runs, checks = CountingMachine.counts["runs"], CountingMachine.counts["checks"]
    return runs, checks - runs


if __name__ == "__main__":
    total = 0
    for name, config in core.CONFIGS.items():
        runs, steps = count(config)
        total += steps
        print(f"{name:<24} {runs:4d} runs {steps:6d} steps")
    print(f"{'total':<24} {'':9} {total:6d} steps")
