"""Copies of a manager: ``copy.deepcopy`` (of a model holding one, say), pickling and
``copy.copy``, as the original's copies behave (its tensors and dicts are copied, or shared
by a shallow copy), with this manager's guarantees kept in the copy."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest
import torch
from support.seams import in_slot_buffer, inconsistencies

import functional_ws as fws
import interop
from interop.testing import ReferenceWorkspaceManager

F32, U8 = torch.float32, torch.uint8


def _used(**options) -> interop.WorkspaceManager:
    ws = interop.WorkspaceManager("cpu", num_ubatches=2, **options)
    ws.get_simultaneous(((1000,), F32))
    tail, _ = ws.get_retained("tail", (16,), F32)
    tail.copy_(torch.arange(16.0))
    ws.get_persistent("scales", (4,), F32).fill_(3.0)
    ws.get_persistent_resource("table", lambda: {"rows": [1, 2]})
    with interop.use_workspace_ubatch(1):
        ws.get_simultaneous(((100,), U8))
    return ws


COPIES = {
    "deepcopy": copy.deepcopy,
    "pickle": lambda ws: pickle.loads(pickle.dumps(ws)),
}


@pytest.mark.parametrize("make_copy", list(COPIES.values()), ids=list(COPIES))
@pytest.mark.parametrize("locked", [False, True], ids=["unlocked", "locked"])
def test_a_copy_is_an_independent_manager_with_the_same_state_and_bytes(make_copy, locked):
    ws = _used()
    if locked:
        ws.lock()
    twin = make_copy(ws)
    assert twin.state == ws.state and twin.is_locked() is locked
    assert not inconsistencies(twin)
    tail, intact = twin.get_retained("tail", (16,), F32)  # the span's bytes came along
    assert intact and tail.tolist() == list(range(16))
    assert in_slot_buffer(twin, tail) and not in_slot_buffer(ws, tail)
    scales = twin.get_persistent("scales", (4,), F32)
    assert scales.tolist() == [3.0] * 4
    assert scales.data_ptr() != ws.get_persistent("scales", (4,), F32).data_ptr()
    table = twin.get_persistent_resource("table", dict)
    assert table == {"rows": [1, 2]} and table is not ws.get_persistent_resource("table", dict)
    (view,) = twin.get_simultaneous(((1000,), F32))
    assert view.data_ptr() % 256 == 0 and in_slot_buffer(twin, view)
    scales.fill_(7.0)  # what the copy does reaches nothing of the original's
    assert ws.get_persistent("scales", (4,), F32).tolist() == [3.0] * 4
    if locked:
        with pytest.raises(fws.WorkspaceLockedError):
            twin.get_simultaneous(((10_000,), F32))
    else:
        twin.get_simultaneous(((10_000,), F32))  # it grows on its own
        assert ws.state.capacity((0, 0)) == 4096


def test_deepcopy_of_a_model_holding_the_manager_keeps_its_references_consistent():
    """An EMA model is a ``copy.deepcopy`` of the model: the copy's persistent tensor is the
    tensor the copied model holds, as in the original (one memo for both)."""

    class Model(torch.nn.Module):
        def __init__(self, ws: interop.WorkspaceManager) -> None:
            super().__init__()
            self.ws = ws
            self.scales = ws.get_persistent("scales", (4,), F32, zero_init=True)

    model = Model(interop.WorkspaceManager("cpu"))
    ema = copy.deepcopy(model)
    assert ema.ws is not model.ws
    assert ema.scales is ema.ws.get_persistent("scales", (4,), F32)
    reference = ReferenceWorkspaceManager(torch.device("cpu"))
    ours = {"ws": reference, "scales": reference.get_persistent("scales", (4,), F32)}
    theirs = copy.deepcopy(ours)
    assert theirs["scales"] is theirs["ws"].get_persistent("scales", (4,), F32)


def test_a_copy_keeps_the_allocator_and_configuration():
    ws = _used(allocator="jax", growth="ubatches", alignment=512)
    twin = copy.deepcopy(ws)
    assert twin.allocator == "jax" and twin.state == ws.state
    assert twin.stats().slots[0].allocator == "jax"
    (view,) = twin.get_simultaneous(((10,), F32), ((10,), F32))[1:]
    assert view.data_ptr() % 512 == 0


def test_a_shallow_copy_is_another_handle_on_the_same_manager():
    """As the original's: its lists and dicts are shared, so a growth through one handle
    is the other's too."""
    ws = _used()
    handle = copy.copy(ws)
    handle.get_simultaneous(((10_000,), F32))
    assert ws.state is handle.state and ws.state.capacity((0, 0)) >= 40_000
    (a,), (b,) = ws.get_simultaneous(((8,), F32)), handle.get_simultaneous(((8,), F32))
    assert a.data_ptr() == b.data_ptr()


