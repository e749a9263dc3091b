"""The kit's mutation score: how often ``check_workspace`` finds each planted bug, and how fast.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/kit_mutation_score.py --runs 20
    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/kit_mutation_score.py --profile ci
    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/kit_mutation_score.py --profile ci --fresh

Each bug of ``tests/support/mutants.py`` (a copy of the original's algorithm with one realistic
mistake) is checked in ``--runs`` fresh runs of Hypothesis's ``default`` profile (100 examples
of up to 50 steps, a new random seed each run, no example database), or once under the
derandomized ``ci`` profile (with ``--fresh``, ``--runs`` runs of the ``ci`` budget from fresh
random seeds: how likely a derandomized run is to find the bug, whatever its seed). A run
counts as finding the bug when ``check_workspace`` raises
``AssertionError``. The script prints, per bug, the fraction of runs that found it and the
seconds per run (median and worst; with ``--shrink`` a run includes shrinking the failure to
its short example, as a user sees it, and ``calls`` is the most calls a shrunk example kept;
otherwise it stops at the first failing example). Last
it checks the unmodified original once the same way: it must pass. Not run by ``make test``;
``tests/kit/test_kit_mutants.py`` checks every bug under ``ci``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import Phase, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import mutants as _mutants

from functional_ws.testing import register_profiles
from interop.testing import check_workspace


def profile(name: str, shrink: bool, fresh: bool) -> settings:
    """The named profile as ``check_workspace(settings=None)`` runs it (no explain phase, one
    failure reported), without shrinking unless asked; ``fresh``: random seeds, no database."""
    register_profiles()
    base = settings.get_profile(name)
    phases = [Phase.explicit, Phase.generate, Phase.target] + ([Phase.shrink] if shrink else [])
    chosen = settings(base, phases=phases, report_multiple_bugs=False)
    if name == "default" or fresh:
        return settings(chosen, database=None, derandomize=False, deadline=None)
    return chosen


def one_run(mutant: _mutants.Mutant, chosen: settings) -> tuple[bool, float, str, int]:
    """``(found, seconds, first line of the failure, calls in its example)``."""
    start = time.perf_counter()
    try:
        check_workspace(mutant.factory, settings=chosen, **mutant.kwargs())
    except AssertionError as err:
        skip = ("state.new_manager()", "state.teardown()")
        calls = [n for n in err.__notes__ if n.startswith("state.") and n not in skip]
        return True, time.perf_counter() - start, str(err).splitlines()[0], len(calls)
    return False, time.perf_counter() - start, "", 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=["default", "ci"], default="default")
    parser.add_argument("--runs", type=int, default=20, help="fresh runs per bug (default)")
    parser.add_argument("--shrink", action="store_true", help="time shrinking too")
    parser.add_argument("--fresh", action="store_true", help="ci's budget, random seeds")
    parser.add_argument("--only", nargs="*", default=None, help="bug names to run")
    args = parser.parse_args(argv)
    chosen = profile(args.profile, args.shrink, args.fresh)
    runs = 1 if args.profile == "ci" and not args.fresh else args.runs
    names = args.only or list(_mutants.MUTANTS)
    fresh = "fresh seeds" if chosen.derandomize is False else "derandomized"
    print(f"profile {args.profile} ({fresh}), {runs} run(s) per bug, shrink={args.shrink}")
    print(
        f"{'bug':<32} {'area':<11} {'found':>7} {'median s':>9} {'worst s':>8} {'calls':>5}"
        "  first failure"
    )
    worst: list[Any] = []
    for name in names:
        mutant = _mutants.MUTANTS[name]
        results = [one_run(mutant, chosen) for _ in range(runs)]
        found = sum(r[0] for r in results)
        times = [r[1] for r in results]
        message = next((r[2] for r in results if r[0]), "NOT FOUND")
        calls = max((r[3] for r in results), default=0)
        worst.append((found / runs, name))
        print(
            f"{name:<32} {mutant.area:<11} {found:>3}/{runs:<3} {statistics.median(times):9.2f}"
            f" {max(times):8.2f} {calls:5d}  {message[:90]}"
        )
    passed, seconds, message, _ = one_run(_mutants.ORIGINAL, chosen)
    verdict = f"FAILED: {message}" if passed else "passes"
    print(f"{'the unmodified original':<32} {'':<11} {verdict} in {seconds:.2f} s")
    lowest = min(worst)
    print(f"lowest found fraction: {lowest[0]:.2f} ({lowest[1]})")
    return 1 if passed else 0


if __name__ == "__main__":
    raise SystemExit(main())
