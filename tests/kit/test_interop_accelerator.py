"""interop.testing.no_accelerator_cache: a verbatim copy of vLLM's class, checked on CPU-only torch.

vLLM's class calls ``torch.accelerator.empty_cache()`` on every growth, which raises on a
CPU-only torch. The repository does not carry vLLM's code: the verbatim copy's one call the
kit's reference leaves out is put back by patching the reference's ``_empty_accelerator_cache``
to call ``torch.accelerator.empty_cache()`` unconditionally, as the seed does.
"""

import pytest
import torch
from support import managers as m
from test_interop_testing import ALL_BUT_ABSOLUTE, ONE_BUG, ORIGINAL_SLOTS

import interop.testing._reference as reference
from interop.testing import check_workspace, no_accelerator_cache

#: Skips a test that needs torch without an accelerator (the original's growth raises there).
cpu_only_torch = pytest.mark.skipif(
    torch.accelerator.is_available(), reason="an accelerator is present: empty_cache works"
)
REAL = (torch.accelerator.empty_cache, torch.cuda.empty_cache)


def _empty_cache_raises() -> bool:
    """Whether the bare call raises here: on a CPU-only *build* of torch. A CUDA build on a
    machine without a GPU has no device either, yet its empty_cache() is a silent no-op."""
    try:
        torch.accelerator.empty_cache()
    except RuntimeError:
        return True
    return False


#: Skips a test that needs the bare cache call to raise (a CPU-only build of torch).
cache_call_raises = pytest.mark.skipif(
    not _empty_cache_raises(), reason="torch.accelerator.empty_cache() does not raise here"
)


def _as_the_seed_grows(monkeypatch, calls):
    """The reference's one deliberate difference undone: every growth calls
    ``torch.accelerator.empty_cache()``, as a verbatim copy of vLLM's class does."""

    def empty_cache():
        calls.append("torch.accelerator.empty_cache()")
        torch.accelerator.empty_cache()

    monkeypatch.setattr(reference, "_empty_accelerator_cache", empty_cache)


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


@cache_call_raises
def test_without_it_the_cache_call_raises_on_cpu_only_torch():
    with pytest.raises(RuntimeError, match="Cannot access accelerator device"):
        torch.accelerator.empty_cache()


@cache_call_raises
def test_a_verbatim_growth_cannot_be_checked_on_cpu_only_torch(monkeypatch):
    _as_the_seed_grows(monkeypatch, [])
    with pytest.raises(AssertionError, match="raised RuntimeError: Cannot access accelerator"):
        check_workspace(m.LiteralOriginal, properties=["shapes"], empty_requests=False)


@cpu_only_torch
def test_a_verbatim_growth_is_checked_under_no_accelerator_cache(monkeypatch):
    calls = []
    _as_the_seed_grows(monkeypatch, calls)
    with no_accelerator_cache() as replaced:
        check_workspace(
            m.LiteralOriginal, properties=ALL_BUT_ABSOLUTE, empty_requests=False, **ORIGINAL_SLOTS
        )
        # ... and the zero-byte crash is still found, as one failure naming the call
        with pytest.raises(AssertionError, match=r"^get_simultaneous\(\(\(0,\), "):
            check_workspace(m.LiteralOriginal, properties=["shapes"], settings=ONE_BUG)
    assert replaced and calls
    assert (torch.accelerator.empty_cache, torch.cuda.empty_cache) == REAL
