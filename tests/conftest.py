"""Shared test configuration: Hypothesis profiles, the test device, the allocator fixture.

``ci`` (the default, used by ``make test``): derandomized, a fixed budget, so runs on a noisy
2-core machine are reproducible. ``dev``: deeper, random; ``HYPOTHESIS_PROFILE=dev pytest``.
The façade's tests run on :data:`TEST_DEVICE` (``FUNCTIONAL_WS_TEST_DEVICE=cuda`` runs them on
a GPU; a test module takes it with ``from conftest import TEST_DEVICE``). The ``allocator``
fixture runs a test once per workspace allocator.
"""

import os

import pytest
import torch
from support.allocators import ALLOCATORS, CHOSEN

from functional_ws.testing import register_profiles

# The kits' own profiles (functional_ws.testing.register_profiles), as a user loads them.
register_profiles(load=os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _test_device() -> torch.device:
    """``FUNCTIONAL_WS_TEST_DEVICE`` as a torch device (``cpu`` when unset)."""
    name = os.environ.get("FUNCTIONAL_WS_TEST_DEVICE", "cpu")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise pytest.UsageError(
            f"FUNCTIONAL_WS_TEST_DEVICE={name!r} is not a torch device ({err}); "
            "use e.g. cpu or cuda."
        ) from None


#: The device the façade's tests run on.
TEST_DEVICE = _test_device()
#: Marks a test that runs only with ``FUNCTIONAL_WS_TEST_DEVICE=cuda`` on a CUDA machine.
needs_cuda = pytest.mark.skipif(
    TEST_DEVICE.type != "cuda" or not torch.cuda.is_available(),
    reason="needs FUNCTIONAL_WS_TEST_DEVICE=cuda and a CUDA device",
)


@pytest.fixture(params=list(ALLOCATORS))
def allocator(request, monkeypatch):
    """Run the test once per allocator (``tests/support/allocators.py``); yields its id."""
    monkeypatch.setitem(CHOSEN, "allocator", ALLOCATORS[request.param])
    return request.param


@pytest.fixture(autouse=True)
def _no_torch_mode_left_on():
    """Fail a test that leaves a torch function or dispatch mode on (``set_default_device``
    restored with the ``cpu`` it read, where ``None`` clears it): every later test would
    run the library's paths for modes. The modes are cleared, so only that test fails."""
    yield
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    left = [*_get_current_function_mode_stack(), *_get_current_dispatch_mode_stack()]
    if not left:
        return
    torch.set_default_device(None)
    while _get_current_function_mode_stack():
        torch._C._pop_torch_function_stack()
    while _get_current_dispatch_mode_stack():
        torch._C._pop_torch_dispatch_stack()
    pytest.fail(f"the test left torch modes on: {[type(m).__name__ for m in left]}")


def enable_x64():
    """JAX's 64-bit mode inside a ``with`` block: ``jax.enable_x64`` where this jax has it,
    ``jax.experimental.enable_x64`` on older releases."""
    import jax
    import jax.experimental

    context = getattr(jax, "enable_x64", None)  # a config state on jax 0.10: no bool()
    return (jax.experimental.enable_x64 if context is None else context)(True)
