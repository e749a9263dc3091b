"""The manager's pictures, statistics and recorded history show what its calls did."""

import re
from html import unescape

import matplotlib
import pytest
import torch
from IPython.lib.pretty import pretty
from support.scenes import (
    every_dtype,
    manager_scene,
    many_slots,
    recorded_history,
    tiny_beside_huge,
)

import functional_ws as fws
from interop import WorkspaceLockedError, WorkspaceManager, use_workspace_ubatch

matplotlib.use("Agg")


def test_last_layouts_and_spans_feed_the_pictures():
    ws = manager_scene()
    assert ws.last_layouts[(0, 0)].offsets == (0, 256)
    assert ws.last_spans[(0, 0)].offset == 1536 and (1, 0) not in ws.last_spans
    html = ws._repr_html_()
    assert 'title="float16[100]: 200 B at offset 0 B' in html
    assert 'title="int32[3]: 12 B at offset 256 B' in html
    assert "(intact)" in html
    ws.get_simultaneous(((1600,), torch.uint8))  # reaches into the tail
    assert "(clobbered)" in ws._repr_html_()
    fig = ws.plot()
    title = fig.axes[0].get_title()
    assert title.startswith("WorkspaceManager on cpu: 2 ubatches x 1 lane") and "unlocked" in title
    assert "allocator torch" in title


def test_a_manager_displays_as_itself_with_device_allocator_and_lock():
    ws = manager_scene()
    ws.lock()
    html = ws._repr_html_()
    assert "<b>WorkspaceManager on cpu</b>: 2 ubatches x 1 lane" in html
    assert "LOCKED, allocator torch" in html and "WorkspaceState" not in html
    assert repr(ws) == "WorkspaceManager(device=cpu, 2 ubatches x 1 lane, 4.00 KiB, locked)"
    one = WorkspaceManager("cpu", num_lanes=2, allocator="jax")
    assert (
        repr(one)
        == "WorkspaceManager(device=cpu, 1 ubatch x 2 lanes, 0 B, unlocked, allocator jax)"
    )


def test_every_view_of_the_last_request_is_drawn_at_least_four_pixels_wide():
    """In a bar long enough to give each of its views 4 px; the bars of many_slots() stay to
    scale, so its views in a 3 KiB slot beside 2 MiB share a bar under a pixel long."""
    for ws in (tiny_beside_huge(), every_dtype(), many_slots()):
        html = ws._repr_html_()
        expected = sum(len(layout.specs) for layout in ws.last_layouts.values())
        widths = re.findall(r'class="fws-seg fws-view"[^>]*width:([\d.]+)px', html)
        assert len(widths) == expected
        for row in html.split('class="fws-row"')[1:]:
            bar = float(re.findall(r'class="fws-bar[^"]*" data-capacity="\d+" '
                                   r'style="width:([\d.]+)px"', row)[0])  # fmt: skip
            views = [float(w) for w in re.findall(r'fws-view"[^>]*width:([\d.]+)px', row)]
            least = min(4, bar / (2 * len(views))) if views else 0
            assert all(w >= least - 0.01 for w in views), (bar, views)
        drawn = set(re.findall(r'class="fws-seg fws-view" data-dtype="([^"]+)"', html))
        keyed = set(re.findall(r'class="fws-key" data-key="[^"]+" data-dtype="([^"]+)"', html))
        assert drawn == keyed and len(drawn) >= 2


def _raw_byte_counts(html: str) -> list[str]:
    """Byte counts of 1 KiB or more in hover texts written in bytes alone, not beside the
    binary unit the rest uses (``2.00 MiB (2,097,152 B)``), and offsets without a unit."""
    texts = re.findall(r'title="([^"]*)"', html) + re.findall(r"<title>(.*?)</title>", html)
    raw = []
    for text in map(unescape, texts):
        text = re.sub(r"\d+\.\d\d [KMGT]iB \(\d[\d,]* B\)", "<exact>", text)
        raw += re.findall(r"\d[\d,]{3,} B\b|offset \d[\d,]*+(?! B)", text)
    return raw


