"""The façade's request paths where a planted bug went unnoticed (a planted-bug round on
``_facade.py``, ``_memo.py``, ``_carving.py``, ``_engine.py``, ``_serving.py`` and
``_requests.py``): each test pins a behaviour a caller relies on that no other test held.

- A memoised single-view request served by the hot path's one-view shortcut hands out a
  fresh tensor on every call, as the original's slice-view-reshape did: what a caller does
  to one call's view never reaches the next call's.
- The hot path checks the dims of every pair of a memoised request, not only the
  first's: ``((4,), f32), ((True,), f32)`` equals a memoised ``((4,), f32), ((1,), f32)``
  and must still be refused.
- ``last_layouts`` (what the pictures draw) shows the slot's last request when that
  request was a memoised hit on a state the previous request left unchanged.
- A ``get_simultaneous`` request found only in the memo's old generation is promoted
  back (its entry moves, as ``_memo.py`` says), not planned and memoised a second time
  beside the old entry (which would double-count the bound and re-carve).
- With an old generation beside it, the memo still admits a request only on its second
  sight: a request seen once costs no memory.
- ``last_spans`` shows the slot's last ``get_retained`` when it was a memoised hit on a
  state the previous retained request (same key and start) left unchanged.
- ``try_get_simultaneous`` returns ``None`` only for a lock refusal: a request that can
  never fit (above the device's memory) raises ``CapacityLimitError`` as
  ``get_simultaneous`` does ("other errors are raised as usual").
- A first sighting (the miss path written out in ``Engine.fit_and_carve``) installs its
  state only if no other call changed it while it planned (compare-and-swap, else planned
  again over what the other call did): another slot's growth made meanwhile is kept.
- ``get_retained`` hands out a fresh tensor on its slow path too (the second sight, which
  memoises the carved view): what the caller does to it never reaches the memoised view.
"""

from __future__ import annotations

import pytest
import torch
from support.helpers import manager
from support.seams import in_slot_buffer, inconsistencies, memo_of, with_old_generation

import interop._workspace._engine as engine_module
from interop import CapacityLimitError, use_workspace_ubatch

F32, U8 = torch.float32, torch.uint8


# ----- get_simultaneous -----


@pytest.mark.usefixtures("allocator")
def test_a_memoised_single_view_hit_hands_out_a_fresh_tensor_each_call():
    ws = manager()
    for _ in range(3):  # first sight, second sight (memoised), then a hit
        ws.get_simultaneous(((8,), F32))
    (a,) = ws.get_simultaneous(((8,), F32))  # hits: the one-view shortcut
    (b,) = ws.get_simultaneous(((8,), F32))
    assert a is not b and a.data_ptr() == b.data_ptr() and not a._is_view()
    a.requires_grad_()  # what the caller does to one call's view ...
    b.resize_(2)
    (c,) = ws.get_simultaneous(((8,), F32))
    assert c is not a and c is not b  # ... never reaches the next call's
    assert c.shape == (8,) and not c.requires_grad and c.is_leaf


@pytest.mark.parametrize("dim", [True, 1.0], ids=["bool", "float"])
def test_a_memoised_request_checks_the_dims_of_every_pair(dim):
    ws = manager()
    request = (((4,), F32), ((1,), F32))
    for _ in range(3):  # memoised, then a hit
        ws.get_simultaneous(*request)
    bad = (((4,), F32), ((dim,), F32))
    assert bad == request and hash(bad) == hash(request)
    before = ws.state
    with pytest.raises(ValueError, match=r"shapes_and_dtypes\[1\] shape"):
        ws.get_simultaneous(*bad)
    assert ws.state is before  # refused: nothing changed
    a, b = ws.get_simultaneous(*request)  # the memoised request is still served
    assert a.shape == (4,) and b.shape == (1,)


@pytest.mark.usefixtures("allocator")
def test_last_layouts_shows_a_hit_served_on_an_unchanged_state():
    ws = manager()
    big = ((256,), F32)  # 1 KiB
    for _ in range(2):  # memoised
        ws.get_simultaneous(big)
    before = ws.state
    ws.get_simultaneous(((4,), U8), ((4,), U8))  # fits below the high-water mark
    assert ws.state is before  # the state did not move: the next call hits at once
    assert [s.shape for s in ws.last_layouts[(0, 0)].specs] == [(4,), (4,)]
    ws.get_simultaneous(big)  # the hit
    layout = ws.last_layouts[(0, 0)]
    assert [s.shape for s in layout.specs] == [(256,)] and layout.offsets == (0,)