def test_a_manager_whose_context_cannot_be_pickled_says_so():
    ws = interop.WorkspaceManager("cpu", alloc_context=lambda: contextlib_nullcontext())
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(ws)
    assert copy.deepcopy(ws).state == ws.state  # a deep copy keeps the same context


def contextlib_nullcontext():
    import contextlib

    return contextlib.nullcontext()


def test_a_recording_sees_calls_through_a_shallow_copy():
    ws = interop.WorkspaceManager("cpu")
    handle = copy.copy(ws)
    with ws.recording() as history:
        handle.get_simultaneous(((8,), F32))
    assert len(history.trace()) == 1


def test_a_copy_made_during_a_recording_keeps_everything():
    ws = _used()
    with ws.recording() as history:
        ws.get_simultaneous(((8,), F32))
        twin = copy.deepcopy(ws)
    assert twin.get_persistent_resource("table", dict) == {"rows": [1, 2]}
    assert len(history.trace()) == 1


def test_own_attributes_are_those_a_new_manager_has():
    from interop._workspace._facade import _OWN

    assert set(vars(interop.WorkspaceManager("cpu"))) == _OWN


class _Kernel:
    """A persistent resource that refers back to the manager (a kernel wrapper)."""

    def __init__(self, ws: interop.WorkspaceManager) -> None:
        self.ws = ws


def test_a_resource_referring_to_the_manager_refers_to_the_copy():
    ws = interop.WorkspaceManager("cpu")
    kernel = ws.get_persistent_resource("kernel", lambda: _Kernel(ws))
    twin = copy.deepcopy(ws)
    assert twin.get_persistent_resource("kernel", dict).ws is twin
    model = {"ws": ws, "kernel": kernel}
    ema = copy.deepcopy(model)
    assert ema["kernel"].ws is ema["ws"]
    assert ema["ws"].get_persistent_resource("kernel", dict) is ema["kernel"]


class _Tagged(interop.WorkspaceManager):
    """A subclass with an attribute of its own and an override."""

    def __init__(self, device: str, tag: str) -> None:
        super().__init__(device)
        self.tag = tag

    def get_simultaneous(self, *specs):
        return super().get_simultaneous(*specs)


@pytest.mark.parametrize("make_copy", list(COPIES.values()), ids=list(COPIES))
def test_a_subclass_copies_to_its_own_class_with_its_attributes(make_copy):
    ws = _Tagged("cpu", tag=["mine"])
    ws.get_simultaneous(((10,), F32))
    twin = make_copy(ws)
    assert type(twin) is _Tagged and twin.tag == ["mine"] and twin.tag is not ws.tag
    assert twin.state == ws.state


def test_handles_on_one_manager_deep_copy_to_handles_on_one_copy():
    ws = _used()
    first, second = copy.deepcopy([ws, copy.copy(ws)])
    assert first is not second
    first.get_simultaneous(((100_000,), F32))  # a growth through one is the other's too
    (a,), (b,) = first.get_simultaneous(((8,), F32)), second.get_simultaneous(((8,), F32))
    assert a.data_ptr() == b.data_ptr() and ws.state.capacity((0, 0)) < 400_000


def test_a_subclass_comparing_equal_to_its_copies_is_recorded_through_each():
    class Equal(interop.WorkspaceManager):
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Equal)

        __hash__ = None  # type: ignore[assignment]

    ws = Equal("cpu")
    handle = copy.copy(ws)
    with ws.recording() as history:
        late = copy.copy(ws)  # made while the recording runs
        for each in (ws, handle, late):
            each.get_simultaneous(((10,), F32))
    assert len(history.trace()) == 3


