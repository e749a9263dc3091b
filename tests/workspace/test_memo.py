"""The memo (``interop/_workspace/_memo.py``): a request is kept on its second sight, in two bounded
generations; its entry is replayed and swapped in when the state moved, never served from a
replaced buffer; each call gets fresh views."""

import numpy as np
import pytest
import torch
from support.helpers import manager
from support.seams import base_of, memo_of, slot_buffer, with_old_generation

import functional_ws as fws
from interop._workspace._memo import (
    AcquiredEntry,
    Memo,
    Memos,
    RetainedEntry,
    last_plans,
    memoise,
    memoise_retained,
    replay_and_swap,
)

F32, U8 = torch.float32, torch.uint8
NP_U8 = np.dtype("uint8")
SLOT = (0, 0)

# ----- through the façade (every allocator) -----


@pytest.mark.usefixtures("allocator")
def test_memo_follows_the_buffer_and_each_call_returns_fresh_views():
    ws = manager()
    first = ws.get_simultaneous(((8,), F32))[0]
    second = ws.get_simultaneous(((8,), F32))[0]
    assert first is not second and first.data_ptr() == second.data_ptr()
    second.requires_grad_()
    first.resize_(2)
    assert not ws.get_simultaneous(((8,), F32))[0].requires_grad
    assert ws.get_simultaneous(((8,), F32))[0].shape == (8,)
    ws.get_simultaneous(((4096,), F32))  # growth replaces the buffer
    (after,) = ws.get_simultaneous(((8,), F32))
    assert after.data_ptr() == base_of(ws) != first.data_ptr()


@pytest.mark.usefixtures("allocator")
def test_memo_is_bounded(monkeypatch):
    monkeypatch.setattr("interop._workspace._memo.MAX_MEMOISED", 4)
    ws = manager()
    for n in range(1, 20):
        ws.get_simultaneous(((n,), U8))
        ws.get_simultaneous(((n,), U8))  # seen twice: memoised
    assert 0 < memo_of(ws).entries() <= 4


@pytest.mark.usefixtures("allocator")
def test_a_request_is_memoised_the_second_time_it_is_seen():
    ws = manager()
    ws.get_simultaneous(((4096,), U8))  # a growth, seen once
    ws.get_simultaneous(((100,), F32))  # a miss, seen once: nothing kept
    assert memo_of(ws).entries() == 0
    first = ws.get_simultaneous(((100,), F32))[0]
    assert memo_of(ws).entries() == 1  # seen twice: memoised
    again = ws.get_simultaneous(((100,), F32))[0]
    assert again.data_ptr() == first.data_ptr() and again is not first


@pytest.mark.usefixtures("allocator")
def test_memo_evicts_the_least_recently_used(monkeypatch):
    monkeypatch.setattr("interop._workspace._memo.MAX_MEMOISED", 8)  # two generations of four
    ws = manager()
    use = with_old_generation(ws)
    use(1)  # used again: back in the young generation
    for n in (6, 7, 8):
        use(n), use(n)  # the young one fills again: 2, 3, 4 (unused) are dropped
    memo = memo_of(ws)

    def kept(n):
        key = (((n,), U8),)
        return key in memo or key in memo.old

    assert kept(1) and kept(5) and kept(8)
    assert not kept(2) and not kept(3) and not kept(4)


# ----- one slot's memo -----


def test_a_key_is_admitted_on_its_second_sight_and_the_record_of_sights_is_bounded():
    memo = Memo(limit=4)
    assert [memo.admits(k) for k in ("a", "a", "b")] == [False, True, False]
    for key in ("c", "d", "e"):  # the record is full at four keys: cleared at the fifth
        memo.admits(key)
    assert memo.seen == {hash("e")}
    assert memo.admits("a") is False  # forgotten with the rest


def test_two_generations_hold_the_entries_and_an_old_one_is_promoted_on_lookup():
    memo = Memo(limit=4)  # two generations of two
    memo.remember("a", 1)
    memo.remember("b", 2)
    memo.remember("c", 3)  # the young generation was full: it becomes the old one
    assert dict(memo) == {"c": 3} and memo.old == {"a": 1, "b": 2} and memo.entries() == 3
    assert memo["a"] == 1  # found in the old generation: moved back to the young one
    assert "a" in dict(memo) and "a" not in memo.old and memo.entries() == 3
    assert memo["z"] is None and memo.promote("z") is None  # a miss raises nothing
    memo.remember("d", 4)  # full again: {"c", "a"} is the old generation, "b" is dropped
    assert dict(memo) == {"d": 4} and memo.old == {"c": 3, "a": 1}


