"""The torch side of the differentiable call: which leaves are differentiated, compact
cotangents, results that are inputs."""

from __future__ import annotations

import pytest
import torch

import interop
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


def test_a_result_over_an_input_is_a_view_of_that_input():
    x = torch.ones(4)
    got = _exchange.as_input(x.view(4), x)
    assert got._base is x and got.data_ptr() == x.data_ptr()
    x.add_(1)  # one version counter: torch sees writes through either
    assert got._version == x._version
    reshaped = _exchange.as_input(x.view(2, 2), x)  # same bytes, another shape: a copy
    assert reshaped is not x and reshaped.data_ptr() != x.data_ptr()


def test_an_input_jax_does_not_differentiate_returned_as_is_gets_a_buffer_of_its_own():
    """Only a differentiated input returned as is stays a view (its tangent and gradient
    are its own); another one's bytes under a second tensor would keep a second version
    counter, so it is copied."""
    v, w = torch.ones(4, requires_grad=True), torch.full((4,), 2.0)
    same, doubled = interop.jax_call(lambda v, w: (w, v * 2))(v, w)
    assert same.data_ptr() != w.data_ptr() and same.tolist() == [2.0] * 4
    doubled.sum().backward()
    assert v.grad.tolist() == [2.0] * 4


@pytest.mark.parametrize("n_args", [1, 2])
def test_an_eager_function_may_return_a_differentiated_input_as_is(n_args):
    """torch refuses to save for the backward an input a Function returned as is."""
    if n_args == 1:
        call, args = interop.jax_call(lambda v: v), (torch.ones(4, requires_grad=True),)
    else:
        call = interop.jax_call(lambda v, w: (w, v * 2))
        args = (torch.ones(4, requires_grad=True), torch.ones(4, requires_grad=True))
    out = call(*args)
    first = out if n_args == 1 else out[0]
    assert first.data_ptr() == args[-1].data_ptr()  # still an alias: no copy
    (first.sum() * 3 + (0 if n_args == 1 else out[1].sum())).backward()
    assert args[-1].grad.tolist() == [3.0] * 4
    if n_args == 2:
        assert args[0].grad.tolist() == [2.0] * 4
