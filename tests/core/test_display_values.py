"""Layouts, spans and diffs read well: in print, in IPython's pretty text and in HTML."""

import re
from html import escape

import numpy as np
from IPython.lib.pretty import pretty
from support.scenes import U8, core_scene

import functional_ws as fws

F32 = np.dtype("float32")


def test_diff_explains_changes_in_binary_units():
    s, _, _ = core_scene()
    after, _ = fws.acquire(fws.lock(s), (0, 0), ((1600,), U8))
    assert str(fws.diff(s, after)).splitlines() == [
        "workspace: locked False → True",
        "slot (0, 0): high_water 512 B → 1.75 KiB",
        "slot (0, 0): retained 'kv' at offset 1.50 KiB → none",
    ]
    assert str(fws.diff(s, s)) == "no differences" and len(fws.diff(s, s)) == 0
    keyed = fws.claim(s, (1, 0), "w")[0]
    assert str(fws.diff(s, keyed)) == "slot (1, 0): persistent_keys +'w'"
    grown, _ = fws.acquire(s, (1, 0), ((266240,), U8))
    assert "slot (1, 0): capacity 0 B → 260.00 KiB" in str(fws.diff(s, grown))


def test_diff_displays_as_a_table_with_exact_bytes_on_hover():
    s, _, _ = core_scene()
    after, _ = fws.acquire(s, (1, 0), ((659712,), U8))
    d = fws.diff(s, after)
    html = d._repr_html_()
    assert html.count("<tr>") == 1 + len(d)
    assert 'title="644.25 KiB (659,712 B)">644.25 KiB</td>' in html
    assert pretty(d) == str(d)  # IPython's text is the readable one, not the tuple's repr
    assert fws.diff(s, s)._repr_html_() == "<i>no differences</i>"
    assert repr(d).startswith("Diff((Change(slot=(1, 0), field='capacity'")


def test_layout_reads_as_views_with_offsets_and_sizes():
    _, layout = fws.acquire(fws.initial_state(), (0, 0), ((100,), F32), ((3000,), U8))
    text = str(layout)
    assert text.splitlines() == [
        "Layout of slot (0, 0): 2 views, 3.50 KiB with padding (alignment 256), "
        "grows slot (0, 0) to 3.50 KiB",
        "  float32[100] @0: 400 B",
        "  uint8[3000] @512: 2.93 KiB",
    ]
    assert pretty(layout) == text
    html = layout._repr_html_()
    assert html.count("<tr>") == 3 and 'title="2.93 KiB (3,000 B)">2.93 KiB' in html
    assert "Layout(slot=(0, 0), index=0" in repr(layout)  # the exact repr stays


def test_span_reads_as_key_view_offset_and_size():
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((4096,), U8))
    _, span, _ = fws.retain(s, (0, 0), ("kv", 3), ((300,), F32))
    assert str(span) == (
        "Span ('kv', 3) of slot (0, 0): float32[300] @2816, 1.17 KiB (alignment 256), no growth"
    )
    assert pretty(span) == str(span)
    html = span._repr_html_()
    assert "offset 2.75 KiB" in html and 'title="2.75 KiB (2,816 B)"' in html


def test_a_state_pretty_prints_as_its_text():
    s, _, _ = core_scene()
    assert pretty(s) == str(s) == fws.render(s)
    assert "retained: 'kv' at offset 1.50 KiB (1,536 B)" in str(s)


class _UnprintableKey:
    """A hashable key whose ``repr`` raises (a user's class with a broken ``__repr__``)."""

    def __repr__(self) -> str:
        raise ValueError("no repr")


