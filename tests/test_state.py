"""WorkspaceState as a value: frozen, hashable, a JAX pytree with chosen leaves, readable."""

import dataclasses

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


def test_pytree_leaves_are_the_numbers():
    s = _state()
    leaves, treedef = jax.tree_util.tree_flatten(s)
    assert leaves == [1024, 1024, 1, 0, 0, 0]  # capacity, high water, growths per slot
    doubled = jax.tree_util.tree_map(lambda x: 2 * x, s)
    assert doubled.capacity((0, 0)) == 2048
    assert doubled.slots[0].retained == ("kv", 768)  # static metadata carried along
    assert jax.tree_util.tree_unflatten(treedef, leaves) == s


def test_pytree_survives_jit_with_static_metadata():
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
    assert "retained: 'kv' at offset 768" in text
    assert "persistent keys: ('scales', 3)" in text
    assert "LOCKED" in fws.render(fws.lock(_state()))


def test_repr_is_readable():
    r = repr(fws.initial_state())
    assert r.startswith("WorkspaceState(num_ubatches=1, num_lanes=1, alignment=256")
