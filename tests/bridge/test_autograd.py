"""The torch side of the differentiable call: which leaves are differentiated, compact
cotangents, results that are inputs."""

from __future__ import annotations

import pytest
import torch

from interop._bridge import _autograd, _exchange


@pytest.mark.parametrize(
    ("leaf", "expected"),
    [
        (torch.ones(2, requires_grad=True), True),
        (torch.ones(2, dtype=torch.complex64, requires_grad=True), True),
        (torch.ones(2), False),
        (torch.ones(2, dtype=torch.int32), False),
        (2.0, False),
    ],
    ids=["float-grad", "complex-grad", "float", "int", "number"],
)
def test_which_leaves_are_differentiated(leaf, expected):
    assert _autograd.is_differentiated(leaf) is expected


@pytest.mark.parametrize(
    ("grad", "shape"),
    [
        (torch.ones(()).expand(3, 4), (1, 1)),
        (torch.ones(1, 4).expand(3, 4), (1, 4)),
        (torch.ones(3, 1).expand(3, 4), (3, 1)),
        (torch.ones(3, 4), (3, 4)),
    ],
    ids=["scalar", "rows", "columns", "dense"],
)
def test_broadcast_cotangents_go_over_compact_and_aliased(grad, shape):
    array = _exchange.cotangent_to_jax(grad)
    assert array.shape == shape and array.unsafe_buffer_pointer() == grad.data_ptr()


def test_a_layout_jax_cannot_alias_is_made_dense():
    grad = torch.arange(8.0)[::2]
    assert _exchange.cotangent_to_jax(grad).tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_result_over_an_input_is_that_input():
    x, other = torch.ones(4), torch.zeros(4)
    assert _autograd._as_input(x.view(4), [other, x]) is x
    reshaped = _autograd._as_input(x.view(2, 2), [x])  # same bytes, another shape: a copy
    assert reshaped is not x and reshaped.data_ptr() != x.data_ptr()
    assert _autograd._as_input(other * 1, [x]).data_ptr() != x.data_ptr()
