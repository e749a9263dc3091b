"""The display contracts of the pure core that bugs planted in functional_ws.display
showed untested: a layout table's last padding, escaped keys in a diff, a slot that lost
its buffer, a clobbered span, the timeline's growth marks, axis and hover boxes, a long
trace's count of events left out. Each test fails with its planted bug.
"""

import re

import numpy as np

import functional_ws as fws

U8 = np.dtype("uint8")
XSS = "<img src=x onerror=alert(1)>"


def _no_raw_tag(html: str) -> bool:
    return "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_a_layout_table_gives_every_views_padding_the_last_included():
    """Every view's padding is its own, the last view's included (not 0 B)."""
    _, layout = fws.acquire(fws.initial_state(), (0, 0), ((100,), U8), ((3,), U8))
    html = fws.display._values.layout_html(layout)
    rows = html.split("<tr>")[2:]
    paddings = [re.findall(r'class="fws-num" title="[^"]*">([^<]*)</td>', r)[-1] for r in rows]
    assert paddings == ["156 B", "253 B"]


def test_a_diff_table_escapes_persistent_keys():
    """A persistent key in a diff's table is escaped (a notebook renders it as text)."""
    s0 = fws.initial_state()
    s1, _ = fws.claim(s0, (0, 0), XSS)
    html = fws.diff(s0, s1)._repr_html_()
    assert _no_raw_tag(html)


def test_a_slot_that_lost_its_buffer_draws_no_range_past_its_capacity():
    """A slot with no buffer (capacity 0, high water 4 KiB) draws no requested range."""
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((4096,), U8))
    grown, _ = fws.acquire(s, (0, 0), ((8192,), U8))
    emptied = fws.after_failed_growth(s, grown, {(0, 0): 0})
    (picture,) = fws.display.slot_pictures(emptied)
    assert picture.capacity == 0 and picture.high_water == 4096
    assert all(seg.end <= picture.capacity for seg in picture.segments)
    assert "fws-requested" not in fws.render_html(emptied)


def test_a_span_whose_key_is_retained_again_elsewhere_is_drawn_clobbered():
    """A span whose key is retained again at another offset is drawn clobbered, not
    intact because its key is still retained: its bytes are not the ones it had."""
    s = fws.initial_state()
    s, _ = fws.reserve(s, [((4096,), U8)])
    s, old, _ = fws.retain(s, (0, 0), "kv", ((300,), U8))
    s, new, _ = fws.retain(s, (0, 0), "kv", ((600,), U8))
    assert old.offset != new.offset and s.slots[0].retained == ("kv", new.offset)
    (picture,) = fws.display.slot_pictures(s, spans={(0, 0): old})
    assert [seg.kind for seg in picture.segments if "kv" in seg.label] == ["clobbered"]


def test_a_reallocation_to_the_same_capacity_is_marked_a_growth():
    """A failed growth that allocated the old capacity again reallocated the slot: a mark."""
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((4096,), U8))
    grown, _ = fws.acquire(s, (0, 0), ((8192,), U8))
    again = fws.after_failed_growth(s, grown, {(0, 0): 4096})
    assert again.capacity((0, 0)) == 4096 and again.slots[0].growths == 2
    (line,) = fws.display._timeline.timelines([s, again])
    assert line.growths == (1,)


def test_the_timelines_axis_names_the_last_call_by_its_index():
    """Three states are calls 0 to 2: the axis ends at "call 2"."""
    states = [fws.initial_state()] * 3
    html = fws.display.timeline_html(states)
    assert ">call 0</text>" in html and ">call 2</text>" in html and "call 3" not in html


def test_every_call_has_a_hover_box_of_its_own_up_to_the_limit():
    """Up to MAX_HOVERS calls each has a hover box of its own; past it, runs share one."""
    from functional_ws.display._timeline import MAX_HOVERS

    states = [fws.initial_state()] * MAX_HOVERS
    html = fws.display.timeline_html(states)
    assert html.count('fill="transparent"') == MAX_HOVERS
    html = fws.display.timeline_html([*states, fws.initial_state()])
    assert html.count('fill="transparent"') == 1


def test_a_long_trace_counts_the_events_it_leaves_out():
    """A trace longer than its text shows says how many events it leaves out."""
    from functional_ws.display._sizing import SHOWN

    trace = fws.Trace()
    for i in range(SHOWN + 5):
        trace = trace.acquire((0, 0), ((i + 1,), U8))
    lines = str(trace).splitlines()
    assert lines[-1] == "  ... 5 more events" and len(lines) == 1 + SHOWN + 1
