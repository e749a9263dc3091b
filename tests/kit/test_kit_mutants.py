"""The kit's mutation score: every planted bug of ``tests/support/mutants.py`` is found.

Each mutant is a copy of the original's algorithm (``interop.testing._reference``) with one
realistic mistake; ``check_workspace`` must raise ``AssertionError`` for every one of them,
and must pass the unmodified copy, in the same configuration (two ubatches by two lanes,
every family but absolute alignment, no zero-byte request). The runs use the loaded profile
(``ci`` under ``make test``: derandomized, so the same calls on every machine) and stop at
the first failing example: whether a bug is found is decided by the examples generated, and
shrinking the failure (checked for the planted bugs of ``tests/support/managers.py`` in
``test_interop_testing.py``) would triple the time. How often fresh random runs find each
bug is ``benchmarks/kit_mutation_score.py``'s to measure.
"""

import pytest
import torch
from hypothesis import Phase, settings
from support import mutants as _mutants

from interop.testing import ReferenceWorkspaceManager, check_workspace
from interop.testing._check import _default

#: The loaded profile, generation only, one failure.
FIND = settings(_default(), phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False)


@pytest.mark.parametrize("name", list(_mutants.MUTANTS))
def test_every_planted_bug_is_found(name):
    mutant = _mutants.MUTANTS[name]
    with pytest.raises(AssertionError):
        check_workspace(mutant.factory, settings=FIND, **mutant.kwargs())


def test_the_unmodified_copy_passes():
    original = _mutants.ORIGINAL
    check_workspace(original.factory, settings=_default(), **original.kwargs())


def test_every_area_has_bugs():
    areas = {m.area for m in _mutants.MUTANTS.values()}
    assert areas == {"retained", "alignment", "slots", "persistent", "locking"}


def test_an_edit_that_no_longer_matches_is_reported():
    with pytest.raises(AssertionError, match=r"matches 0 times in _reference\.py"):
        _mutants.source_of((("this text is not in the reference", ""),))


def test_a_copy_is_independent_of_the_reference():
    copy = _mutants.MUTANTS["alignment-128"].manager_class
    assert copy is not ReferenceWorkspaceManager
    a, b = copy(torch.device("cpu")).get_simultaneous(((1,), torch.uint8), ((1,), torch.uint8))
    assert b.data_ptr() - a.data_ptr() == 128  # the copy's own _VIEW_ALIGNMENT
    a, b = ReferenceWorkspaceManager(torch.device("cpu")).get_simultaneous(
        ((1,), torch.uint8), ((1,), torch.uint8)
    )
    assert b.data_ptr() - a.data_ptr() == 256


def test_the_readme_counts_the_planted_bugs():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (count,) = re.findall(r"The kit's own test finds each of (\d+)\n?bugs planted", readme)
    assert int(count) == len(_mutants.MUTANTS)
