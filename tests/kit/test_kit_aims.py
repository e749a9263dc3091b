"""The kit's aimed strategies make the requests they promise (``interop.testing._aims``)."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from interop.testing._aims import ALIGNMENT, other_sizes, padded_request, round_up
from interop.testing._machine_base import SCRATCH_DTYPES


@st.composite
def totals_and_requests(draw):
    alignment = draw(st.sampled_from([ALIGNMENT, 16, 512]))
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
