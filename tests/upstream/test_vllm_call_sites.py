"""How vLLM 0.34.0's own code calls the workspace, replayed against ``interop``.

0.34.0 upstreamed ``get_retained`` and calls it with tuple keys: its DeepSeek V4.1 prefill
(``models/deepseek_v41/nvidia/flash_mla_mega_attn.py``) keeps each chunk's gathered
compressed-KV columns in the retained span, keyed ``(cache prefix, chunk)``, where the
index scratch of the same chunk comes from ``get_simultaneous`` just before; the kv source
layer always gathers, and the consumers after it in the same forward gather only when the
span is not intact. It also calls ``get_persistent`` with tuple keys (Marlin's zeroed locks
per ``("marlin_locks", stream)``, the Kimi K3 decode's ``(*layer_key, "counts")`` and
``"work"`` beside a scratch request) and ``get_persistent_resource`` with a tuple holding a
``torch.device`` and a tuple of sizes. The call sites below are written the way those
kernels use the workspace, in our own words; the shapes are small.
"""

import dataclasses
import logging

import pytest
import torch

import interop
from interop.errors import PersistentKeyLockedError

BF16, I32 = torch.bfloat16, torch.int32
D = 8  # head dim


@dataclasses.dataclass
class MegaAttnLayer:
    """A prefill layer reading a compressed KV cache: ``prefix`` names the cache, and the
    source layer of each prefix (the one that just wrote this step's rows) always gathers."""

    prefix: str
    is_kv_source: bool
    gathers: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)

    def compressed(self, chunk: tuple[int, int, int, int]) -> torch.Tensor:
        """What this cache's gather writes for ``chunk`` (a value per prefix and chunk)."""
        size, n = chunk[1] - chunk[0], chunk[2]
        value = float(len(self.prefix) * 100 + chunk[0])
        return torch.full((size, n, D), value, dtype=BF16)

    def forward(self, chunk_plan: list[tuple[int, int, int, int]]) -> list[torch.Tensor]:
        """Per chunk: index scratch, then the chunk's columns in the retained span (the
        compressed ones gathered only when needed, the SWA ones rewritten every time)."""
        manager = interop.current_workspace_manager()
        outputs = []
        for chunk in chunk_plan:
            start, end, n, m = chunk
            size = end - start
            idx, lens = manager.get_simultaneous(((size, m), I32), ((size,), I32))
            kv, intact = manager.get_retained((self.prefix, chunk), (size, m, D), BF16)
            if self.is_kv_source or not intact:
                self.gathers.append(chunk)
                kv[:, :n] = self.compressed(chunk)
            kv[:, n:] = -1.0  # this layer's SWA columns
            idx.fill_(start)
            lens.fill_(m)
            outputs.append(kv[:, :n].clone())  # what attention would read
        return outputs


def chunk_plan() -> list[tuple[int, int, int, int]]:
    """(start, end, compressed columns, all columns) per chunk: new, equal tuples at every
    call, as each forward plans its chunks again."""
    return [tuple(chunk) for chunk in ([0, 4, 3, 5], [4, 6, 2, 4])]


def kv_bytes(chunk: tuple[int, int, int, int]) -> int:
    return (chunk[1] - chunk[0]) * chunk[3] * D * BF16.itemsize


@pytest.fixture
def manager():
    interop.init_workspace_manager("cpu")
    yield interop.current_workspace_manager()
    interop.reset_workspace_manager()


def warm_up(manager) -> None:
    """Room for a chunk's index views and its span side by side, as a larger scratch
    request of another layer would leave; then lock, as vLLM does after its profile run."""
    manager.reserve(((4096,), torch.uint8))
    manager.lock()


def test_consumers_reuse_a_chunk_the_source_gathered_while_the_span_holds_it(manager):
    warm_up(manager)
    source = MegaAttnLayer("c4", is_kv_source=True)
    consumers = [MegaAttnLayer("c4", is_kv_source=False) for _ in range(2)]
    (expected,) = source.forward(chunk_plan()[:1])
    for consumer in consumers:  # the same forward, the same chunk: the span is intact
        (out,) = consumer.forward(chunk_plan()[:1])  # an equal key, not the same object
        assert torch.equal(out, expected) and consumer.gathers == []
    source.forward(chunk_plan()[:1])  # the next step: the source gathers again, always
    assert len(source.gathers) == 2


def test_another_prefix_or_chunk_takes_the_span_over_and_the_consumer_gathers(manager):
    warm_up(manager)
    c4, c128 = MegaAttnLayer("c4", True), MegaAttnLayer("c128", True)
    consumer = MegaAttnLayer("c4", False)
    first, second = chunk_plan()
    c4.forward([first])
    c128.forward([first])  # another cache's source: the key differs
    (out,) = consumer.forward([first])
    assert consumer.gathers == [first] and torch.equal(out, c4.compressed(first))
    c4.forward(chunk_plan())  # two chunks: the span ends holding the second
    consumer.forward([second])
    assert consumer.gathers == [first]  # the second chunk was still there
    consumer.forward([first])
    assert consumer.gathers == [first, first]  # the first one was not


def test_small_scratch_between_layers_leaves_the_span_and_large_scratch_drops_it(manager):
    warm_up(manager)
    source, consumer = MegaAttnLayer("c4", True), MegaAttnLayer("c4", False)
    (first, _) = chunk_plan()
    source.forward([first])
    capacity = manager.state.capacity((0, 0))
    start = (capacity - kv_bytes(first)) // 256 * 256
    manager.get_simultaneous(((start,), torch.uint8))  # another layer's scratch, up to it
    consumer.forward([first])
    assert consumer.gathers == []
    manager.get_simultaneous(((start + 1,), torch.uint8))  # reaches into the span
    out = consumer.forward([first])
    assert consumer.gathers == [first] and torch.equal(out[0], source.compressed(first))


