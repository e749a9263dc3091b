"""What one run of the machine exercised, reported as Hypothesis events.

``pytest --hypothesis-show-statistics`` then says, per family, whether it was really tested:
the share of runs that made each kind of call, grew a buffer, reached into a retained span
or asked for it again, and were refused while locked. Each count is reported in a few coarse
buckets (``0``, ``1``, ``2-4``, ``5+``), so the statistics stay a short list.

Hypothesis's stateful runner adds an event of its own whenever a drawn rule cannot run (its
precondition fails, or this run leaves it out): its text is the repr of every rule, several
KB per line. :func:`forget_rule_retries` drops it from the run's events, and shortens the
same text where a run gave up for want of a rule that could run.
"""

from __future__ import annotations

import collections
import dataclasses

from hypothesis import event
from hypothesis.control import current_build_context

#: How Hypothesis's events about drawing a rule begin (the rest is the repr of every rule).
_RULE_RETRY = "Retried draw from sampled_from([Rule("
_RULE_GAVE_UP = "Aborted test because unable to satisfy sampled_from([Rule("


def bucket(count: int) -> str:
    """``0``, ``1``, ``2-4`` or ``5+``.

    Example:
        >>> [bucket(n) for n in (0, 1, 3, 9)]
        ['0', '1', '2-4', '5+']
    """
    if count < 2:
        return str(count)
    return "2-4" if count < 5 else "5+"


@dataclasses.dataclass
class Exercised:
    """Counts of what one run did; :meth:`report` turns them into events.

    Attributes:
        calls: calls made, by method name.
        growths: buffers seen to change (growth, or a first buffer).
        reaches: scratch requests that reached into a slot's retained span.
        at_start: scratch requests that ended exactly where the retained span starts.
        intact: ``get_retained`` answers of ``intact=True`` (each checked byte for byte).
        kept: ``get_retained`` calls the kit could prove must be intact (checked to say so).
        rechecked: ``get_retained`` calls of the same key, shape and dtype in the same buffer
            after a request reached into the span (they must not say intact).
        refusals: calls refused while locked (each checked to leave everything as it was).
    """

    calls: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    growths: int = 0
    reaches: int = 0
    at_start: int = 0
    intact: int = 0
    kept: int = 0
    rechecked: int = 0
    refusals: int = 0

    def report(self, methods: tuple[str, ...]) -> None:
        """One event per counter (and per method in ``methods``), with its bucket."""
        for method in methods:
            event(f"{method} calls: {bucket(self.calls[method])}")
        event(f"growths: {bucket(self.growths)}")
        event(f"requests reaching into a retained span: {bucket(self.reaches)}")
        event(f"requests ending where a retained span starts: {bucket(self.at_start)}")
        event(f"get_retained answers intact=True: {bucket(self.intact)}")
        event(f"get_retained calls that must be intact: {bucket(self.kept)}")
        event(f"get_retained calls after a request reached the span: {bucket(self.rechecked)}")
        event(f"refusals while locked: {bucket(self.refusals)}")


def forget_rule_retries() -> None:
    """Drop the current run's several-KB events about drawing rules (best effort).

    The events live on Hypothesis's internal test-case data; if that changes, the events
    stay as they were.
    """
    try:
        events = current_build_context().data.events
    except Exception:  # outside a Hypothesis run, or Hypothesis's internals moved
        return
    for key in [k for k in events if k.startswith(_RULE_RETRY)]:
        del events[key]
    if str(events.get("gave up because", "")).startswith(_RULE_GAVE_UP):
        events["gave up because"] = "no rule this run enables had a true precondition"
