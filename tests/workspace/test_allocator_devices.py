"""Devices are one however they are spelled (``cpu`` is ``cpu:0``), and a device this process
cannot use is refused by name (issues 10 item 8, 13)."""

from __future__ import annotations

import pytest
import torch
from support.allocators import misaligned_pool

import interop
from interop._device import normalize_device, same_device
from interop._workspace._allocators import resolve_allocator
from interop._workspace._providers import check_allocation

CPU = torch.device("cpu")
SPELLINGS = ["cpu", "cpu:0", torch.device("cpu"), torch.device("cpu", 0)]
ALLOCATORS = {"torch": "torch", "jax": "jax", "callable": misaligned_pool}


@pytest.mark.parametrize("spelling", SPELLINGS, ids=str)
def test_every_cpu_spelling_is_plain_cpu(spelling):
    assert normalize_device(spelling) == CPU
    assert same_device(torch.empty(1).device, torch.device(spelling))


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("spelling", ["cpu", "cpu:0"])
def test_every_allocator_serves_both_spellings(allocator, spelling):
    device = torch.device(spelling)
    adapter = resolve_allocator(ALLOCATORS[allocator], device)
    for nbytes in (1000, 5000, 1 << 16):
        buffer = adapter.allocate(nbytes, device, 256).buffer
        assert buffer.numel() == nbytes and buffer.data_ptr() % 256 == 0
        assert buffer.device == CPU


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("spelling", ["cpu", "cpu:0"])
def test_a_workspace_on_either_spelling_grows_with_every_allocator(allocator, spelling):
    ws = interop.WorkspaceManager(spelling, num_ubatches=2, allocator=ALLOCATORS[allocator])
    for ubatch in range(2):
        with interop.use_workspace_ubatch(ubatch):
            (view,) = ws.get_simultaneous(((3000,), torch.float32))
            view.fill_(ubatch + 1.0)
            assert view.sum().item() == 3000 * (ubatch + 1.0)
    ws.get_simultaneous(((1 << 16,), torch.uint8))  # a second growth


def test_the_allocation_check_compares_normalised_devices():
    result = torch.empty(64, dtype=torch.uint8)  # torch reports plain "cpu"
    checked = check_allocation(result, 64, torch.device("cpu:0"), resolve_allocator("torch", CPU))
    assert checked is result


class FakeCuda:
    """``torch.cuda`` as seen on a machine with ``count`` GPUs, current one ``current``."""

    def __init__(self, count: int, current: int):
        self.count, self.current = count, current

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return self.current


def test_cuda_without_an_index_is_the_current_device(monkeypatch):
    monkeypatch.setattr(torch, "cuda", FakeCuda(count=2, current=1))
    assert normalize_device("cuda") == torch.device("cuda", 1)
    assert normalize_device("cuda:0") == torch.device("cuda", 0)
    assert same_device(torch.device("cuda"), torch.device("cuda:1"))
    assert not same_device(torch.device("cuda"), torch.device("cuda:0"))


# id, device, error, builtin, fragments of the message, the fake torch.cuda (None: the real)
BAD_DEVICES = [
    ("cuda-unavailable", "cuda", interop.errors.DeviceUnavailableError, RuntimeError,
     ["device='cuda'", "cannot be used"], FakeCuda(count=0, current=0)),
    ("index-past-the-count", "cuda:3", interop.errors.DeviceUnavailableError, RuntimeError,
     ["device='cuda:3'", "sees 2 cuda devices", "0 to 1"], FakeCuda(count=2, current=0)),
    ("unknown-type", "tpu:0", interop.errors.UnknownDeviceError, RuntimeError,
     ["device='tpu:0'", "not a device torch knows"], None),
    ("garbage", "cuda:x", interop.errors.UnknownDeviceError, RuntimeError, ["device='cuda:x'"],
     None),
    ("not-a-device", 3.5, TypeError, TypeError, ["device must be", "3.5 (float)"], None),
    ("negative-index", -1, TypeError, TypeError, ["-1 (int)"], None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("device", "error", "builtin", "fragments", "fake"),
    [case[1:] for case in BAD_DEVICES],
    ids=[case[0] for case in BAD_DEVICES],
)
def test_unusable_devices_are_refused_by_name(device, error, builtin, fragments, fake, monkeypatch):
    if fake is not None:
        monkeypatch.setattr(torch, "cuda", fake)
    with pytest.raises(error) as info:
        normalize_device(device)
    assert isinstance(info.value, builtin)
    assert info.value.__cause__ is None  # the first line of the traceback is ours
    assert info.value.__context__ is None or info.value.__suppress_context__
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch sees a CUDA device")
def test_cuda_on_a_torch_without_it_says_why():
    with pytest.raises(interop.errors.DeviceUnavailableError) as info:
        normalize_device("cuda")
    text = str(info.value)
    assert "device='cuda'" in text
    if not torch.backends.cuda.is_built():
        assert "this torch build has no CUDA" in text