def test_a_deep_copy_while_another_thread_clobbers_the_span_says_so():
    """The copy allocates (inside alloc_context), then copies the bytes and reads the state
    together under the source's mutex: a request made in between, which reaches into the
    retained span, is in both (the copy said intact over the request's bytes)."""
    import contextlib
    import threading

    entered, proceed, armed = threading.Event(), threading.Event(), []

    @contextlib.contextmanager
    def pausing():
        if armed:
            entered.set()
            proceed.wait(10)
        yield

    ws = interop.WorkspaceManager("cpu", alloc_context=pausing)
    ws.get_simultaneous(((1024,), F32))
    ws.get_retained("tail", (16,), F32)[0].copy_(torch.arange(16.0))
    armed.append(True)

    def clobber() -> None:
        entered.wait(10)
        (view,) = ws.get_simultaneous(((1024,), F32))  # reaches into the span
        view.fill_(-7.0)
        proceed.set()

    other = threading.Thread(target=clobber)
    other.start()
    twin = copy.deepcopy(ws)
    other.join()
    tail, intact = twin.get_retained("tail", (16,), F32)
    assert not intact and tail[0].item() == -7.0


def test_pickling_for_another_process_leaves_the_managers_buffers_where_they_are():
    """torch's multiprocessing pickler moves every CPU tensor it is handed into shared
    memory, in place: the manager hands it a copy of its bytes, never its buffers (which
    moved, and their views lost their 256-byte alignment)."""
    from multiprocessing.reduction import ForkingPickler

    ws = interop.WorkspaceManager("cpu")
    (before,) = ws.get_simultaneous(((1000,), F32))
    twin = pickle.loads(ForkingPickler.dumps(ws))
    (after,) = ws.get_simultaneous(((1000,), F32))
    (buffer,) = ws._current_workspaces
    assert after.data_ptr() == before.data_ptr() and not buffer.is_shared()
    assert twin.state == ws.state


class _Guarded(interop.WorkspaceManager):
    """The usual recipe for an attribute that does not pickle: dropped in ``__getstate__``,
    made again in ``__setstate__``."""

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.guard = threading.Lock()
        self.calls = 3

    def __getstate__(self):
        state = dict(vars(self))
        del state["guard"]
        return state

    def __setstate__(self, state):
        vars(self).update(state)
        self.guard = threading.Lock()


class _Slotted(interop.WorkspaceManager):
    __slots__ = ("tag",)

    def __init__(self, device: str, tag: str) -> None:
        super().__init__(device)
        self.tag = tag


@pytest.mark.parametrize("make_copy", list(COPIES.values()), ids=list(COPIES))
def test_a_subclass_state_goes_through_its_getstate_setstate_and_slots(make_copy):
    guarded = _Guarded("cpu")
    twin = make_copy(guarded)
    assert twin.calls == 3 and twin.guard is not guarded.guard
    slotted = make_copy(_Slotted("cpu", "mine"))
    assert slotted.tag == "mine"


def test_a_deep_copy_refuses_a_pool_that_hands_out_memory_in_use():
    """The copy allocates every slot's buffer before installing one: each is checked
    against those made before it, as a growth checks against the others' buffers."""
    from interop.errors import AllocationOverlapError

    shared, bad = torch.zeros(1 << 16, dtype=torch.uint8), []

    def pool(nbytes, device):
        return shared[:nbytes] if bad else torch.zeros(nbytes, dtype=torch.uint8)

    ws = interop.WorkspaceManager("cpu", num_ubatches=2, allocator=pool)
    for ubatch in (0, 1):
        with interop.use_workspace_ubatch(ubatch):
            ws.get_simultaneous(((16,), F32))
    bad.append(True)
    with pytest.raises(AllocationOverlapError):
        copy.deepcopy(ws)


#: Armed: the pool below fails and the context swallows the failure.
_ARMED: list[bool] = []


class _Swallowing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return bool(_ARMED)


def _failing_pool(nbytes, device):
    if _ARMED:
        raise MemoryError("pool exhausted")
    return torch.zeros(nbytes, dtype=torch.uint8)