def test_a_key_whose_repr_raises_is_shown_as_a_placeholder():
    """Once ``str(state)`` and ``state._repr_html_()`` raised the key's ValueError."""
    key = _UnprintableKey()
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((4096,), U8))
    s = fws.claim(s, (0, 0), key)[0]
    s, span, _ = fws.retain(s, (0, 0), key, ((300,), F32))
    placeholder = "<a key of type _UnprintableKey whose repr raised ValueError>"
    d = fws.diff(fws.initial_state(), s)
    texts = [str(s), fws.render_html(s, spans={(0, 0): span}), s._repr_html_(), str(d),
             d._repr_html_(), str(span), span._repr_html_()]  # fmt: skip
    assert all(placeholder in text or escape(placeholder) in text for text in texts)
    assert f"persistent keys: {placeholder}" in str(s)
    assert f"persistent_keys +{placeholder}" in str(d)


def test_repr_of_every_value_holding_such_a_key_shows_the_placeholder():
    """``repr`` is what a REPL echoes, pytest's assertion messages and debuggers print: it
    raised the key's ValueError for a state, a slot, a span, a diff, a trace event and a
    shortfall."""
    key = _UnprintableKey()
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((4096,), U8))
    s = fws.claim(s, (0, 0), key)[0]
    s, span, _ = fws.retain(s, (0, 0), key, ((300,), F32))
    trace = fws.Trace().claim((0, 0), key)
    (shortfall,) = fws.replay(fws.lock(fws.initial_state()), trace)
    values = [s, s.slots[0], span, fws.diff(fws.initial_state(), s), trace.events[0], shortfall]
    placeholder = "<a key of type _UnprintableKey whose repr raised ValueError>"
    for value in values:
        assert placeholder in repr(value), type(value).__name__
        assert repr(value).startswith(type(value).__name__ + "(")
    assert str(s.slots[0]) == repr(s.slots[0])
    assert repr(fws.initial_state()) == repr(fws.initial_state())  # the dataclass's own
    assert "WorkspaceState(num_ubatches=1" in repr(fws.initial_state())


def test_a_layout_table_lists_the_first_and_last_views_and_counts_the_rest():
    from functional_ws.display._values import SHOWN_VIEWS

    count = SHOWN_VIEWS + 31
    _, layout = fws.acquire(fws.initial_state(), (0, 0), *[((n + 1,), U8) for n in range(count)])
    html = layout._repr_html_()
    numbers = [int(n) for n in re.findall(r'<tr><td class="fws-num">(\d+)</td>', html)]
    half = SHOWN_VIEWS // 2
    assert numbers == [*range(half), *range(count - half, count)]
    assert f"31 views not shown (views {half} to {count - half - 1}" in html
    _, small = fws.acquire(fws.initial_state(), (0, 0), *[((1,), U8)] * SHOWN_VIEWS)
    assert "not shown" not in small._repr_html_()
    assert small._repr_html_().count('<tr><td class="fws-num">') == SHOWN_VIEWS


def test_a_notebooks_plain_text_is_bounded_where_print_gives_everything():
    """IPython stores the plain text beside the HTML in the .ipynb: a layout of 20,000
    views stored 476 KB of it. Its first and last lines now, and how many are left out."""
    from functional_ws._presenters import PRETTY_LINE_CHARS, PRETTY_LINES, bounded_text

    _, layout = fws.acquire(fws.initial_state(), (0, 0), *[((1,), U8)] * 20_000)
    full, shown = str(layout).splitlines(), pretty(layout).splitlines()
    assert len(full) > 20_000 and len(shown) == PRETTY_LINES + 1
    half = PRETTY_LINES // 2
    assert shown[:half] == full[:half] and shown[-half:] == full[-half:]
    left_out = len(full) - PRETTY_LINES
    assert shown[half] == f"... {left_out} lines not shown (print() shows every line) ..."
    _, small = fws.acquire(fws.initial_state(), (0, 0), ((1,), U8))
    assert pretty(small) == str(small)
    line = bounded_text("x" * (PRETTY_LINE_CHARS + 5))
    assert line == "x" * PRETTY_LINE_CHARS + "... (5 more characters)"