def test_each_ubatch_keeps_its_own_span(manager):
    interop.init_workspace_manager("cpu", num_ubatches=2)
    ws = interop.current_workspace_manager()
    warm_up(ws)
    source, consumer = MegaAttnLayer("c4", True), MegaAttnLayer("c4", False)
    (first, _) = chunk_plan()
    with interop.use_workspace_ubatch(0):
        source.forward([first])
    with interop.use_workspace_ubatch(1):
        consumer.forward([first])  # ubatch 1's span never held it
    with interop.use_workspace_ubatch(0):
        consumer.forward([first])
    assert consumer.gathers == [first]


def test_index_views_and_the_span_share_bytes_when_the_slot_holds_one_of_them(manager, caplog):
    """As in vLLM 0.34.0: ``get_retained`` takes the slot's last bytes whatever the views
    just handed out hold, so a slot too small for both puts the span over the index
    views (the call site relies on other scratch having grown the slot). Here the first
    chunk's span also grows the slot while the index views are alive: the old buffer is
    reported as pinned. A reservation of both, side by side, keeps them apart."""
    chunk = (0, 8, 3, 5)
    index_specs = (((8, 5), I32), ((8,), I32))  # 160 and 32 bytes: 512 with padding
    kv_spec = ((8, 5, D), BF16)  # 640 bytes
    index_views = manager.get_simultaneous(*index_specs)
    with caplog.at_level(logging.WARNING, logger="interop"):
        manager.get_retained(("c4", chunk), *kv_spec)  # grows the slot to 640 bytes
    assert manager.state.capacity((0, 0)) == 640
    assert "retired buffer" in caplog.text and "still pinned by live views" in caplog.text
    caplog.clear()
    index_views = manager.get_simultaneous(*index_specs)  # the next forward
    kv, intact = manager.get_retained(("c4", chunk), *kv_spec)
    assert not intact  # the index views reached into the span
    assert index_views[0].data_ptr() == kv.data_ptr()  # writing one clobbers the other
    del index_views, kv  # the forward is over: nothing pins the buffer
    with caplog.at_level(logging.WARNING, logger="interop"):
        manager.reserve(*index_specs, ((640,), torch.uint8))  # both, side by side
        index_views = manager.get_simultaneous(*index_specs)
        kv, _ = manager.get_retained(("c4", chunk), *kv_spec)
    assert kv.data_ptr() >= index_views[0].data_ptr() + 512  # past the index views
    assert not caplog.text


# ----- get_persistent and get_persistent_resource with tuple keys -----

LOCKS = 16


def marlin_locks(stream: object) -> torch.Tensor:
    """Zeroed locks per stream (Marlin: key ``("marlin_locks", current_stream())``)."""
    return interop.current_workspace_manager().get_persistent(
        ("marlin_locks", stream), (LOCKS,), torch.int, zero_init=True
    )


def test_marlin_locks_are_keyed_by_a_stream_object(manager):
    main, side = torch.cpu.current_stream(), torch.cpu.Stream()
    locks = marlin_locks(main)
    assert locks.dtype == I32 and torch.count_nonzero(locks) == 0
    locks.fill_(1)
    assert marlin_locks(torch.cpu.current_stream()) is locks  # zeroed on creation only
    assert marlin_locks(side).data_ptr() != locks.data_ptr()
    manager.lock()
    assert marlin_locks(main) is locks and torch.all(locks == 1)


@dataclasses.dataclass
class KvBalancedDecode:
    """Kimi K3's decode: plan buffers per layer shape, beside a split-KV scratch request."""

    heads: int
    qlen: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("kimi_k3_kv_balanced_mla", self.heads, self.qlen, True)

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        manager = interop.current_workspace_manager()
        counts = manager.get_persistent((*self.key, "counts"), (self.heads,), I32)
        work = manager.get_persistent((*self.key, "work"), (self.heads, 4), I32)
        (scratch,) = manager.get_simultaneous(((1024,), torch.int8))
        return counts, work, scratch


def test_kimi_style_plan_buffers_are_claimed_in_warmup_and_stable_when_locked(manager):
    layer = KvBalancedDecode(heads=8, qlen=1)
    counts, work, scratch = layer.buffers()  # the claim during the profile run
    for view in (counts, work):
        assert not (
            view.data_ptr() < scratch.data_ptr() + 1024
            and scratch.data_ptr() < view.data_ptr() + view.nbytes
        )  # persistent tensors are not the scratch
    counts.fill_(3)
    manager.lock()
    again = KvBalancedDecode(heads=8, qlen=1).buffers()  # new tuples, equal keys
    assert again[0] is counts and again[1] is work and torch.all(counts == 3)
    with pytest.raises(PersistentKeyLockedError, match="was not allocated during warmup"):
        KvBalancedDecode(heads=8, qlen=2).buffers()  # a decode shape the warm-up missed


def test_a_resource_keyed_by_a_device_and_sizes_is_made_once_per_slot(manager):
    made = []

    def allocate(sizes=(4, 6)):
        made.append(sizes)
        return tuple(torch.empty(size, dtype=torch.float32) for size in sizes)

    key = ("rocm_segmented_attention", torch.device("cpu"), (4, 6))
    first = manager.get_persistent_resource(key, allocate)
    again = manager.get_persistent_resource(
        ("rocm_segmented_attention", torch.device("cpu"), (4, 6)), allocate
    )
    assert again is first and made == [(4, 6)]
