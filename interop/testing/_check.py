"""The one-line runner: configure the machine for a manager and run it under Hypothesis.

The machine takes its configuration in its constructor; :func:`check_workspace` runs
``run_state_machine_as_test(lambda: WorkspaceAPIMachine(config))`` and reports the simplest
of the distinct failures Hypothesis found as one ``AssertionError`` (the others in its
notes), and :func:`make_machine` binds a configuration to a class for a test module that
collects its ``TestCase``.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Callable, Iterable

import hypothesis
from hypothesis import Phase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test
from hypothesis.statistics import collector, describe_statistics

from ._config import ALIGNMENT, MachineConfig, ManagerFactory, SlotSelector
from ._machine import WorkspaceAPIMachine
from ._machine_base import counting_runs
from ._properties import select_properties
from ._stats import Exercised

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # Hypothesis depends on the backport there
    from exceptiongroup import BaseExceptionGroup


def make_machine(
    factory: ManagerFactory,
    *,
    num_ubatches: int = 1,
    num_lanes: int = 1,
    use_lane: SlotSelector | None = None,
    use_ubatch: SlotSelector | None = None,
    properties: Iterable[str] | None = None,
    empty_requests: bool = True,
    alignment: int = ALIGNMENT,
) -> type[WorkspaceAPIMachine]:
    """A :class:`WorkspaceAPIMachine` subclass whose constructor takes no arguments.

    It passes one :class:`MachineConfig` to :class:`WorkspaceAPIMachine`'s constructor, for
    a test module that collects its ``TestCase`` (name the variable ``Test...``, not the
    class). In a test function, ``run_state_machine_as_test(lambda:
    WorkspaceAPIMachine(config))`` does the same. The arguments are those of
    :func:`check_workspace`.

    Returns:
        The configured machine class.

    Raises:
        ValueError: an unknown property name (the message lists the valid ones), a count
            below one, or more than one ubatch (lane) without ``use_ubatch`` (``use_lane``).
        TypeError: ``factory`` or a selector is not callable, a count is not an int,
            ``properties`` not names, ``empty_requests`` not a bool, ``alignment`` not an
            int (a ``ValueError`` where it is not a power of two from 8 up).

    Example:
        >>> import interop
        >>> Machine = make_machine(lambda u, l: interop.WorkspaceManager("cpu", u, l))
        >>> TestFacade = Machine.TestCase  # collect this in a test module
    """
    config = _config(
        factory,
        num_ubatches,
        num_lanes,
        use_lane,
        use_ubatch,
        properties,
        empty_requests,
        alignment,
    )

    class ConfiguredMachine(WorkspaceAPIMachine):
        def __init__(self) -> None:
            super().__init__(config)

    return ConfiguredMachine


def check_workspace(
    factory: ManagerFactory,
    *,
    num_ubatches: int = 1,
    num_lanes: int = 1,
    use_lane: SlotSelector | None = None,
    use_ubatch: SlotSelector | None = None,
    properties: Iterable[str] | None = None,
    empty_requests: bool = True,
    alignment: int = ALIGNMENT,
    settings: hypothesis.settings | None = None,
    statistics: Callable[[str], object] | None = None,
) -> None:
    """Check a manager with the original ``WorkspaceManager`` API against the kit's properties.

    Hypothesis drives fresh managers through random calls in random slots, with real bytes
    (patterns in retained spans and persistent tensors, scribbles over scratch views), and
    checks the selected property families after every call. A failure is shrunk to a short
    call sequence and raised with a note per call. Besides random calls, rules aim at the
    retained span's boundaries: requests ending just before, at and just past its start,
    growth by less than the alignment, the span asked for again with the same key and
    another size or by another key; and at a buffer's size: a request of exactly what it
    served, and persistent resources that are falsy (``None``, ``0``, ``[]``).

    Args:
        factory: ``factory(num_ubatches, num_lanes)`` returns a fresh, unused manager
            (no buffer yet: not warmed up) with
            ``get_simultaneous``, ``get_retained``, ``get_persistent``,
            ``get_persistent_resource``, ``lock``, ``unlock`` and ``is_locked``. The
            absolute-alignment check also calls it to make fresh managers.
        num_ubatches: ubatch slots to use (each needs ``use_ubatch`` when more than one).
        num_lanes: lanes to use (each needs ``use_lane`` when more than one).
        use_lane: ``use_lane(i)`` returns a context manager selecting lane ``i``; ``None``
            means a single lane.
        use_ubatch: ``use_ubatch(i)`` likewise for ubatches.
        properties: names of the families to check (:data:`PROPERTIES`), default all. A
            manager that deliberately differs leaves a family out (say why in a comment).
        empty_requests: ``False`` makes no ``get_simultaneous`` request of zero bytes in
            all. vLLM's original raises ``TypeError`` on one to a slot that never grew; the
            default finds that, and ``False`` looks past it for other bugs.
        alignment: the byte alignment the manager promises every view, a power of two from
            8 up: vLLM's 256 by default; for a manager made with another (such as
            ``interop.WorkspaceManager(..., alignment=512)``), say so, or a correct
            manager fails ``intact`` and ``locked`` (their requests are padded to it).
        settings: Hypothesis settings, used as given; ``None`` uses the loaded profile
            without Hypothesis's explain phase (it only names the kit's own lines, and made
            reporting a planted bug about three times slower) and with
            ``report_multiple_bugs=False`` (shrinking every distinct failure of a badly
            broken copy can take minutes; pass settings with it on to have them all). See
            :func:`functional_ws.testing.register_profiles` for the ``ci`` and ``dev``
            profiles.
        statistics: called once with Hypothesis's statistics of the run (``print``, or a
            list's ``append``): the text ``pytest --hypothesis-show-statistics`` prints for
            a ``@given`` test, which it cannot show for this call. Its events say what the
            runs exercised: calls of each kind, growths, requests reaching into a retained
            span or ending at its start, ``get_retained`` answers checked, refusals while
            locked (the ``make_machine(...).TestCase`` form shows them under pytest's
            option).

    Warns:
        UserWarning: the check passed, but its runs never exercised a selected family (no
            refusal while locked, no ``intact`` answer checked, no persistent call...): a
            budget too small to reach it. The message names what never happened.

    Raises:
        AssertionError: a property failed, or the manager raised where it must not (the
            message names the call; the manager's exception is its ``__cause__``). The
            shrunk calls, with a note per call, are in the exception's notes
            (``__notes__``). When Hypothesis found several distinct failures (with
            ``report_multiple_bugs`` on in ``settings``), the simplest is raised and the
            others, each shrunk, are summarised in its notes. A ``hypothesis.errors.Flaky``
            failure (one that did not replay) is raised as Hypothesis raises it.
        ValueError: an unknown property name, a bad count, a missing selector, an
            ``alignment`` that is not a power of two from 8 up or not the one an
            ``interop.WorkspaceManager``'s state says, or a manager whose views are on the
            meta device (the kit checks real bytes and addresses).
        TypeError: ``factory`` or a selector is not callable, a count is not an int,
            ``properties`` not names, ``empty_requests`` not a bool, ``alignment`` not an
            int (a ``ValueError`` where it is not a power of two from 8 up), ``settings`` not a
            ``hypothesis.settings``.

    Example:
        >>> import interop
        >>> from hypothesis import settings
        >>> check_workspace(
        ...     lambda u, l: interop.WorkspaceManager("cpu", u, l),
        ...     num_lanes=2,
        ...     use_lane=interop.use_workspace_lane,
        ...     settings=settings(max_examples=5, stateful_step_count=10),
        ... )
    """
    config = _config(
        factory,
        num_ubatches,
        num_lanes,
        use_lane,
        use_ubatch,
        properties,
        empty_requests,
        alignment,
    )
    if settings is not None and not isinstance(settings, hypothesis.settings):
        raise TypeError(
            f"settings must be None or a hypothesis.settings, got {settings!r}: e.g. "
            "settings=hypothesis.settings(max_examples=50)."
        )
    if statistics is not None and not callable(statistics):
        raise TypeError(
            f"statistics must be None or callable with the statistics' text (e.g. print), "
            f"got {statistics!r}."
        )
    failure: BaseException | None = None
    runs: list[Exercised] = []
    try:
        # (the factory as it is: Hypothesis derives a derandomized run's seed from its source)
        with _reporting(statistics), counting_runs(runs):
            # Hypothesis documents any zero-argument factory here; its annotation says a class.
            run_state_machine_as_test(
                lambda: WorkspaceAPIMachine(config),  # type: ignore[arg-type]
                settings=_default() if settings is None else settings,
            )
    except BaseExceptionGroup as group:
        if isinstance(group, Flaky):
            raise
        failure = one_failure(group)
    except AssertionError as err:
        _note_selectors(config, err)
        raise
    if failure is not None:  # raised outside the handler: the group is not its context
        _note_selectors(config, failure)
        raise failure
    _warn_untested(config, runs)


def _warn_untested(config: MachineConfig, runs: list[Exercised]) -> None:
    """Warn where a passing check never exercised a selected family (a budget too small to
    reach it: ``max_examples=1``, a few steps), so that its pass is not read as a proof."""
    totals = Exercised()
    for run in runs:
        totals.add(run)
    untested = totals.untested(config.properties)
    if untested:
        warnings.warn(
            f"check_workspace passed, but its {len(runs)} run(s) made {'; '.join(untested)}: "
            "those families were not exercised, and the pass says nothing of them. Give it "
            "more examples or steps (settings=hypothesis.settings(max_examples=..., "
            "stateful_step_count=...)), or leave them out (properties=...).",
            UserWarning,
            stacklevel=3,
        )


#: A failure's message or shrunk calls name a slot other than the first ("ubatch 1",
#: "lane 2", "slot=(0, 1)").
_OTHER_SLOT = re.compile(r"\b(?:ubatch|lane) [1-9]|\bslot[= ]\((?:\d+, [1-9]\d*|[1-9]\d*, \d+)\)")

SELECTOR_NOTE = (
    "Several slots, and this failure involves one past the first: a manager that mixes slots "
    "(one slot's views, span or resources met in another) fails so, and so does a "
    "use_lane / use_ubatch that selects nothing (every slot is then one). Check first that "
    "use_lane(i) and use_ubatch(i) select slot i."
)


def _note_selectors(config: MachineConfig, failure: BaseException) -> None:
    """Add :data:`SELECTOR_NOTE` to a failure whose message or shrunk calls involve a slot
    past the first, where there are several: the kit cannot tell a selector that selects
    nothing from a manager that ignores the slot."""
    said = "\n".join([str(failure), *getattr(failure, "__notes__", [])])
    if len(config.slots) > 1 and _OTHER_SLOT.search(said):
        failure.__notes__ = [*getattr(failure, "__notes__", []), SELECTOR_NOTE]


def one_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The simplest of Hypothesis's distinct failures, the others summarised in its notes.

    Hypothesis orders the failures it reports simplest last (by the size of their shrunk
    examples), the order in which it keeps one when ``report_multiple_bugs`` is off.

    Args:
        group: the ``ExceptionGroup`` Hypothesis raised.

    Returns:
        Its last exception, with a note per other failure: its first line and shrunk calls.

    Example:
        >>> group = BaseExceptionGroup("2 failures", [KeyError("x"), AssertionError("y")])
        >>> err = one_failure(group)
        >>> err, err.__notes__[0]
        (AssertionError('y'), 'check_workspace found 2 distinct failures; the simplest is above...')
    """
    *others, simplest = group.exceptions
    notes = [
        f"check_workspace found {len(group.exceptions)} distinct failures; the simplest is "
        "above, and the others were, each shrunk on its own:"
    ]
    for other in reversed(others):
        first = (str(other).splitlines() or [""])[0]
        notes.append(f"- {type(other).__name__}: {first}")
        skip = ("state.new_manager()", "state.teardown()")
        steps = [
            n for n in getattr(other, "__notes__", []) if n.startswith("state.") and n not in skip
        ]
        notes += [f"    {step}" for step in steps]
    # BaseException.add_note is Python 3.11's; the attribute is what it sets.
    simplest.__notes__ = [*getattr(simplest, "__notes__", []), *notes]
    return simplest


def _reporting(
    statistics: Callable[[str], object] | None,
) -> contextlib.AbstractContextManager[None]:
    """Hand Hypothesis's statistics of the run to ``statistics`` (nothing if ``None``)."""
    if statistics is None:
        return contextlib.nullcontext()
    # The pytest plugin's hook for its --hypothesis-show-statistics (typed there as None).
    return collector.with_value(lambda stats: statistics(describe_statistics(stats)))  # type: ignore[arg-type]


def _config(
    factory: ManagerFactory,
    num_ubatches: int,
    num_lanes: int,
    use_lane: SlotSelector | None,
    use_ubatch: SlotSelector | None,
    properties: Iterable[str] | None,
    empty_requests: bool,
    alignment: int,
) -> MachineConfig:
    chosen = select_properties(properties)
    return MachineConfig(
        factory,
        num_ubatches,
        num_lanes,
        use_lane,
        use_ubatch,
        chosen,
        empty_requests=empty_requests,
        alignment=alignment,
    )


def _default() -> hypothesis.settings:
    """The loaded Hypothesis profile without its explain phase, reporting one failure.

    The explain phase re-runs a failure many times to name the lines of code that only
    failing runs reach; here those lines are the kit's own. It made reporting a planted bug
    about three times slower (measured on a 2-core CPU, two lanes, 60 examples of 40 steps:
    1.2-1.8 s without it, 3.4-6.7 s with it, for the intact, locked and refusal bugs of
    ``tests/support/managers.py``).

    One failure: with ``report_multiple_bugs`` Hypothesis keeps looking for other failures
    and shrinks each distinct one on its own, and a copy with a slot-index bug fails in many
    distinct ways: under ``ci`` it took 221 s to report, against 1.9 s for the one failure
    (measured on this 2-core CPU; ``tests/support/mutants.py``, slot-ubatch-plus-lane).

    Returns:
        Settings to pass to ``run_state_machine_as_test``.
    """
    phases = tuple(p for p in hypothesis.settings().phases if p is not Phase.explain)
    return hypothesis.settings(phases=phases, report_multiple_bugs=False)
