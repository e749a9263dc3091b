"""Timing shared by the benchmarks: interleaved rounds, the best round, ratios of bests.

A *sampler* times one batch of calls and returns the µs per call. For each case, every
round runs each candidate's sampler once, rotating their order from round to round, so
that load which drifts on a shared machine hits every candidate alike (:func:`run_rounds`).
The benchmarks report the best (lowest) round of each candidate and the ratio of those
bests (:func:`best_ratio`); :func:`median_ratio` is the median of the per-round ratios.
"""

from __future__ import annotations

import gc
import statistics
import time
import timeit
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: Times one batch; returns µs per call.
Sampler = Callable[[], float]
#: Per case, per candidate, one µs-per-call sample per round.
Samples = dict[str, dict[str, list[float]]]


def statement_sampler(
    stmt: str,
    names: Mapping[str, Any],
    *,
    setup: str = "pass",
    calls: int | None = None,
    batch_seconds: float = 1e-3,
    max_calls: int = 1000,
) -> Sampler:
    """Time ``stmt`` in ``timeit``'s loop (no wrapper call around it), a batch per sample.

    ``setup`` runs before each batch in the same local scope as ``stmt``, so it can bind
    locals the statement uses (building request tuples from them inside the loop, as a
    caller does); it can read ``batch_calls``, the number of calls the batch will make.
    ``timeit`` turns the garbage collector off while it times.

    Args:
        stmt: the statement (several lines allowed).
        names: the globals the statement and setup see (copied).
        setup: runs once per batch, untimed.
        calls: calls per batch; ``None`` calibrates now, so that a batch lasts about
            ``batch_seconds`` (every candidate's batches equally long: equally likely to
            be interrupted), at most ``max_calls``.
        batch_seconds: the batch duration to calibrate for.
        max_calls: the most calls a calibrated batch makes.

    Returns:
        A sampler.

    Example:
        >>> sample = statement_sampler("x = [n]", {}, setup="n = batch_calls", calls=10)
        >>> sample() > 0
        True
    """
    scope = dict(names)
    timer = timeit.Timer(stmt, setup=setup, globals=scope)

    def run(number: int) -> float:
        scope["batch_calls"] = number
        return timer.timeit(number=number)

    if calls is None:
        number = 1
        while (elapsed := run(number)) < batch_seconds / 4 and number < max_calls:
            number *= 2
        calls = max(1, min(max_calls, round(number * batch_seconds / max(elapsed, 1e-9))))
    batch = calls
    return lambda: run(batch) / batch * 1e6


def prepared_sampler(prepare: Callable[[], list[Any]], call: Callable[[Any], object]) -> Sampler:
    """Time ``call`` on each item ``prepare()`` returns; the batch's median µs per call.

    For calls that consume what they act on (one growth per manager): ``prepare`` builds
    the batch's items untimed, then each call is timed on its own, with the garbage
    collector off, and the median call is the batch's figure (a call the scheduler
    interrupts for milliseconds would otherwise dominate a batch of a few dozen).

    Returns:
        A sampler.

    Example:
        >>> sample = prepared_sampler(lambda: [1, 2, 3], lambda x: x + 1)
        >>> sample() > 0
        True
    """

    def sample() -> float:
        items = prepare()
        times: list[float] = []
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            for item in items:
                start = time.perf_counter()
                call(item)
                times.append(time.perf_counter() - start)
        finally:
            if gc_was_on:
                gc.enable()
        return statistics.median(times) * 1e6

    return sample


def run_rounds(
    cases: Mapping[str, Mapping[str, Sampler]], rounds: int, *, passes: int = 8
) -> Samples:
    """Run every candidate's sampler ``rounds`` times per case, in blocks of rounds.

    Within a case the candidates alternate batch by batch, their order rotating each
    round, so that drift in the machine's speed hits them alike. Cases do not interleave
    batch by batch: one case's side effects (a growth case's allocations and frees, many
    objects made and dropped) would land in the next case's batches. Instead the rounds
    are split into ``passes`` blocks, and the run goes through every case once per pass,
    so that each case is sampled across the whole run rather than in one window that a
    burst of load could cover; each block starts with one discarded batch per candidate.

    Args:
        cases: per case, per candidate, a sampler.
        rounds: how many rounds per case.
        passes: how many blocks the rounds are split into.

    Returns:
        Per case, per candidate, the µs-per-call samples in round order.
    """
    samples: Samples = {case: {name: [] for name in by_name} for case, by_name in cases.items()}
    parts = max(1, min(passes, rounds))
    blocks = [rounds // parts + (i < rounds % parts) for i in range(parts)]
    done = 0
    for block in blocks:
        for case, by_name in cases.items():
            names = list(by_name)
            for name in names:  # the first batch after another case's: discarded
                by_name[name]()
            for r in range(done, done + block):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    samples[case][name].append(by_name[name]())
        done += block
    return samples


def best_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The best (lowest) numerator over the best denominator: ratio of the best rounds.

    The lowest time is what the code costs when nothing else interferes (``timeit``'s own
    advice); on a loaded machine a batch is more often slowed than sped up.

    Example:
        >>> best_ratio([3.0, 1.0, 2.0], [4.0, 5.0, 2.0])
        0.5
    """
    return min(numerators) / min(denominators)


def median_ratio(numerators: Iterable[float], denominators: Iterable[float]) -> float:
    """The median over rounds of ``numerator / denominator`` within each round.

    Example:
        >>> median_ratio([1.0, 2.0, 9.0], [2.0, 4.0, 10.0])
        0.5
    """
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))
