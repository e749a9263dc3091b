"""The manager's pictures and recorded history show what its calls did."""

import matplotlib
import pytest
import torch

import functional_ws as fws
from interop import WorkspaceLockedError, WorkspaceManager, use_workspace_ubatch

matplotlib.use("Agg")


def _warm():
    ws = WorkspaceManager("cpu", num_ubatches=2)
    ws.get_simultaneous(((100,), torch.float16), ((3,), torch.int32))
    ws.reserve(((2048,), torch.uint8))
    ws.get_retained("kv", (300,), torch.uint8)
    return ws


def test_last_layouts_and_spans_feed_the_pictures():
    ws = _warm()
    assert ws.last_layouts[(0, 0)].offsets == (0, 256)
    assert ws.last_spans[(0, 0)].offset == 1536 and (1, 0) not in ws.last_spans
    html = ws._repr_html_()
    assert 'title="float16[100]: 200 B at offset 0 B' in html
    assert 'title="int32[3]: 12 B at offset 256 B' in html
    assert "(intact)" in html
    ws.get_simultaneous(((1600,), torch.uint8))  # reaches into the tail
    assert "(clobbered)" in ws._repr_html_()
    fig = ws.plot()
    assert "unlocked" in fig.axes[0].get_title()
    assert fig.axes[0].get_title() == fws.plot(ws.state).axes[0].get_title()


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
    assert len(history.plot_capacity().axes[0].lines) == 2


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