def test_hover_texts_give_offsets_in_the_units_sizes_use():
    """Once "at offset 2,097,152 B" beside "2.00 MiB"; now both in binary units, the exact
    bytes in brackets."""
    ws = tiny_beside_huge()
    tiny_views = ws._repr_html_()
    with ws.recording() as history:
        ws.get_retained("sampler", (1000,), torch.float32)
        ws.get_simultaneous(((2**19,), torch.float32))  # reaches into the span
    pages = {
        "tiny views": tiny_views,
        "manager": ws._repr_html_(),
        "state": ws.state._repr_html_(),
        "history": history._repr_html_(),
        "diff": fws.diff(history[1].state, history[2].state)._repr_html_(),
        "many slots": many_slots()._repr_html_(),
    }
    raw = {name: _raw_byte_counts(page) for name, page in pages.items()}
    assert raw == {name: [] for name in pages}
    assert "int32[1]: 4 B at offset 2.00 MiB (2,097,152 B)" in unescape(tiny_views)
    exact = r"2\.00 MiB \(2,09\d,\d{3} B\)"
    assert re.search(rf"retained from {exact}</title>", unescape(pages["history"]))
    assert re.search(rf'title="offset {exact}"', unescape(pages["diff"]))


def test_persistent_tensor_keys_show_the_key_the_user_wrote():
    """``get_persistent`` keeps its tensors under ``(torch.Tensor, key)``; the displays once
    wrote ``(<class 'torch.Tensor'>, 'p20')``. A resource of the same name stays apart."""
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_persistent("p20", (4,), torch.float32)
        ws.get_persistent(("moe", 3), (2,), torch.int32)
        ws.get_persistent_resource("p20", dict)
    d = fws.diff(history[0].state, history[-1].state)
    texts = {
        "manager": unescape(ws._repr_html_()),
        "state": str(ws.state),
        "diff": str(d),
        "diff html": unescape(d._repr_html_()),
        "history": unescape(history._repr_html_()),
        "trace": str(history.trace()),
        "trace html": unescape(history.trace()._repr_html_()),
    }
    wrapped = {name: "torch.Tensor" in text for name, text in texts.items()}
    assert wrapped == dict.fromkeys(texts, False)
    keys = "'p20', 'p20' (tensor), ('moe', 3) (tensor)"
    assert f"3 persistent keys: {keys}" in texts["manager"]
    assert f"persistent keys: {keys}" in texts["state"]
    assert "persistent_keys +'p20' +'p20' (tensor) +('moe', 3) (tensor)" in texts["diff"]
    assert f"<td>none</td><td>{keys}</td>" in texts["diff html"]
    assert "+'p20' (tensor)" in texts["history"]
    assert "persistent key 'p20' (tensor) in slot (0, 0)" in texts["trace"]


def test_a_manager_figure_is_shown_once():
    import matplotlib.pyplot as plt

    plt.close("all")
    fig = manager_scene().plot()
    assert plt.get_fignums() == [] and fig._repr_png_().startswith(b"\x89PNG")


def test_stats_display_in_binary_units_with_exact_bytes_on_hover():
    ws = manager_scene()
    stats = ws.stats()
    assert repr(stats) == "WorkspaceStats(unlocked, 2 slots, capacity 4.00 KiB, pinned 0 B)"
    assert pretty(stats) == str(stats) and str(stats).splitlines()[1] == (
        "  slot (0, 0): capacity 2.00 KiB, high water 512 B, 2 growths, pinned 0 B in 0 "
        "buffers, allocator torch"
    )
    html = stats._repr_html_()
    assert html.count("<tr>") == 1 + 2 + 1  # header, two slots, the total
    assert 'title="2.00 KiB (2,048 B)">2.00 KiB</td>' in html
    assert pretty(stats.slots[1]) == str(stats.slots[1]).strip()
    assert stats.slots[0]._repr_html_().count("<tr>") == 2
    assert "SlotStats(slot=(0, 0), capacity=2048" in repr(stats.slots[0])


def test_history_displays_a_table_of_calls_and_the_capacity_over_time():
    _, history = recorded_history()
    assert repr(history) == "History(15 calls after the start in (0, 0), (1, 0), 1 refused)"
    assert pretty(history) == str(history)
    assert repr(history[1]) == (
        "Record(call='get_simultaneous(((16, 128), bfloat16), ((16, 8), int32))', "
        "slot=(0, 0), error=None)"
    )
    html = history._repr_html_()
    assert html.count("<tr>") == 1 + len(history)
    assert "<i>the starting state</i>" in html
    assert "slot (0, 0): capacity 0 B → 4.50 KiB" in html  # what the first call changed
    assert "WorkspaceLockedError: Workspace is locked" in html
    assert "<svg" in html and html.count("<polyline") == 4
    assert max(map(ord, html)) <= 0xFFFF