def test_a_request_kept_in_the_old_generation_is_promoted_not_memoised_again(monkeypatch):
    monkeypatch.setattr("interop._workspace._memo.MAX_MEMOISED", 8)  # generations of four
    ws = manager()
    use = with_old_generation(ws)
    memo = memo_of(ws)
    key = (((1,), U8),)
    entry = memo.old[key]
    (view,) = use(1)  # found in the old generation
    assert key not in memo.old and memo[key] is entry and memo.entries() == 5
    assert view.shape == (1,) and memo.last is entry.plan


def test_with_an_old_generation_a_request_seen_once_is_still_not_memoised(monkeypatch):
    monkeypatch.setattr("interop._workspace._memo.MAX_MEMOISED", 8)  # generations of four
    ws = manager()
    ws.get_simultaneous(((4096,), U8))
    for n in (1, 2, 3, 4, 5):
        ws.get_simultaneous(((n,), U8))
        ws.get_simultaneous(((n,), U8))  # memoised; at 5, 1-4 become the old generation
    memo = memo_of(ws)
    assert memo.old and memo.entries() == 5
    (view,) = ws.get_simultaneous(((9,), U8))  # seen once
    key = (((9,), U8),)
    assert view.shape == (9,) and key not in memo and key not in memo.old
    assert memo.entries() == 5
    ws.get_simultaneous(((9,), U8))  # seen twice: memoised now
    assert key in memo and memo.entries() == 6


@pytest.mark.parametrize("seen", [1, 3], ids=["first sight", "memoised"])
def test_try_get_simultaneous_raises_a_request_that_can_never_fit(seen):
    ws = manager()
    huge = ((ws.state.max_capacity + 1,), U8)
    for _ in range(seen):
        ws.get_simultaneous(((16,), U8))
    before = ws.state
    with pytest.raises(CapacityLimitError, match="can never fit"):
        ws.try_get_simultaneous(huge)
    assert ws.state is before
    ws.lock()  # locked and too small: the lock refusal is the one that gives None
    assert ws.try_get_simultaneous(((4096,), U8)) is None


@pytest.mark.usefixtures("allocator")
def test_a_first_sighting_overtaken_while_it_plans_keeps_the_other_calls_state(monkeypatch):
    ws = manager(num_ubatches=2)
    ws.get_simultaneous(((1024,), U8))  # slot (0, 0): 1 KiB, so the next request fits
    real_fit, overtaken = engine_module.fit, []

    def fit(state, index, nbytes, **kwargs):  # another thread's call lands as this one plans
        planned = real_fit(state, index, nbytes, **kwargs)
        if not overtaken:
            overtaken.append(True)
            with use_workspace_ubatch(1):
                ws.get_simultaneous(((4096,), U8))  # grows slot (1, 0)
        return planned

    monkeypatch.setattr(engine_module, "fit", fit)
    (view,) = ws.get_simultaneous(((16,), U8))  # a first sighting in slot (0, 0)
    assert overtaken and view.shape == (16,) and in_slot_buffer(ws, view)
    assert ws.state.capacity((1, 0)) == 4096 and not inconsistencies(ws)


# ----- get_retained -----


@pytest.mark.usefixtures("allocator")
def test_last_spans_shows_a_retained_hit_served_on_an_unchanged_state():
    ws = manager()
    ws.get_simultaneous(((1024,), U8))
    for _ in range(2):
        ws.get_retained("kv", (4,), F32)  # memoised
    before = ws.state
    _, intact = ws.get_retained("kv", (8,), F32)  # the same key at the same start
    assert intact and ws.state is before  # the state did not move
    assert ws.last_spans[(0, 0)].spec.shape == (8,)
    _, intact = ws.get_retained("kv", (4,), F32)  # the hit
    assert intact and ws.last_spans[(0, 0)].spec.shape == (4,)


@pytest.mark.usefixtures("allocator")
def test_get_retained_hands_out_a_fresh_tensor_on_its_slow_path_too():
    ws = manager()
    ws.get_simultaneous(((1024,), U8))
    first, _ = ws.get_retained("kv", (4,), F32)  # first sight
    second, intact = ws.get_retained("kv", (4,), F32)  # second sight: memoised
    assert intact and not second._is_view() and not first._is_view()
    second.resize_(1)  # the caller's tensor, not the memo's
    second.requires_grad_()
    third, intact = ws.get_retained("kv", (4,), F32)  # a hit: the memoised view
    assert intact and third is not second
    assert third.shape == (4,) and not third.requires_grad
    assert third.data_ptr() == first.data_ptr()
