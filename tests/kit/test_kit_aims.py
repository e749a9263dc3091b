"""The kit's aimed strategies make the requests they promise (``interop.testing._aims``)."""

import torch
from hypothesis import find, given
from hypothesis import strategies as st

from functional_ws.testing import WorkspaceModel
from interop.testing._aims import (
    ALIGNMENT,
    AT_START,
    BLOCK_BEFORE,
    FAR_IN,
    ONE_BLOCK_IN,
    Aims,
    other_sizes,
    padded_request,
    round_up,
)
from interop.testing._machine_base import SCRATCH_DTYPES
from interop.testing._tracking import SlotTrack


@st.composite
def totals_and_requests(draw):
    alignment = draw(st.sampled_from([ALIGNMENT, 8, 16, 512]))
    total = draw(st.integers(0, 12)) * alignment
    return total, alignment, draw(padded_request(total, SCRATCH_DTYPES, alignment))


@given(totals_and_requests())
def test_a_padded_request_adds_up_to_its_total(case):
    total, alignment, request = case
    sizes = [dtype.itemsize * shape[0] for shape, dtype in request]
    assert sum(round_up(n, alignment) for n in sizes) == total
    assert 1 <= len([n for n in sizes if n]) <= 3 or total == 0
    for shape, dtype in request:
        assert isinstance(dtype, torch.dtype) and len(shape) == 1


@given(st.integers(1, 2000), st.integers(1, 4000), st.sampled_from([ALIGNMENT, 512]), st.data())
def test_other_sizes_differ_and_stay_near(previous, served, alignment, data):
    n = data.draw(other_sizes(previous, served, alignment))
    assert n != previous and 1 <= n <= max(served + alignment, previous + alignment)


def _aims(alignment, served, span):
    """Aims at one slot whose buffer served ``served`` bytes, its last span ``span`` bytes."""
    track = SlotTrack(served=served, last_retained=("k", ((span,), torch.uint8)))
    model = WorkspaceModel(1, 1, alignment, "slot")
    return Aims([(0, 0)], [track], model, SCRATCH_DTYPES, ["k"], 0, alignment)


def test_the_aims_count_in_the_alignment_they_are_given():
    """At 512 the span starts at a multiple of 512 and the aimed totals are a block (512
    bytes) apart; resized spans reach up to a block less a byte past what was served."""
    aims = _aims(512, 4096, 1024)
    assert aims.span_start((0, 0)) == 3072
    wheres = (AT_START, BLOCK_BEFORE, ONE_BLOCK_IN, FAR_IN)
    assert [aims.totals_near_start((0, 0), w) for w in wheres] == [[3072], [2560], [3584], [4096]]
    assert _aims(512, 4000, 1000).totals_near_start((0, 0), ONE_BLOCK_IN) == [3072]
    resized = find(aims.resized(), lambda aim: aim[2][0][0] == 4096 + 511)
    assert resized == ((0, 0), "k", ((4607,), torch.uint8))