def test_history_plot_draws_each_slot_over_the_calls():
    import matplotlib.pyplot as plt

    plt.close("all")
    _, history = recorded_history()
    fig = history.plot()
    assert plt.get_fignums() == []
    assert [ax.get_ylabel() for ax in fig.axes] == ["slot (0, 0)", "slot (1, 0)"]
    growths = next(line for line in fig.axes[0].lines if line.get_marker() == "o")
    assert list(growths.get_xdata()) == [1.5, 5.5, 13.5]  # two warm-up growths, the reserve
    assert history.plot_capacity().axes[0].get_ylabel() == "slot (0, 0)"


def test_keys_with_dollar_signs_are_drawn_as_written_not_as_mathtext():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_retained("$^$", (1,), torch.uint8)  # mathtext would refuse to parse it
        ws.get_retained("$x$", (1,), torch.uint8)  # and draw this one as an italic x
    fig = history.plot()
    fig._repr_png_()  # drawn: every text laid out
    labels = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
    assert labels[1:] == [
        r"get_retained('\$^\$', (1,), uint8)",
        r"get_retained('\$x\$', (1,), uint8)",
    ]
    ws.plot()._repr_png_()


def test_recording_keeps_calls_states_and_refusals():
    ws = WorkspaceManager("cpu", num_ubatches=2)
    with ws.recording() as history:
        ws.get_simultaneous(((100,), torch.float32))
        with use_workspace_ubatch(1):
            ws.get_persistent("w", (4,), torch.float32)
        ws.lock()
        with pytest.raises(WorkspaceLockedError):
            ws.get_simultaneous(((1000,), torch.float32))
    calls = [r.call for r in history]
    assert calls == [
        "start",
        "get_simultaneous(((100,), float32))",
        "get_persistent('w', (4,), float32)",  # its nested claim is not recorded twice
        "lock()",
        "get_simultaneous(((1000,), float32))",
    ]
    assert history[2].slot == (1, 0) and history[-1].error.startswith("WorkspaceLockedError")
    assert history.capacities() == {(0, 0): [0, 512, 512, 512, 512], (1, 0): [0] * 5}
    changes = dict((r.call, text) for r, text in history.changes())
    assert changes["lock()"] == "workspace: locked False → True"
    assert history[-1].state == history[-2].state  # the refusal changed nothing
    assert "get_simultaneous" not in vars(ws)  # recording is off again: no wrappers left
    assert len(history.plot().axes) == 2


def test_picture_follows_repeated_requests():
    ws = WorkspaceManager("cpu")
    small, big = ((64,), torch.float32), ((512,), torch.uint8)
    ws.get_simultaneous(big)
    ws.get_simultaneous(small)
    ws.get_simultaneous(big)  # a memoised request: the picture must follow it too
    assert ws.last_layouts[(0, 0)].specs[0].shape == (512,)


def test_picture_follows_repeated_retains():
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((1024,), torch.uint8))
    ws.get_retained("a", (16,), torch.uint8)
    ws.get_retained("b", (32,), torch.uint8)
    ws.get_retained("a", (16,), torch.uint8)  # a memoised request: the picture must follow
    assert ws.last_spans[(0, 0)].key == "a"
    assert "retained &#x27;a&#x27; (intact)" in ws._repr_html_()


def test_a_failed_growth_shows_its_error_its_note_and_what_it_changed(monkeypatch):
    from interop import _device

    real, failing = _device.torch_block, [False]

    def torch_block(nbytes, device):
        if failing[0]:
            failing[0] = False
            raise MemoryError("out of memory, planted")
        return real(nbytes, device)

    monkeypatch.setattr(_device, "torch_block", torch_block)
    ws = WorkspaceManager("cpu")
    ws.get_simultaneous(((512,), torch.uint8))
    ws.get_retained("kv", (16,), torch.uint8)
    with ws.recording() as history:
        failing[0] = True
        with pytest.raises(MemoryError):
            ws.get_simultaneous(((4096,), torch.uint8))
    error = history[1].error
    assert (
        error.startswith("MemoryError: out of memory, planted\n")
        and "retained span was dropped" in error
    )
    row = unescape(history._repr_html_().split("<tr>")[-1])
    assert "out of memory, planted" in row and "retained span was dropped" in row
    assert "retained 'kv'" in row and "→ none" in row  # what the failure changed, beside it
    assert "\n" not in str(history[1])  # the compact listing keeps one line per call