def test_an_unhashable_key_is_served_not_memoised():
    memo = Memo(limit=4)
    memo.remember(["a list"], 1)
    memo.remember("b", 2)
    memo.remember("c", 3)
    assert memo.entries() == 2 and memo.promote(["a list"]) is None


def test_the_smallest_bound_is_two():
    assert Memo(limit=0).limit == 2 and Memo().limit == 16384


# ----- memoising a request -----


def _carved(ws_bytes=512):
    buffer = torch.zeros(ws_bytes, dtype=U8)
    return [buffer[:400].view(F32)]


def test_memoise_keeps_a_plain_request_seen_before_and_hands_out_fresh_views():
    state, layout = fws.acquire(fws.initial_state(), SLOT, ((100,), F32))
    specs = (((100,), F32),)
    carved = _carved()
    memo = Memo()
    first = memoise(memo, specs, layout, carved, state, None)  # first sight: not kept
    assert memo.entries() == 0 and memo.last is layout
    assert first[0] is not carved[0] and first[0].data_ptr() == carved[0].data_ptr()
    second = memoise(memo, specs, layout, carved, state, None)  # second sight: kept
    entry = memo[specs]
    assert isinstance(entry, AcquiredEntry) and entry.state is state
    assert entry.plan is memo.last and entry.plan == layout.without_growth()
    assert second[0] is not first[0] and entry.fresh()[0].data_ptr() == carved[0].data_ptr()


def test_memoise_keeps_nothing_refused_or_not_plain():
    state, layout = fws.acquire(fws.initial_state(), SLOT, ((100,), F32))
    memo = Memo()
    for _ in range(3):
        memoise(memo, (((100,), F32),), layout, _carved(), state, False)  # refused
        memoise(memo, (([100],), F32), layout, _carved(), state, True)  # a list shape
        memoise(memo, (((np.int64(100),), F32),), layout, _carved(), state, True)
    assert memo.entries() == 0


def test_memoise_retained_keeps_a_plain_request_seen_before():
    state, span, _ = fws.retain(fws.initial_state(), SLOT, "kv", ((16,), F32))
    view = torch.zeros(16)
    memo = Memo()
    for _ in range(2):
        memoise_retained(memo, ("kv", (16,), F32), span, view, state)
        memoise_retained(memo, ("kv", [16], F32), span, view, state)  # a list: not plain
    entry = memo[("kv", (16,), F32)]
    assert memo.entries() == 1 and isinstance(entry, RetainedEntry)
    assert entry.view is view and entry.plan is span and memo.last is span


def test_last_plans_plan_a_request_served_the_short_way():
    state = fws.initial_state(num_ubatches=2)
    memos = [Memo(0), Memo(1)]
    memos[1].last = (((100,), F32),)  # served by the short way: planned now, in its slot
    plans = last_plans(state, memos)
    assert list(plans) == [(1, 0)] and plans[(1, 0)] == fws.fast_paths.layout_of(
        state, (1, 0), (((100,), F32),)
    )


# ----- replaying an entry on a moved state -----


class Engine:
    """A compare-and-swap that records its calls and answers ``accepts``."""

    def __init__(self, accepts=True):
        self.accepts = accepts
        self.swaps = []

    def swap(self, old, new):
        self.swaps.append((old, new))
        return self.accepts

    def generation(self, index):
        return 0  # every entry here is of the buffer the slot has


def _entry():
    grown, layout = fws.acquire(fws.initial_state(), SLOT, ((100,), NP_U8))
    return grown, AcquiredEntry(layout.without_growth(), lambda: [])


def test_a_replay_that_leaves_the_state_serves_without_a_swap():
    state, entry = _entry()
    memo, engine = Memo(), Engine()
    assert replay_and_swap(engine, memo, entry, state) is True
    assert entry.state is state and engine.swaps == [] and memo.last is entry.plan


def test_a_replay_that_moves_the_state_swaps_it_in_and_is_remembered(monkeypatch):
    grown, entry = _entry()
    tailed, _, _ = fws.retain(grown, SLOT, "kv", ((16,), NP_U8))  # the request clobbers it
    memo, engine = Memo(), Engine()
    assert replay_and_swap(engine, memo, entry, tailed) is True
    ((old, new),) = engine.swaps
    assert old is tailed and new is not tailed and entry.moved == (tailed, new, True)

    def no_replay(*args):
        raise AssertionError("replayed again")

    monkeypatch.setattr(AcquiredEntry, "replay", staticmethod(no_replay))
    assert replay_and_swap(engine, memo, entry, tailed) is True  # from the remembered move
    assert engine.swaps[1] == (tailed, new)


