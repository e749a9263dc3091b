"""The one-line runner: configure the machine for a manager and run it under Hypothesis.

The machine takes its configuration in its constructor; :func:`check_workspace` runs
``run_state_machine_as_test(lambda: WorkspaceAPIMachine(config))``, and :func:`make_machine`
binds a configuration to a class for a test module that collects its ``TestCase``.
"""

from __future__ import annotations

from collections.abc import Iterable

import hypothesis
from hypothesis import Phase
from hypothesis.stateful import run_state_machine_as_test

from ._config import MachineConfig, ManagerFactory, SlotSelector
from ._machine import WorkspaceAPIMachine
from ._properties import select_properties


def make_machine(
    factory: ManagerFactory,
    *,
    num_ubatches: int = 1,
    num_lanes: int = 1,
    use_lane: SlotSelector | None = None,
    use_ubatch: SlotSelector | None = None,
    properties: Iterable[str] | None = None,
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
        TypeError: ``factory`` is not callable.

    Example:
        >>> import interop
        >>> Machine = make_machine(lambda u, l: interop.WorkspaceManager("cpu", u, l))
        >>> TestFacade = Machine.TestCase  # collect this in a test module
    """
    config = _config(factory, num_ubatches, num_lanes, use_lane, use_ubatch, properties)

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
    settings: hypothesis.settings | None = None,
) -> None:
    """Check a manager with the original ``WorkspaceManager`` API against the kit's properties.

    Hypothesis drives fresh managers through random calls in random slots, with real bytes
    (patterns in retained spans and persistent tensors, scribbles over scratch views), and
    checks the selected property families after every call. A failure is shrunk to a short
    call sequence and raised with a note per call.

    Args:
        factory: ``factory(num_ubatches, num_lanes)`` returns a fresh manager with
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
        settings: Hypothesis settings, used as given; ``None`` uses the loaded profile
            without Hypothesis's explain phase (it only names the kit's own lines, and made
            reporting a planted bug about three times slower).

    Raises:
        AssertionError: a property failed; the shrunk calls, with a note per call, are in
            the exception's notes (``__notes__``). An exception the manager raised is
            re-raised the same way, and several distinct failures come as an
            ``ExceptionGroup`` when the settings' ``report_multiple_bugs`` is on.
        ValueError: an unknown property name, a bad count, or a missing selector.
        TypeError: ``factory`` is not callable.

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
    config = _config(factory, num_ubatches, num_lanes, use_lane, use_ubatch, properties)
    # Hypothesis documents any zero-argument factory here; its annotation says a class.
    run_state_machine_as_test(
        lambda: WorkspaceAPIMachine(config),  # type: ignore[arg-type]
        settings=_default() if settings is None else settings,
    )


def _config(
    factory: ManagerFactory,
    num_ubatches: int,
    num_lanes: int,
    use_lane: SlotSelector | None,
    use_ubatch: SlotSelector | None,
    properties: Iterable[str] | None,
) -> MachineConfig:
    chosen = select_properties(properties)
    return MachineConfig(factory, num_ubatches, num_lanes, use_lane, use_ubatch, chosen)


def _default() -> hypothesis.settings:
    """The loaded Hypothesis profile without its explain phase.

    The explain phase re-runs a failure many times to name the lines of code that only
    failing runs reach; here those lines are the kit's own. It made reporting a planted bug
    about three times slower (measured on a 2-core CPU, two lanes, 60 examples of 40 steps:
    1.2-1.8 s without it, 3.4-6.7 s with it, for the intact, locked and refusal bugs of
    ``tests/_managers.py``).

    Returns:
        Settings to pass to ``run_state_machine_as_test``.
    """
    phases = tuple(p for p in hypothesis.settings().phases if p is not Phase.explain)
    return hypothesis.settings(phases=phases)
