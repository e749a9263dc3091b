"""``torch.compile`` around code that calls ``to_jax`` and ``to_torch``.

Default mode: the eager results, the handoff and JAX's own calls running eagerly at graph
breaks. ``fullgraph=True``: refused, with advice naming what to do. Few, small compiles.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
import torch

import interop
from interop._jax import HANDOFF_ADVICE


def handoff(x):
    a = interop.to_jax(x * 2)
    return interop.to_torch(jnp.sin(a) * 2) + 1


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_default_mode_gives_the_eager_results(backend):
    x = torch.linspace(-1, 1, 5)
    assert torch.allclose(torch.compile(handoff, backend=backend)(x), handoff(x))


def test_fullgraph_refuses_the_bare_handoff_with_advice():
    compiled = torch.compile(handoff, backend="eager", fullgraph=True)
    with pytest.raises(RuntimeError) as caught:
        compiled(torch.ones(3))
    assert HANDOFF_ADVICE in str(caught.value)