def test_the_slow_path_serves_a_lost_swap_a_growth_or_a_dead_memo():
    grown, entry = _entry()
    tailed, _, _ = fws.retain(grown, SLOT, "kv", ((16,), NP_U8))
    assert replay_and_swap(Engine(accepts=False), Memo(), entry, tailed) is None
    assert replay_and_swap(Engine(), Memo(), entry, fws.initial_state()) is None  # must grow
    dead = Memo()
    dead.dead = True
    engine = Engine()
    assert replay_and_swap(engine, dead, entry, grown) is None and engine.swaps == []


def test_an_entry_memoised_after_another_calls_growth_never_serves_the_old_buffer():
    """A growth between a call's carving and its memoising (another thread's) puts an
    entry of the retired buffer in the new memo: the generation check keeps it unused."""
    ws = manager()
    request = ((64,), F32)
    ws.get_simultaneous(request)  # seen once
    engine = ws._server.engine
    real, grown = engine.serve, []

    def serve(*args, **kwargs):
        served = real(*args, **kwargs)
        if not grown:  # the slot grows right after this call's views are carved
            grown.append(ws.get_simultaneous(((100_000,), U8)))
        return served

    engine.serve = serve
    try:
        ws.get_simultaneous(request)  # seen twice: memoised with its views
    finally:
        engine.serve = real
    (view,) = ws.get_simultaneous(request)
    buffer = slot_buffer(ws)
    assert buffer.data_ptr() <= view.data_ptr() < buffer.data_ptr() + buffer.numel()


def test_a_retained_entry_replays_with_its_intact_flag():
    grown, _, _ = fws.retain(fws.initial_state(), SLOT, "kv", ((16,), NP_U8))
    state, span, _ = fws.retain(grown, SLOT, "kv", ((16,), NP_U8))  # the span, no growth
    entry = RetainedEntry(span, torch.zeros(16, dtype=U8))
    assert replay_and_swap(Engine(), Memo(), entry, state) is True  # intact: nothing moved
    clobbered, _ = fws.acquire(state, SLOT, ((256,), NP_U8))
    engine = Engine()
    assert replay_and_swap(engine, Memo(), entry, clobbered) is False  # served, not intact
    assert entry.moved[2] is False


# ----- every slot's memos -----


def test_retiring_a_slot_replaces_both_its_memos_even_empty():
    # An empty memo is replaced too: a call that carved from the old buffer may still try
    # to insert its entry, and must find the memo it holds dead (issue 20 #1).
    memos = Memos(count=4, num_lanes=2)
    acquired = memos.acquired[3]
    acquired.remember("k", 1)
    acquired.last, acquired.seen = "plan", {7}
    empty = memos.retained[3]
    dead = []
    memos.retire(3, dead)
    fresh = memos.acquired[3]
    assert dead == [acquired, empty]  # for the engine to empty once it holds no lock
    assert acquired.dead and acquired.entries() == 1
    assert fresh is not acquired and not fresh.dead and fresh.index == 3
    assert memos.acquired_at[1][1] is fresh  # the [ubatch][lane] table follows
    assert fresh.last == "plan" and fresh.seen == {7} and fresh.entries() == 0
    assert empty.dead and memos.retained[3] is not empty and memos.retained_at[1][1] is not empty
    empty.remember("late", 1)
    assert empty.entries() == 0 and memos.retained[3].entries() == 0
    assert memos.acquired[2] is memos.acquired_at[1][0] and not memos.acquired[2].dead


def test_a_retired_memos_successor_is_an_empty_memo_of_the_same_slot_that_keeps_its_limit():
    memos = Memos(count=6, num_lanes=1)
    memo = memos.acquired_at[5][0] = Memo(5, limit=4)
    memo.remember("a", 1)
    memo.remember("b", 2)
    memo.remember("c", 3)  # two generations of two: "a" and "b" went to the old one
    memo.last, memo.seen = "plan", {7}
    dead = []
    memos.retire(5, dead)
    fresh = memos.acquired_at[5][0]
    assert type(fresh) is Memo and fresh.index == 5 and fresh.limit == 4
    assert fresh.entries() == 0 and not fresh.old and not fresh.dead
    assert fresh.last == "plan" and fresh.seen is memo.seen
    assert fresh.get("c") is None and fresh["a"] is None  # nothing carried over
    for key in "wxyz":
        fresh.remember(key, key)
    assert fresh.entries() == 4 and len(fresh) == 2  # bounded as its predecessor was
    assert memo.dead and memo in dead  # the predecessor: the engine empties it
