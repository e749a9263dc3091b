"""What a notebook user reads back from a manager, as bugs planted in its displays showed
untested: the stats table (an escaped allocator name, pinned buffers per slot), a
History's repr and escaped HTML, what a recording keeps (a refused persistent shape, a
sixty-character argument, a factory's own calls, nested recordings). Each test fails with
its planted bug.
"""

import pytest
import torch

import functional_ws as fws
from interop import WorkspaceManager, use_workspace_ubatch

XSS = "<img src=x onerror=alert(1)>"


def test_a_callable_allocators_name_is_escaped_in_the_stats_table():
    """A nested function's qualified name holds ``<locals>``, which a browser would take
    for a tag and hide."""

    def make():
        def alloc(nbytes, device):
            return torch.empty(nbytes, dtype=torch.uint8, device=device)

        return alloc

    ws = WorkspaceManager("cpu", allocator=make())
    ws.get_simultaneous(((16,), torch.uint8))
    stats = ws.stats()
    assert "<locals>" in stats.slots[0].allocator
    for html in (stats._repr_html_(), stats.slots[0]._repr_html_()):
        assert "<locals>" not in html and "&lt;locals&gt;" in html


def test_pinned_buffers_are_counted_per_slot_and_the_header_says_the_pinned_bytes():
    """Each slot counts its own pinned buffers, and the HTML header's "retired but
    pinned" says the pinned bytes."""
    ws = WorkspaceManager("cpu", num_ubatches=2)
    with use_workspace_ubatch(0):
        (kept,) = ws.get_simultaneous(((256,), torch.uint8))
        ws.get_simultaneous(((4096,), torch.uint8))  # grows: the old buffer stays pinned
    with use_workspace_ubatch(1):
        ws.get_simultaneous(((64,), torch.uint8))
    stats = ws.stats()
    first, second = stats.slots
    assert (first.pinned_buffers, second.pinned_buffers) == (1, 0)
    assert (first.pinned_bytes, second.pinned_bytes) == (kept.untyped_storage().nbytes(), 0)
    head = stats._repr_html_().split("</div>")[0]
    assert f"retired but pinned {fws.display.format_bytes(stats.pinned_bytes)}" in head
    assert stats.pinned_bytes != stats.capacity
    del kept


def test_a_historys_repr_names_the_slots_its_calls_ran_in_not_the_start():
    """The slots listed are those calls ran in, not the start record's."""
    ws = WorkspaceManager("cpu", num_ubatches=2)
    with ws.recording() as history, use_workspace_ubatch(1):
        ws.get_simultaneous(((16,), torch.uint8))
    assert history[0].slot == (0, 0)
    assert repr(history) == "History(1 call after the start in (1, 0), 0 refused)"


def test_a_historys_html_escapes_the_keys_in_its_calls_and_errors():
    """A key in a call and in an error is escaped, in the table and the timeline's hovers."""
    ws = WorkspaceManager("cpu")
    ws.get_persistent(XSS, (4,), torch.float32)
    with ws.recording() as history:
        ws.get_retained(XSS, (4,), torch.uint8)
        with pytest.raises(ValueError, match="requested shape"):
            ws.get_persistent(XSS, (5,), torch.float32)
    assert XSS in history[1].call and XSS in history[2].error
    html = history._repr_html_()
    assert "<img" not in html
    table = html.split("<table", 1)[1]
    assert table.count("&lt;img src=x onerror=alert(1)&gt;") >= 3  # two calls, one error
    svg = fws.display.timeline_html([r.state for r in history], [r.call for r in history])
    assert "<img" not in svg and "&lt;img" in svg


def test_a_call_refused_for_a_persistent_tensors_shape_stays_out_of_the_trace():
    """A persistent shape mismatch refuses the call's arguments: no request of the run."""
    ws = WorkspaceManager("cpu")
    with ws.recording() as history:
        ws.get_persistent("w", (4,), torch.float32)
        with pytest.raises(ValueError, match="requested shape"):
            ws.get_persistent("w", (5,), torch.float32)
    assert history[2].error is not None and history[2].event is None
    assert len(history.trace()) == 1


def test_an_argument_of_sixty_characters_is_written_whole():
    """The call text keeps an argument of 60 characters whole and cuts a longer one."""
    ws = WorkspaceManager("cpu")
    sixty, sixty_one = "k" * 58, "k" * 59  # their reprs: 60 and 61 characters
    with ws.recording() as history:
        ws.get_retained(sixty, (4,), torch.uint8)
        ws.get_retained(sixty_one, (4,), torch.uint8)
    assert history[1].call == f"get_retained({sixty!r}, (4,), uint8)"
    assert history[2].call == f"get_retained({repr(sixty_one)[:57]}..., (4,), uint8)"


def test_the_calls_a_persistent_factory_makes_are_recorded_as_calls_of_their_own():
    """A factory's requests are requests of the run, which sizing must see."""
    ws = WorkspaceManager("cpu")

    def factory():
        (scratch,) = ws.get_simultaneous(((1000,), torch.uint8))
        return scratch.sum()

    with ws.recording() as history:
        ws.get_persistent_resource("built", factory)
    assert [r.call.split("(")[0] for r in history[1:]] == [
        "get_simultaneous",
        "get_persistent_resource",
    ]
    assert [e.kind for e in history.trace().events] == ["acquire", "claim"]


def test_an_outer_recording_keeps_recording_memoised_calls_after_an_inner_one_ends():
    """An inner recording's end leaves the outer one recording: memoised hits after it
    are not served by the hot paths unrecorded."""
    ws = WorkspaceManager("cpu")
    request = ((100,), torch.float32)
    ws.get_simultaneous(request)
    ws.get_simultaneous(request)  # memoised now
    with ws.recording() as outer:
        with ws.recording() as inner:
            ws.get_simultaneous(request)
        ws.get_simultaneous(request)
        ws.get_retained("kv", (8,), torch.uint8)
        ws.get_retained("kv", (8,), torch.uint8)
    assert len(inner) == 2
    assert len(outer) == 5 and len(outer.trace()) == 4
