"""What one run of the machine exercised, reported as Hypothesis events.

``pytest --hypothesis-show-statistics`` then says, per family, whether it was really tested:
the share of runs that made each kind of call, grew a buffer, reached into a retained span
or asked for it again, and were refused while locked. Each count is reported in a few coarse
buckets (``0``, ``1``, ``2-4``, ``5+``), so the statistics stay a short list.

Hypothesis's own several-KB event about drawing rules is dropped at teardown too
(:func:`functional_ws.testing._events.forget_rule_retries`).
"""

from __future__ import annotations

import collections
import dataclasses

from hypothesis import event


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
        probes: absolute-alignment checks made (each of the views since the last, and of
            fresh managers).
    """

    calls: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    growths: int = 0
    reaches: int = 0
    at_start: int = 0
    intact: int = 0
    kept: int = 0
    rechecked: int = 0
    refusals: int = 0
    probes: int = 0

    def add(self, other: Exercised) -> None:
        """Count ``other``'s run into this one (a whole check's totals)."""
        self.calls.update(other.calls)
        for field in dataclasses.fields(self):  # every count but the calls' Counter
            if field.name != "calls":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def untested(self, properties: frozenset[str]) -> list[str]:
        """What of the selected ``properties`` these counts never exercised, one phrase
        each (empty when every family met its evidence: a request that grew a buffer, a
        ``get_retained`` whose answer was checked, a refusal while locked, a persistent
        call).

        Example:
            >>> Exercised().untested(frozenset({"locked", "shapes"}))
            ['no get_simultaneous call (shapes)', 'no refusal while locked (locked)']
        """
        evidence = {
            "shapes": (self.calls["get_simultaneous"], "no get_simultaneous call"),
            "containment": (self.growths, "no buffer grown"),
            "disjoint": (self.calls["get_simultaneous"], "no get_simultaneous call"),
            "relative_alignment": (self.calls["get_simultaneous"], "no get_simultaneous call"),
            "absolute_alignment": (self.probes, "no absolute-alignment check"),
            "intact": (self.intact + self.kept + self.rechecked, "no get_retained answer checked"),
            "locked": (self.refusals, "no refusal while locked"),
            "persistent": (
                self.calls["get_persistent"] + self.calls["get_persistent_resource"],
                "no persistent call",
            ),
        }
        return [  # in PROPERTIES' order
            f"{phrase} ({name})"
            for name, (count, phrase) in evidence.items()
            if name in properties and not count
        ]

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
