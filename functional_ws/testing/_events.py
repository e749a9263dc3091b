"""Keep a state machine's Hypothesis statistics readable.

Hypothesis's stateful runner adds an event of its own whenever a drawn rule cannot run (its
precondition fails, or this run leaves it out): its text is the repr of every rule, several
KB per line, and it buries the events a kit reports. Both kits' machines call
:func:`forget_rule_retries` at teardown.
"""

from __future__ import annotations

from hypothesis.control import current_build_context

#: How Hypothesis's events about drawing a rule begin (the rest is the repr of every rule).
_RULE_RETRY = "Retried draw from sampled_from([Rule("
_RULE_GAVE_UP = "Aborted test because unable to satisfy sampled_from([Rule("


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