def test_a_long_recording_on_many_slots_stays_a_bounded_page():
    ws = WorkspaceManager("cpu", num_ubatches=64, num_lanes=8)
    with ws.recording() as history:
        for i in range(1000):
            with use_workspace_ubatch(i % 64):
                ws.get_simultaneous(((i % 300 + 1,), torch.float32))
    html = history._repr_html_()
    assert len(html) < 200_000
    assert html.count("<tr>") == 1 + 200 + 1  # header, the first and last 100 calls, the gap
    assert "801 calls not shown (history[100:901])" in html
    assert "496 more slots not drawn (448 of them never held bytes)" in html
    assert html.count("slot (") >= 16 and '<text x="4"' in html
    fig = history.plot()
    assert len(fig.axes) == 16 and "496 more slots not drawn" in fig.axes[0].get_title()
    assert len(ws.plot().axes[0].get_yticklabels()) == 16


def test_a_key_with_a_huge_repr_is_cut_in_displays_not_in_errors():
    class Huge:
        def __repr__(self):
            return "k" * 1_000_000

    ws = WorkspaceManager("cpu")
    ws.get_persistent_resource(Huge(), dict)
    ws.get_retained(Huge(), (4,), torch.float32)
    assert len(ws._repr_html_()) < 10_000 and "k" * 197 + "..." in ws._repr_html_()
    ws.lock()
    with pytest.raises(AssertionError) as info:
        ws.get_persistent_resource(Huge(), dict)
    assert "k" * 1_000_000 in str(info.value)  # the original's message, whole
    from functional_ws._presenters import key_text

    assert key_text((torch.Tensor, "w" * 250)).endswith("www... (tensor)")  # still marked


def test_a_get_persistent_key_read_back_from_json_prints_as_it_was_written():
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_persistent("w", (10,), torch.float32)
        ws.get_persistent(("moe", 3), (4,), torch.int32)
    trace = history.trace()
    back = fws.Trace.from_json(trace.to_json())
    assert str(back) == str(trace) and "'w' (tensor)" in str(back)
    assert "('moe', 3) (tensor)" in str(back)
    locked = fws.lock(fws.initial_state())
    assert [str(s) for s in fws.replay(locked, back)] == [str(s) for s in fws.replay(locked, trace)]


def test_a_long_historys_plain_text_is_bounded_in_a_notebook():
    """20,000 calls stored 1.1 MB of plain text in the .ipynb beside the bounded HTML."""
    from functional_ws._presenters import PRETTY_LINES

    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        for i in range(2 * PRETTY_LINES):
            ws.get_simultaneous(((i % 7 + 1,), torch.float32))
    full, shown = str(history).splitlines(), pretty(history).splitlines()
    assert len(full) > 2 * PRETTY_LINES and len(shown) == PRETTY_LINES + 1
    assert shown[0] == full[0] and shown[-1] == full[-1]
    assert "lines not shown (print() shows every line)" in shown[PRETTY_LINES // 2]


def test_a_historys_html_cuts_an_error_naming_a_huge_key():
    """Each error naming a 1 MB key put 1 MB into the History's HTML (6 MB for six)."""
    ws = WorkspaceManager("cpu")
    key = "q" * 1_000_000
    ws.get_persistent(key, (4,), torch.float32)
    with ws.recording() as history:
        for _ in range(3):
            with pytest.raises(ValueError, match="requested shape"):
                ws.get_persistent(key, (5,), torch.float32)
    assert len(history[-1].error) > 1_000_000  # the error itself is whole, as the original's
    assert len(history._repr_html_()) < 30_000
    assert "more characters)" in history._repr_html_()


def test_stats_of_many_slots_list_the_first_and_last_in_a_notebook():
    """2,000 ubatches: 780 KB of HTML and 200 KB of plain text in the .ipynb."""
    from interop._workspace._stats import SHOWN_SLOTS

    stats = WorkspaceManager("cpu", num_ubatches=2000).stats()
    html = stats._repr_html_()
    assert html.count("<tr>") == 1 + SHOWN_SLOTS + 1 + 1  # header, slots, the gap, "all"
    assert f"... {2000 - SHOWN_SLOTS} slots not shown" in html and "(1999, 0)" in html
    assert len(pretty(stats).splitlines()) < 250 and len(str(stats).splitlines()) == 2001
