"""interop.testing.no_accelerator_cache: torch's cache calls become no-ops without an accelerator.

vLLM's class calls ``torch.accelerator.empty_cache()`` on every growth, which raises on a
CPU-only torch.
"""

import pytest
import torch

from interop.testing import no_accelerator_cache

#: Skips a test that needs torch without an accelerator (the original's growth raises there).
cpu_only_torch = pytest.mark.skipif(
    torch.accelerator.is_available(), reason="an accelerator is present: empty_cache works"
)
REAL = (torch.accelerator.empty_cache, torch.cuda.empty_cache)


def test_no_accelerator_cache_nests_and_restores():
    with no_accelerator_cache() as outer:
        with no_accelerator_cache() as inner:
            torch.accelerator.empty_cache()  # a no-op here, or the real call with a device
            torch.cuda.empty_cache()
        assert inner == outer == (not torch.accelerator.is_available())
        torch.accelerator.empty_cache()
    assert (torch.accelerator.empty_cache, torch.cuda.empty_cache) == REAL
    with pytest.raises(ZeroDivisionError), no_accelerator_cache():
        1 / 0  # noqa: B018
    assert (torch.accelerator.empty_cache, torch.cuda.empty_cache) == REAL


@cpu_only_torch
def test_without_it_the_cache_call_raises_on_cpu_only_torch():
    with pytest.raises(RuntimeError, match="Cannot access accelerator device"):
        torch.accelerator.empty_cache()
