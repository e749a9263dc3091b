"""WorkspaceState as a value: frozen, hashable, a leafless JAX pytree, readable."""

import dataclasses
import json

import jax
import numpy as np
import pytest

import functional_ws as fws

U8 = np.dtype("uint8")


def _state():
    s = fws.initial_state(num_ubatches=2)
    s, _ = fws.acquire(s, (0, 0), ((1000,), U8))
    s, _, _ = fws.retain(s, (0, 0), "kv", ((10,), U8))
    return fws.claim(s, (1, 0), ("scales", 3))[0]


def test_frozen_and_hashable():
    s = _state()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.locked = True  # type: ignore[misc]
    assert {s: 1}[_state()] == 1


def test_pytree_has_no_leaves_and_keeps_every_field():
    s = _state()
    leaves, treedef = jax.tree_util.tree_flatten(s)
    assert leaves == []  # planning data is static metadata, decided at trace time
    assert jax.tree_util.tree_unflatten(treedef, leaves) == s
    assert jax.tree_util.tree_map(lambda x: 2 * x, s) == s  # nothing to map over


def test_jit_plans_at_trace_time_and_returns_the_state():
    traces = []

    @jax.jit
    def step(state):
        traces.append(state)
        state, layout = fws.acquire(state, (0, 0), ((3 * 2**30,), U8))  # 3 GiB, x64 off
        state, _span, _intact = fws.retain(state, (1, 0), "kv", ((10,), U8))
        return fws.lock(state), layout, jax.numpy.zeros(2)

    s = _state()
    new, layout, _ = step(s)
    assert new.capacity((0, 0)) == 3 * 2**30 and new.locked
    assert new == fws.lock(fws.retain(fws.acquire(s, (0, 0), ((3 * 2**30,), U8))[0], (1, 0),
                                      "kv", ((10,), U8))[0])  # fmt: skip
    assert layout.growth == (((0, 0), 3 * 2**30),)
    assert hash(new) == hash(new) and json.dumps(fws.to_dict(new))  # hashable, plain ints
    step(_state())  # an equal state: jit's cache hits, no new trace
    assert len(traces) == 1
    step(fws.claim(s, (0, 0), "another key")[0])  # another state: traced again
    assert len(traces) == 2


def test_state_passes_through_jit_untouched():
    @jax.jit
    def total_capacity(state):
        return sum(slot.capacity for slot in state.slots)

    s = _state()
    assert int(total_capacity(s)) == 1024
    assert int(total_capacity(fws.lock(s))) == 1024  # another treedef: retraces, still works


def test_text_rendering_names_everything():
    text = str(_state())
    assert "2 ubatches x 1 lane" in text and "growth 'slot'" in text and "unlocked" in text
    assert "slot (0, 0): capacity 1.00 KiB, high water 1.00 KiB, 1 growth" in text
    assert "retained: 'kv' at offset 768 B" in text
    assert "persistent keys: ('scales', 3)" in text
    assert "LOCKED" in fws.render(fws.lock(_state()))


def test_repr_is_readable():
    r = repr(fws.initial_state())
    assert r.startswith("WorkspaceState(num_ubatches=1, num_lanes=1, alignment=256")


def test_fast_constructors_build_the_same_values():
    """``make_slot``, ``with_slots`` and ``make_layout`` skip the frozen dataclasses'
    ``__init__`` for speed: their values must equal (and hash as) the constructors'."""
    from functional_ws._layout import make_layout
    from functional_ws._state import make_slot, with_slot, with_slots

    fast = make_slot(512, 256, 1, ("kv", 256), frozenset({"w"}))
    slow = fws.SlotState(512, 256, 1, ("kv", 256), frozenset({"w"}))
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.capacity = 0  # type: ignore[misc]
    s = _state()
    fast_state = with_slots(s, (fast, s.slots[1]))
    slow_state = dataclasses.replace(s, slots=(slow, s.slots[1]))
    assert fast_state == slow_state and hash(fast_state) == hash(slow_state)
    assert s.slots[0] != fast  # the input is unchanged
    assert with_slot(s, 0, fast) == slow_state and with_slot(s, 1, fast).slots[1] is fast
    assert hash(with_slot(s, 0, fast)) == hash(slow_state)
    spec = fws.ViewSpec.of((4,), U8)
    args = ((0, 0), 0, (spec,), (0,), 256, 256, (((0, 0), 256),))
    assert make_layout(*args) == fws.Layout(*args)
    assert hash(make_layout(*args)) == hash(fws.Layout(*args))
