"""Planted bugs: copies of the original's algorithm with one realistic mistake each.

Each :class:`Mutant` is the source of :mod:`interop.testing._reference` (the original's
algorithm, call for call) with a few lines edited the way people get this class wrong when
they copy it: the retained span's bookkeeping, alignment, slot selection, persistent
resources, locking. The edited source is compiled into a module of its own, so a mutant is a
complete, independent copy of the class, and ``MUTANTS[...].factory`` makes its managers as
:func:`interop.testing.check_workspace` does. Every edit must match the source exactly once
(:func:`source_of` says so when the reference changes under it).

The kit must find every mutant in :data:`CONFIG` (two ubatches by two lanes, every family
but absolute alignment, no zero-byte request, as a user checks a verbatim copy of vLLM's
class), and must pass the unmodified original (``ORIGINAL``) there.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

import interop.testing._reference as reference
from interop.testing import PROPERTIES

#: How the mutants are checked (``use_lane`` and ``use_ubatch`` come from each copy).
CONFIG: dict[str, Any] = {
    "num_ubatches": 2,
    "num_lanes": 2,
    "properties": [p for p in PROPERTIES if p != "absolute_alignment"],
    "empty_requests": False,
}


@dataclasses.dataclass(frozen=True)
class Mutant:
    """A copy of the original with ``edits`` applied: ``(old, new)`` source replacements.

    Attributes:
        name: a short id (the test's parameter id).
        area: ``retained``, ``alignment``, ``slots``, ``persistent`` or ``locking``.
        bug: the mistake, in words.
        edits: the replacements, each of text found exactly once in the reference's source.
        config: overrides of :data:`CONFIG` (only where the bug needs another shape).
    """

    name: str
    area: str
    bug: str
    edits: tuple[tuple[str, str], ...]
    config: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def manager_class(self) -> type[Any]:
        """The copy's ``ReferenceWorkspaceManager`` class."""
        return _compiled(self.name, self.edits).ReferenceWorkspaceManager  # type: ignore[no-any-return]

    def factory(self, num_ubatches: int, num_lanes: int) -> Any:
        """A fresh CPU manager of the copy, as the kit calls a factory."""
        return self.manager_class(torch.device("cpu"), num_ubatches, num_lanes)

    def kwargs(self) -> dict[str, Any]:
        """``check_workspace``'s arguments for this copy (its own slot selectors)."""
        cls = self.manager_class
        return {**CONFIG, "use_lane": cls.use_lane, "use_ubatch": cls.use_ubatch, **self.config}


def source_of(edits: tuple[tuple[str, str], ...]) -> str:
    """The reference's source with ``edits`` applied.

    Raises:
        AssertionError: an edit's old text is not found exactly once.
    """
    source = inspect.getsource(reference)
    for old, new in edits:
        count = source.count(old)
        assert count == 1, f"a mutant's edit matches {count} times in _reference.py: {old!r}"
        source = source.replace(old, new)
    return source


@functools.cache
def _compiled(name: str, edits: tuple[tuple[str, str], ...]) -> types.ModuleType:
    module = types.ModuleType(f"mutant_{name.replace('-', '_')}")
    exec(compile(source_of(edits), f"<mutant {name}>", "exec"), module.__dict__)
    return module


def _reach(condition: str) -> tuple[str, str]:
    """get_simultaneous forgets the retained span under ``condition`` instead of the original's."""
    old = "if retained is not None and total_bytes > retained[1]:\n            self._retained"
    old += "[workspace_id] = None\n\n        return ["
    return old, old.replace("total_bytes > retained[1]", condition)


_CLEAR_ON_GROWTH = """            self._current_workspaces[workspace_id] = None
            self._retained[workspace_id] = None
            del current_workspace
"""
_LOCK_CHECK = """            if self._locked:
                raise AssertionError(
                    f"Workspace is locked but allocation from '{get_caller_info()}' "
                    f"requires {required_bytes / _MB:.2f} MB, current size is "
                    f"{current_size / _MB:.2f} MB. "
                    "Workspace growth is not allowed after locking."
                )
"""
_RETAINED_START = "start = round_down(current_workspace.numel() - num_bytes, _VIEW_ALIGNMENT)"
_INTACT = "intact = self._retained[workspace_id] == (key, start)"
_SCRATCH_OFFSETS = (
    "offsets = list(accumulate([0] + aligned_bytes[:-1]))  # noqa: RUF005 (the original's)"
)
_SCRATCH_GROWTH = "        current_workspace = self._ensure_workspace_size(total_bytes)\n"
_RESOURCE_LOOKUP = "resources = self._persistent_resources[self._get_workspace_id()]"
_PERSISTENT_CHECK = "if workspace.shape != shape or workspace.dtype != dtype:"
_UNLOCK = '        """Unlock the workspace to allow growth."""\n        self._locked = False'


def _mutant(name: str, area: str, bug: str, *edits: tuple[str, str], **config: Any) -> Mutant:
    return Mutant(name, area, bug, tuple(edits), config)


#: The unmodified original: the kit must pass it in :data:`CONFIG`.
ORIGINAL = Mutant("original", "none", "no bug", ())

#: Every planted bug, by name.
MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in [
        # ----- the retained span: when a request reaches into it -----
        _mutant("reach-never-clears", "retained",
               "a request that reaches into the span does not forget it", _reach("False")),
        _mutant("reach-ge", "retained",
               "a request ending exactly at the span's start forgets it (>= for >)",
               _reach("total_bytes >= retained[1]")),
        _mutant("reach-a-block-late", "retained",
               "the reach is noticed only 256 bytes past the span's start",
               _reach("total_bytes > retained[1] + _VIEW_ALIGNMENT")),
        _mutant("reach-unpadded-total", "retained",
               "the reach compares the views' bytes without their padding",
               _reach("sum(actual_bytes) > retained[1]")),
        _mutant("reach-largest-view", "retained",
               "the reach compares the largest view, not the request's end",
               _reach("max(aligned_bytes) > retained[1]")),
        # ----- the retained span: reallocation -----
        _mutant("growth-keeps-retained", "retained",
               "a reallocation does not forget the slot's span",
               (_CLEAR_ON_GROWTH, _CLEAR_ON_GROWTH.replace(
                   "            self._retained[workspace_id] = None\n", ""))),
        _mutant("growth-clears-slot-zero", "retained",
               "a reallocation forgets the first slot's span instead of its own",
               (_CLEAR_ON_GROWTH, _CLEAR_ON_GROWTH.replace("[workspace_id] = None\n            del",
                                                           "[0] = None\n            del"))),
        _mutant("growth-clears-every-slot", "retained",
               "a reallocation forgets every slot's span",
               (_CLEAR_ON_GROWTH, _CLEAR_ON_GROWTH.replace(
                   "self._retained[workspace_id] = None",
                   "self._retained = [None] * len(self._retained)"))),
        # ----- the retained span: intact and where it lies -----
        _mutant("intact-ignores-key", "retained",
               "intact compares the span's start only: another key's span counts",
               (_INTACT, "retained = self._retained[workspace_id]\n        intact = "
                         "retained is not None and retained[1] == start")),
        _mutant("intact-ignores-start", "retained",
               "intact compares the key only: a span of another size counts",
               (_INTACT, "retained = self._retained[workspace_id]\n        intact = "
                         "retained is not None and retained[0] == key")),
        _mutant("retained-remembers-size", "retained",
               "the slot remembers the span's size instead of its start (so the reach "
               "check compares a request with the size)",
               (_INTACT, "intact = self._retained[workspace_id] == (key, num_bytes)"),
               ("self._retained[workspace_id] = (key, start)",
                "self._retained[workspace_id] = (key, num_bytes)")),
        _mutant("retained-start-rounds-up", "retained",
               "the span's start is rounded up, past the buffer's end",
               (_RETAINED_START, _RETAINED_START.replace("round_down", "round_up"))),
        _mutant("retained-start-unaligned", "alignment",
               "the span's start is not rounded to 256 bytes",
               (_RETAINED_START, "start = current_workspace.numel() - num_bytes")),
        _mutant("retained-start-one-early", "retained",
               "an off-by-one puts the span a block early when it would end at the end",
               (_RETAINED_START, _RETAINED_START.replace("num_bytes,", "num_bytes - 1,"))),
        _mutant("retained-padded-span", "retained",
               "the span is a padded block below the aligned end, not the last bytes",
               (_RETAINED_START, "start = round_down(current_workspace.numel(), _VIEW_ALIGNMENT)"
                                 " - round_up(num_bytes, _VIEW_ALIGNMENT)")),
        _mutant("retained-per-ubatch", "slots",
               "get_retained keeps its record per ubatch, forgetting the lane",
               ("        workspace_id = self._get_workspace_id()\n"
                "        current_workspace = self._ensure_workspace_size(num_bytes)\n",
                "        workspace_id = dbo_current_ubatch_id()\n"
                "        current_workspace = self._ensure_workspace_size(num_bytes)\n")),
        # ----- alignment and carving -----
        _mutant("alignment-128", "alignment", "views are padded to 128 bytes, not 256",
               ("_VIEW_ALIGNMENT = 256", "_VIEW_ALIGNMENT = 128")),
        _mutant("offsets-unpadded", "alignment", "offsets add the views' bytes without padding",
               (_SCRATCH_OFFSETS, _SCRATCH_OFFSETS.replace("aligned_bytes[:-1]",
                                                           "actual_bytes[:-1]"))),
        _mutant("offsets-skip-first", "alignment",
               "offsets start after the first view (accumulate without the leading 0)",
               (_SCRATCH_OFFSETS, _SCRATCH_OFFSETS.replace("[0] + aligned_bytes[:-1]",
                                                           "aligned_bytes"))),
        _mutant("growth-to-largest-view", "alignment",
               "the slot grows to the largest view, not the request's total",
               (_SCRATCH_GROWTH, _SCRATCH_GROWTH.replace("(total_bytes)",
                                                         "(max(aligned_bytes))"))),
        _mutant("growth-unpadded", "alignment",
               "the slot grows to the views' bytes without their padding",
               (_SCRATCH_GROWTH, _SCRATCH_GROWTH.replace("(total_bytes)",
                                                         "(sum(actual_bytes))"))),
        _mutant("round-up-overpads", "alignment",
               "round_up adds a block to an exact multiple ((x + y) // y * y)",
               ("return ((x + y - 1) // y) * y", "return ((x + y) // y) * y")),
        # ----- slot selection -----
        _mutant("slot-ubatch-plus-lane", "slots", "the slot index is ubatch + lane",
               ("return dbo_current_ubatch_id() * self._num_lanes + lane",
                "return dbo_current_ubatch_id() + lane")),
        _mutant("slot-times-ubatches", "slots",
               "the slot index multiplies the ubatch by the ubatch count, not the lane count",
               ("return dbo_current_ubatch_id() * self._num_lanes + lane",
                "return dbo_current_ubatch_id() * self._num_ubatches + lane"),
               # the same as the original when both counts are equal
               num_ubatches=2, num_lanes=3),
        _mutant("single-view-unpadded-growth", "alignment",
               "a one-view request grows the slot to its bytes without the padding",
               ("        total_bytes = sum(aligned_bytes)\n\n        # Calculate",
                "        total_bytes = sum(aligned_bytes) if len(actual_bytes) > 1 "
                "else actual_bytes[0]\n\n        # Calculate")),
        # ----- persistent resources -----
        _mutant("persistent-one-cache", "persistent",
               "one resource cache for every slot",
               (_RESOURCE_LOOKUP, "resources = self._persistent_resources[0]")),
        _mutant("persistent-zeroes-every-call", "persistent",
               "zero_init zeroes the tensor on every call, not only when it is made",
               ("        return workspace\n\n    def get_simultaneous",
                "        if zero_init:\n            workspace.zero_()\n"
                "        return workspace\n\n    def get_simultaneous")),
        _mutant("persistent-shape-only", "persistent",
               "a persistent tensor's dtype is not compared",
               (_PERSISTENT_CHECK, "if workspace.shape != shape:")),
        _mutant("persistent-dtype-only", "persistent",
               "a persistent tensor's shape is not compared",
               (_PERSISTENT_CHECK, "if workspace.dtype != dtype:")),
        _mutant("persistent-key-shared", "persistent",
               "persistent tensors share keys with resources (no (torch.Tensor, key))",
               ("            (torch.Tensor, key),\n", "            key,\n")),
        _mutant("persistent-falsy-not-held", "persistent",
               "a resource is looked up by truth, so a falsy one (None, 0, []) is made again",
               ("        if key not in resources:\n            if self._locked:",
                "        if not resources.get(key):\n            if self._locked:")),
        _mutant("persistent-factory-every-call", "persistent",
               "the factory runs on every call; only the first result is kept",
               (_RESOURCE_LOOKUP, _RESOURCE_LOOKUP + "\n        made = factory()"),
               ("            resources[key] = factory()\n", "            resources[key] = made\n")),
        # ----- locking -----
        _mutant("lock-ignores-new-keys", "locking",
               "new persistent keys are made while locked",
               ("            if self._locked:\n                raise AssertionError(\n"
                "                    f\"Workspace is locked but {key!r}",
                "            if False:\n                raise AssertionError(\n"
                "                    f\"Workspace is locked but {key!r}")),
        _mutant("lock-refuses-known-keys", "locking",
               "while locked, even a key the slot holds is refused",
               ("        if key not in resources:\n            if self._locked:",
                "        if self._locked or key not in resources:\n            if self._locked:")),
        _mutant("lock-releases-first", "locking",
               "growth releases the old buffer before checking the lock",
               (_LOCK_CHECK + "\n", ""),
               (_CLEAR_ON_GROWTH, _CLEAR_ON_GROWTH + _LOCK_CHECK)),
        _mutant("lock-only-scratch", "locking",
               "get_retained grows whatever the lock says (the check on one path only)",
               ("        current_workspace = self._ensure_workspace_size(num_bytes)\n",
                "        locked, self._locked = self._locked, False\n"
                "        current_workspace = self._ensure_workspace_size(num_bytes)\n"
                "        self._locked = locked\n")),
        _mutant("lock-regrows-exact-fit", "locking",
               "a request that fits exactly counts as growth (<= for <)",
               ("if current_size < required_bytes:", "if current_size <= required_bytes:")),
        _mutant("unlock-keeps-lock", "locking", "unlock() does not unlock",
               (_UNLOCK, _UNLOCK.replace("= False", "= True"))),
        _mutant("lock-allows-first-buffer", "locking",
               "while locked, a slot that never grew still gets its first buffer",
               ("            if self._locked:\n                raise AssertionError(\n"
                "                    f\"Workspace is locked but allocation from",
                "            if self._locked and current_workspace is not None:\n"
                "                raise AssertionError(\n"
                "                    f\"Workspace is locked but allocation from")),
    ]
}  # fmt: skip

#: The copies' factories by name, for a quick look in a REPL.
FACTORIES: dict[str, Callable[[int, int], Any]] = {
    name: mutant.factory for name, mutant in MUTANTS.items()
}
