"""Both kits' machines keep Hypothesis's statistics readable (``functional_ws.testing._events``).

Hypothesis's stateful runner logs an event whose text is the repr of every rule (several KB)
whenever a drawn rule cannot run; the machines drop it at teardown.
"""

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from hypothesis.statistics import collector, describe_statistics

from functional_ws.testing import WorkspaceMachine

RULE_RETRY = "Retried draw from sampled_from([Rule("


def _statistics(machine_class):
    texts = []
    with collector.with_value(lambda stats: texts.append(describe_statistics(stats))):
        run_state_machine_as_test(
            machine_class, settings=settings(max_examples=30, stateful_step_count=20, database=None)
        )
    (text,) = texts
    return text


class Unfiltered(WorkspaceMachine):
    """The core's machine as it was: its teardown leaves Hypothesis's events alone."""

    def teardown(self):
        pass


def test_the_rule_draw_event_is_dropped():
    assert RULE_RETRY in _statistics(Unfiltered)  # the control: the event does appear
    text = _statistics(WorkspaceMachine)
    assert RULE_RETRY not in text
    assert max(len(line) for line in text.splitlines()) < 120, text
