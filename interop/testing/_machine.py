"""A Hypothesis state machine for any manager with the original ``WorkspaceManager`` API.

:class:`WorkspaceAPIMachine` calls a real manager at random (``get_simultaneous``,
``get_retained``, ``get_persistent``, ``get_persistent_resource``, ``lock``, ``unlock``) in
random slots, with real bytes: it scribbles over every view ``get_simultaneous`` returns
(bytes ``0x80..0xff``), writes a fresh pattern into every retained span and persistent
tensor (bytes ``0x01..0x7f``), and mirrors those writes in a byte model
(:class:`functional_ws.testing.WorkspaceModel`, one ``bytearray`` per slot, indexed from
the start of the slot's buffer). Then each property family (:data:`PROPERTIES`) checks
what the manager returned against real memory and the model.

Besides the random calls, aimed rules (their arguments from :class:`._aims.Aims`) make the
calls the retained span's invariants are about: requests ending a block before, exactly at,
or past the span's start without growing the buffer (sometimes followed at once by the same
``get_retained``), a span with room behind requests, growth by less than the alignment, the
span asked for again, resized or under another key, repeats of recent requests, persistent
keys asked again. Hypothesis picks among the rules whose preconditions hold and leaves random
subsets out per run (swarm testing). A manager's exception where none is allowed becomes one
``AssertionError`` naming the call (:func:`._machine_base.failed`); teardown reports what the
run exercised as Hypothesis events (:mod:`._stats`).

The manager is a black box: the machine learns a slot's buffer from its views'
``untyped_storage()`` and notices a growth when a slot's views move to another storage. It
assumes the original's design: one buffer per slot, requests laid out from its start, the
retained span at its end.

The machine is configured through its constructor (a :class:`MachineConfig`): run it with
``run_state_machine_as_test(lambda: WorkspaceAPIMachine(config))``. The rules of a family
that is not selected do not run (their preconditions read the configuration). With
``core_state`` configured, the machine also checks a manager built on :mod:`functional_ws`
against the core's own decisions (:mod:`._mirror`).

The machine is built in three rooms: :mod:`._machine_base` (the configuration, the calls and
the checks of what they return), :mod:`._retained_rules` (scratch requests and retained
spans) and :mod:`._lock_rules` (the lock, persistent tensors and resources); this class
combines the rule groups. Hypothesis collects rules by name from the whole class, so the split
changes no run.
"""

from __future__ import annotations

from ._lock_rules import LockAndPersistentRules
from ._retained_rules import ScratchAndRetainedRules


class WorkspaceAPIMachine(ScratchAndRetainedRules, LockAndPersistentRules):
    """Drive a manager with the original API through random calls; check it with real bytes.

    Args:
        config: the manager's factory, slots, selectors and the families to check.

    Raises:
        TypeError: ``config`` is not a :class:`MachineConfig`, or a subclass sets ``config``
            as a class attribute (pass it to the constructor instead).

    Example:
        >>> import interop
        >>> from hypothesis import settings
        >>> from interop.testing import MachineConfig
        >>> from hypothesis.stateful import run_state_machine_as_test
        >>> config = MachineConfig(lambda u, l: interop.WorkspaceManager("cpu", u, l))
        >>> run_state_machine_as_test(
        ...     lambda: WorkspaceAPIMachine(config),
        ...     settings=settings(max_examples=3, stateful_step_count=5, database=None),
        ... )
    """
