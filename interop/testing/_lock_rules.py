"""The rules of the lock and of persistent tensors and resources: ``lock``, ``unlock``,
``get_persistent`` and ``get_persistent_resource`` (and, while locked, no new keys)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import functional_ws as fws

from ._aims import Slot
from ._config import Spec
from ._machine_base import (
    PERSISTENT_KEYS,
    PERSISTENT_SPECS,
    MachineBase,
    _aimed,
    _range_of,
    _selected,
    failed,
)
from ._memory import nbytes_of, read, view_bytes, write
from ._tracking import PersistentTensor, Resource


class _Usual:
    """The factory's usual product: a :class:`Resource` (the rule's ``falsy`` argument)."""

    def __repr__(self) -> str:
        return "a Resource"


_NOT_FALSY = _Usual()
#: Falsy resources a factory may make, which a manager must hold as any other (the
#: original tests ``key not in resources``), under keys of their own.
FALSY: tuple[Any, ...] = (None, 0, [])
FALSY_KEYS: tuple[str, ...] = ("falsy",)


class LockAndPersistentRules(MachineBase):
    """``lock``/``unlock``, and persistent tensors and resources (no new key while locked)."""

    # ----- lock -----

    @precondition(_selected("locked"))
    @rule()
    def lock(self) -> None:
        note("lock()")
        self.stats.calls["lock"] += 1
        plan = self._plan("lock()", fws.lock)
        try:
            self.manager.lock()
            now = self.manager.is_locked()
        except Exception as err:
            failed("lock() (or is_locked() after it)", err)
        assert now is True, f"is_locked() is {now!r} after lock(), not True"
        self.model.locked = True
        for index in range(len(self.tracks)):
            self._since_retained(index, "lock()")
        self.lock_serial += 1
        if plan is not None:
            self.commit(plan)

    @precondition(lambda self: "locked" in self.properties and self.model.locked)
    @rule()
    def unlock(self) -> None:
        note("unlock()")
        self.stats.calls["unlock"] += 1
        plan = self._plan("unlock()", fws.unlock)
        try:
            self.manager.unlock()
            now = self.manager.is_locked()
        except Exception as err:
            failed("unlock() (or is_locked() after it)", err)
        assert now is False, f"is_locked() is {now!r} after unlock(), not False"
        self.model.locked = False
        for index in range(len(self.tracks)):
            self._since_retained(index, "unlock()")
        if plan is not None:
            self.commit(plan)

    # ----- persistent (and, while locked, no new keys) -----

    @precondition(_selected("persistent"))
    @rule(
        aim=_aimed(lambda aims: aims.tensor(PERSISTENT_KEYS, PERSISTENT_SPECS)),
        zero_init=st.booleans(),
    )
    def get_persistent(self, aim: tuple[Slot, Hashable, Spec], zero_init: bool) -> None:
        """Any key and spec in any slot, or a key a slot holds a tensor for, again: the same
        shape and dtype (the same tensor, its contents kept, zeroed only when it was made),
        or another (``ValueError``)."""
        self._persistent(*aim, zero_init)

    def _persistent(self, slot: Slot, key: Hashable, spec: Spec, zero_init: bool) -> None:
        track = self.tracks[self.model.index(slot)]
        shape, dtype = spec
        call = (
            f"get_persistent({key!r}, {shape!r}, {dtype}, zero_init={zero_init})"
            f"{self.cfg.where(slot)}"
        )
        note(call)
        self.stats.calls["get_persistent"] += 1
        known = track.tensors.get(key)

        def fetch() -> Any:
            return self.manager.get_persistent(key, shape, dtype, zero_init=zero_init)

        if known is not None and known.spec != spec:  # the original's "requested shape" error
            self._expect_refusal(slot, ValueError, call, fetch)
            return
        # The façade's persistent tensors share the resource keys as (torch.Tensor, key).
        plan = self._plan(call, fws.claim, slot, (torch.Tensor, key))
        if known is None and self.model.locked:
            self._expect_refusal(slot, AssertionError, call, fetch, plan)
            return
        tensor = self._call(slot, call, None, fetch, plan)
        if known is not None:
            assert tensor is known.tensor, f"{call} returned another tensor than {known.call}"
            self._after_call(call)
            return
        self._check_shapes(call, [tensor], [spec])
        assert not zero_init or not any(read(view_bytes(tensor))), (
            f"{call}: the new tensor is not all zero"
        )
        if "disjoint" in self.properties:
            self._check_apart([_range_of(tensor, call)], None)
        pattern = self.model.next_pattern(nbytes_of(tensor))
        write(view_bytes(tensor), pattern)
        track.tensors[key] = PersistentTensor(tensor, spec, pattern, call)
        self._after_call(call)

    @precondition(_selected("persistent"))
    @rule(aim=_aimed(lambda aims: aims.resource(PERSISTENT_KEYS)))
    def get_persistent_resource(self, aim: tuple[Slot, Hashable]) -> None:
        """Any key in any slot, or a key some slot holds (a resource or a tensor) in that
        slot or another: one factory call per key per slot, a tensor's key not a resource's."""
        self._resource(*aim)

    @precondition(_selected("persistent"))
    @rule(aim=_aimed(lambda aims: aims.resource(FALSY_KEYS)), falsy=st.sampled_from(FALSY))
    def get_falsy_resource(self, aim: tuple[Slot, Hashable], falsy: Any) -> None:
        """A key whose factory makes a falsy resource (``None``, ``0``, ``[]``): held as any
        other (a manager that tests ``if not resources.get(key)`` makes it again)."""
        self._resource(*aim, falsy=falsy)

    def _resource(self, slot: Slot, key: Hashable, falsy: Any = _NOT_FALSY) -> None:
        track = self.tracks[self.model.index(slot)]
        call = f"get_persistent_resource({key!r}, factory){self.cfg.where(slot)}"
        note(call if falsy is _NOT_FALSY else f"{call}, the factory making {falsy!r}")
        self.stats.calls["get_persistent_resource"] += 1
        made: list[Any] = []

        def factory() -> Any:
            self.made += 1
            made.append(Resource(key, slot, self.made) if falsy is _NOT_FALSY else falsy)
            return made[-1]

        def fetch() -> Any:
            return self.manager.get_persistent_resource(key, factory)

        held = key in track.resources
        known = track.resources.get(key)
        plan = self._plan(call, fws.claim, slot, key)
        if not held and self.model.locked:
            self._expect_refusal(slot, AssertionError, call, fetch, plan)
            assert not made, f"{call} called the factory while locked"
            return
        got = self._call(slot, call, None, fetch, plan)
        note(f"  -> {got!r}, factory called {len(made)} time(s)")
        if held:
            assert not made, f"{call} called the factory again for a key this slot holds"
            assert got is known, f"{call} returned {got!r}, not {known!r} as before"
        else:
            assert len(made) == 1, f"{call} called the factory {len(made)} times"
            assert got is made[0], f"{call} returned {got!r}, not what the factory made"
            track.resources[key] = got
        self._after_call(call)