@pytest.mark.parametrize("make_copy", list(COPIES.values()), ids=list(COPIES))
def test_a_copy_whose_allocation_the_context_swallowed_is_refused(make_copy):
    """A copy cannot claim bytes it has no buffer for (it said capacity 64 with none)."""
    from interop.errors import AllocationSuppressedError

    ws = interop.WorkspaceManager("cpu", allocator=_failing_pool, alloc_context=_Swallowing)
    ws.get_simultaneous(((16,), F32))
    payload = pickle.dumps(ws)
    _ARMED.append(True)
    try:
        with pytest.raises(AllocationSuppressedError, match="a copy of the manager"):
            copy.deepcopy(ws) if make_copy is copy.deepcopy else pickle.loads(payload)
    finally:
        _ARMED.clear()


@pytest.mark.parametrize("holds", ["bytes", "persistent"])
def test_a_manager_unpickled_under_fake_tensor_mode_is_refused_not_a_copy_without_bytes(holds):
    # Read back under FakeTensorMode, its bytes came back as FakeTensors: the copy called
    # its retained span intact over bytes never copied, and kept fake persistent tensors.
    from torch._subclasses.fake_tensor import FakeTensorMode

    from interop.errors import FakeCopyError

    ws = interop.WorkspaceManager("cpu")
    if holds == "bytes":
        view, _ = ws.get_retained("logits", (8,), torch.float32)
        view.copy_(torch.arange(8.0))
    else:
        ws.get_persistent("scales", (4,), torch.float32, zero_init=True).fill_(2.0)
    blob = pickle.dumps(ws)
    with (
        FakeTensorMode(allow_non_fake_inputs=True),
        pytest.raises(FakeCopyError, match=r"under a torch mode that makes tensors fake"),
    ):
        pickle.loads(blob)
    copied = pickle.loads(blob)  # outside the mode: a copy with its bytes
    if holds == "bytes":
        view, intact = copied.get_retained("logits", (8,), torch.float32)
        assert intact and view.tolist() == list(map(float, range(8)))
    else:
        assert copied.get_persistent("scales", (4,), torch.float32).tolist() == [2.0] * 4
    meta = interop.WorkspaceManager("meta")  # a meta manager's tensors are meta, not fake
    meta.get_persistent("p", (3,), torch.float32)
    meta.get_simultaneous(((4,), torch.float32))
    assert pickle.loads(pickle.dumps(meta)).state == meta.state


def test_a_manager_deep_copied_under_fake_tensor_mode_with_persistent_tensors_is_refused():
    # torch raised its own RuntimeError (a meta storage set to a cpu one) from deep inside
    # the tensor's deepcopy; unpickling under the mode raises FakeCopyError.
    from torch._subclasses.fake_tensor import FakeTensorMode

    from interop.errors import FakeCopyError

    ws = interop.WorkspaceManager("cpu")
    ws.get_simultaneous(((100,), torch.float32))
    ws.get_persistent("scales", (4,), torch.float32, zero_init=True).fill_(2.0)
    state, memo = ws.state, {}
    with (
        FakeTensorMode(),
        pytest.raises(FakeCopyError, match=r"deep-copied under a torch mode that makes"),
    ):
        copy.deepcopy(ws, memo)
    assert ws.state is state and not memo, "nothing was copied"
    assert ws.get_persistent("scales", (4,), torch.float32).tolist() == [2.0] * 4
    copied = copy.deepcopy(ws)  # outside the mode: a copy with its tensors
    assert copied.get_persistent("scales", (4,), torch.float32).tolist() == [2.0] * 4
    plain = interop.WorkspaceManager("cpu")  # no persistent tensor: its bytes copy for real
    plain.get_simultaneous(((100,), torch.float32))
    with FakeTensorMode():
        twin = copy.deepcopy(plain)
    assert twin.state == plain.state


def test_a_deep_copy_under_fake_tensor_mode_is_refused_for_a_persistent_tensor_of_any_ubatch():
    # Every ubatch's table is looked at, not the first one's only.
    from torch._subclasses.fake_tensor import FakeTensorMode

    from interop.errors import FakeCopyError

    ws = interop.WorkspaceManager("cpu", num_ubatches=2)
    with interop.use_workspace_ubatch(1):
        ws.get_persistent("scales", (4,), torch.float32, zero_init=True)
    with FakeTensorMode(), pytest.raises(FakeCopyError, match=r"1 persistent tensor"):
        copy.deepcopy(ws)
