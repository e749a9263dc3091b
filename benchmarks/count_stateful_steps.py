"""How many stateful steps the CI profile runs on the pure core's state machines.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/count_stateful_steps.py

Counts runs and steps by wrapping the machine (invariants are checked once per run at the
start and once after every step).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis.stateful import run_state_machine_as_test

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import conftest  # noqa: F401  (registers and loads the `ci` profile)
import test_stateful_core as core

from functional_ws.testing import WorkspaceMachine


def count(machine: type[WorkspaceMachine]) -> tuple[int, int]:
    """``(runs, steps)`` of one machine under the loaded profile."""
    counts = {"runs": 0, "checks": 0}

    class Counting(machine):  # type: ignore[valid-type, misc]
        def __init__(self) -> None:
            super().__init__()
            counts["runs"] += 1

        def check_invariants(self, *args: object, **kwargs: object) -> None:
            counts["checks"] += 1
            super().check_invariants(*args, **kwargs)

    run_state_machine_as_test(Counting)
    return counts["runs"], counts["checks"] - counts["runs"]


if __name__ == "__main__":
    total = 0
    for machine in (WorkspaceMachine, core.UbatchesMachine, core.SmallAlignmentMachine):
        runs, steps = count(machine)
        total += steps
        print(f"{machine.__name__:<24} {runs:4d} runs {steps:6d} steps")
    print(f"{'total':<24} {'':9} {total:6d} steps")
