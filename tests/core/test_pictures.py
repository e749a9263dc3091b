"""The pictures say what the state says: segments, placement, HTML, matplotlib."""

import itertools
import re

import matplotlib
import numpy as np
import pytest
from support.scenes import U8, core_scene

import functional_ws as fws
from functional_ws.display import COLOURS, dtype_colour, slot_pictures
from functional_ws.display._html import BAR_PX, MIN_VIEW_PX
from functional_ws.display._picture import place

matplotlib.use("Agg")
F32, I32 = np.dtype("float32"), np.dtype("int32")


def test_segments_cover_views_padding_free_and_tail():
    s, layout, span = core_scene()
    (p0, p1) = slot_pictures(s, {(0, 0): layout}, {(0, 0): span})
    kinds = [(g.kind, g.start, g.end) for g in p0.segments]
    assert kinds == [
        ("view", 0, 200), ("padding", 200, 256), ("view", 256, 268), ("padding", 268, 512),
        ("free", 512, 1536), ("retained", 1536, 1836), ("free", 1836, 2048),
    ]  # fmt: skip
    assert p0.capacity == 2048 and p1.segments == ()
    assert p0.segments[0].colour == slot_pictures(s, {(0, 0): layout})[0].segments[0].colour


def test_a_state_alone_calls_the_bytes_below_high_water_requested_not_free():
    s, _, _ = core_scene()
    kinds = [(g.kind, g.start, g.end) for g in slot_pictures(s)[0].segments]
    assert kinds == [
        ("requested", 0, 512), ("free", 512, 1536), ("retained", 1536, 2048),
    ]  # fmt: skip


def test_views_of_the_last_request_below_earlier_high_water_leave_requested_bytes():
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((1000,), U8))
    s, small = fws.acquire(s, (0, 0), ((10,), U8))
    kinds = [(g.kind, g.start, g.end) for g in slot_pictures(s, {(0, 0): small})[0].segments]
    assert kinds == [("view", 0, 10), ("padding", 10, 256), ("requested", 256, 1024)]


def test_clobbered_tail_is_a_band_over_the_views_that_reach_into_it():
    s, _, span = core_scene()
    s2, big = fws.acquire(s, (0, 0), ((1600,), U8))  # reaches into the span
    (p0, _) = slot_pictures(s2, {(0, 0): big}, {(0, 0): span})
    rows = [g for g in p0.segments if not g.over]
    bands = [g for g in p0.segments if g.over]
    assert [(g.kind, g.start, g.end) for g in bands] == [("clobbered", 1536, 1792)]
    assert all(a.end == b.start for a, b in itertools.pairwise(rows))  # back to back
    assert rows[0].start == 0 and rows[-1].end == 2048
    assert ("clobbered", 1792, 1836) in [(g.kind, g.start, g.end) for g in rows]
    assert "clobbered" in bands[0].label


def test_zero_sized_views_are_drawn():
    s, layout = fws.acquire(fws.initial_state(), (0, 0), ((0,), F32), ((4,), F32))
    (p,) = slot_pictures(s, {(0, 0): layout})
    assert [(g.kind, g.start, g.end) for g in p.views] == [("view", 0, 0), ("view", 0, 16)]
    placed = place(p, 100, 4)
    assert all(
        x1 - x0 >= 4
        for (x0, x1), g in zip(placed.spans, p.segments, strict=True)
        if g.kind == "view"
    )


@pytest.mark.parametrize("tiny", [1, 5, 40])
def test_placement_keeps_every_view_at_least_the_minimum_and_the_bar_to_length(tiny):
    s, layout = fws.acquire(
        fws.initial_state(), (0, 0), ((2**19,), F32), *[((k + 1,), I32) for k in range(tiny)]
    )
    (p,) = slot_pictures(s, {(0, 0): layout})
    placed = place(p, 500, 4)
    widths = [x1 - x0 for x0, x1 in placed.spans]
    views = [w for w, g in zip(widths, p.segments, strict=True) if g.kind == "view"]
    assert min(views) >= 4 - 1e-9 and len(views) == tiny + 1
    assert placed.width == pytest.approx(500) and placed.spans[-1][1] == pytest.approx(500)
    assert all(a[1] == pytest.approx(b[0]) for a, b in itertools.pairwise(placed.spans))
    big = widths[0] / 500
    assert big == pytest.approx(2**21 / p.capacity, abs=0.01 * tiny)  # the rest to scale


def test_placement_keeps_a_bar_too_short_for_its_views_to_length():
    """30 views cannot each be 4 wide in a bar of 50: they share half of it, and the bar
    stays 50 long (it was once lengthened to 240, longer than larger slots' bars)."""
    s, layout = fws.acquire(fws.initial_state(), (0, 0), *[((1,), U8)] * 30)
    (p,) = slot_pictures(s, {(0, 0): layout})
    placed = place(p, 50, 4)
    assert placed.width == 50 and placed.spans[-1][1] == pytest.approx(50)
    views = [x1 - x0 for (x0, x1), g in zip(placed.spans, p.segments, strict=True)
             if g.kind == "view"]  # fmt: skip
    assert views == [pytest.approx(50 / 60)] * 30


def _slots_of_6_and_8_5_kib_beside_a_large_one():
    """Slot (1, 0): 24 views of 256 B (6 KiB); slot (2, 0): one 8.5 KiB view; slot (0, 0):
    64 KiB. Their views' minimum widths once drew the 6 KiB slot 192 px long, longer than
    the 8.5 KiB one at 74 px."""
    s = fws.initial_state(num_ubatches=3)
    s, big = fws.acquire(s, (0, 0), ((2**16,), U8))
    s, many = fws.acquire(s, (1, 0), *[((16,), F32)] * 24)
    s, one = fws.acquire(s, (2, 0), ((17 * 512,), U8))
    return s, {(0, 0): big, (1, 0): many, (2, 0): one}


def test_html_bars_stay_to_scale_when_tiny_views_are_widened():
    s, layouts = _slots_of_6_and_8_5_kib_beside_a_large_one()
    assert [s.capacity(slot) for slot in layouts] == [65536, 6144, 8704]
    html = fws.render_html(s, layouts)
    widths = [float(w) for w in re.findall(r'class="fws-bar[^"]*" data-capacity="\d+" '
                                           r'style="width:([\d.]+)px', html)]  # fmt: skip
    assert widths == [BAR_PX, pytest.approx(BAR_PX * 6144 / 65536, abs=0.01),
                      pytest.approx(BAR_PX * 8704 / 65536, abs=0.01)]  # fmt: skip
    views = [float(w) for _, w in _html_views(html)]
    assert len(views) == 26 and min(views[1:25]) == pytest.approx(
        BAR_PX * 6144 / 65536 / 48, abs=0.01
    )


def test_plot_bars_stay_to_scale_when_tiny_views_are_widened():
    s, layouts = _slots_of_6_and_8_5_kib_beside_a_large_one()
    fig = fws.plot(s, layouts)
    outlines = [p for p in fig.axes[0].patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert sorted(p.get_width() for p in outlines) == [6144, 8704, 65536]


def test_common_dtypes_have_distinct_colours():
    from functional_ws.display._picture import KNOWN_DTYPES

    assert len(set(KNOWN_DTYPES.values())) == len(KNOWN_DTYPES)
    assert dtype_colour("torch.float16") == dtype_colour(np.dtype("float16"))
    assert dtype_colour(np.float32) == dtype_colour(np.dtype("float32"))  # a scalar type too
    assert dtype_colour("torch.int32") != dtype_colour("torch.float16")
    for (a, x), (b, y) in itertools.combinations(KNOWN_DTYPES.items(), 2):
        assert _distance(x, y) > 25, (a, b)  # int32 and uint8 looked alike once


def _html_views(html):
    return re.findall(r'class="fws-seg fws-view"[^>]*style="left:([\d.]+)px;width:([\d.]+)px', html)


def test_html_shows_header_views_keys_and_exact_bytes_on_hover():
    s, layout, span = core_scene()
    html = fws.render_html(fws.lock(s), {(0, 0): layout}, {(0, 0): span})
    assert "<b>WorkspaceState</b>: 2 ubatches x 1 lane" in html and "LOCKED" in html
    assert 'title="float16[100]: 200 B at offset 0 B"' in html
    assert 'title="int32[3]: 12 B at offset 256 B"' in html
    assert "retained &#x27;kv&#x27; (intact)" in html
    assert html.count('class="fws-row"') == 2
    assert "2.00 KiB, high water 512 B" in html and "no buffer yet" in html
    keys = re.findall(r'class="fws-key" data-key="([^"]+)"', html)
    assert keys == ["float16", "int32", "padding", "free", "retained", "high water"]
    assert s._repr_html_() == fws.render_html(s)
    assert all(float(w) >= MIN_VIEW_PX for _, w in _html_views(html))


def test_html_bars_are_to_scale_and_no_wider_than_their_views_need():
    s, layout, _ = core_scene()
    s, other = fws.acquire(s, (1, 0), ((256,), U8))
    html = fws.render_html(s, {(0, 0): layout, (1, 0): other})
    widths = [float(w) for w in re.findall(r'class="fws-bar[^"]*" data-capacity="(?:2048|256)" '
                                           r'style="width:([\d.]+)px', html)]  # fmt: skip
    assert widths == [BAR_PX, pytest.approx(BAR_PX * 256 / 2048)]


def test_html_labels_are_whole_or_absent():
    s, layout, span = core_scene()
    html = fws.render_html(s, {(0, 0): layout}, {(0, 0): span})
    for width, label in re.findall(
        r'width:([\d.]+)px;[^>]*><span class="fws-label[^"]*">([^<]*)<', html
    ):
        assert len(label) * 6.3 + 6 <= float(width), (label, width)
    labels = re.findall(r'<span class="fws-label[^"]*">([^<]*)</span>', html)
    assert "retained &#x27;kv&#x27; (intact)" in labels or "retained" in labels


def test_html_uses_no_glyph_outside_the_basic_multilingual_plane():
    s, layout, span = core_scene()
    for html in (fws.render_html(fws.lock(s), {(0, 0): layout}, {(0, 0): span}), s._repr_html_()):
        assert max(map(ord, html)) <= 0xFFFF


def test_plot_draws_one_bar_per_slot_starting_at_zero():
    s, layout, span = core_scene()
    fig = fws.plot(s, {(0, 0): layout}, {(0, 0): span})
    ax = fig.axes[0]
    outlines = [p for p in ax.patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert sorted(p.get_width() for p in outlines) == [0, 2048]  # capacities, to scale
    assert "unlocked" in ax.get_title() and "WorkspaceState" in ax.get_title()
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_position()[0] >= 0]
    assert ticks[0] == "0 B" and ax.get_xlim()[0] == 0


def test_plot_widens_tiny_views_and_keeps_them_in_order():
    s, layout = fws.acquire(
        fws.initial_state(), (0, 0), ((2**19,), F32), *[((k + 1,), I32) for k in range(5)]
    )
    fig = fws.plot(s, {(0, 0): layout})
    views = [p for p in fig.axes[0].patches if p.get_facecolor()[:3] != (1.0, 1.0, 1.0)]
    views = [p for p in views if matplotlib.colors.to_hex(p.get_facecolor()) in
             {dtype_colour("float32").lower(), dtype_colour("int32").lower()}]  # fmt: skip
    widths = [p.get_width() for p in views]
    assert len(widths) == 6 and min(widths) >= 0.01 * s.capacity((0, 0)) * 0.999
    lefts = [p.get_x() for p in views]
    assert lefts == sorted(lefts)


def test_plot_is_not_left_on_pyplot():
    import matplotlib.pyplot as plt

    plt.close("all")
    s, layout, span = core_scene()
    fig = fws.plot(s, {(0, 0): layout}, {(0, 0): span})
    assert plt.get_fignums() == []
    assert fig._repr_png_().startswith(b"\x89PNG")
    _, ax = plt.subplots()
    assert fws.plot(s, ax=ax) is ax.figure  # drawing into the caller's axes
    plt.close("all")


def test_png_legend_names_every_mark_drawn():
    s, layout, span = core_scene()
    fig = fws.plot(s, {(0, 0): layout}, {(0, 0): span})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "view: float16" in labels and "view: int32" in labels
    assert {"alignment padding", "free (above high water)", "retained span, intact"} <= set(labels)
    assert "retained span, clobbered" not in labels  # nothing is clobbered here
    assert any(label.startswith("high water") for label in labels)
    assert any(label.startswith("capacity") for label in labels)


def test_renderers_take_explicit_inputs():
    s, _layout, _span = core_scene()
    with pytest.raises(TypeError, match=r"ws\.plot\(\).*pass ws.state, ws.last_layouts"):
        fws.render_html(object())
    with pytest.raises(TypeError, match="WorkspaceState"):
        fws.plot({"state": s})


def _lab(colour):
    """CIE L*a*b* of a ``#rrggbb`` colour (D65), for perceptual distances."""
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    m = ((0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505))
    xyz = [sum(a * b for a, b in zip(row, lin, strict=True)) for row in m]
    ref = (0.95047, 1.0, 1.08883)
    f = [(t / r) ** (1 / 3) if t / r > 0.008856 else 7.787 * t / r + 16 / 116
         for t, r in zip(xyz, ref, strict=True)]  # fmt: skip
    return (116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2]))


def _distance(a, b):
    return sum((x - y) ** 2 for x, y in zip(_lab(a), _lab(b), strict=True)) ** 0.5


def test_views_never_look_like_the_tail_free_space_or_padding():
    from functional_ws.display._picture import DTYPE_PALETTE, KNOWN_DTYPES

    views = set(DTYPE_PALETTE) | set(KNOWN_DTYPES.values())
    for view in views:
        for kind, fixed in COLOURS.items():
            assert _distance(view, fixed) > 25, (view, kind, fixed)  # clearly different hues
    for a, b in itertools.combinations(COLOURS.values(), 2):
        assert _distance(a, b) > 25


def test_html_bands_carry_no_label_only_hover_text():
    s, _, span = core_scene()
    s2, big = fws.acquire(s, (0, 0), ((1600,), U8))  # reaches into the span
    html = fws.render_html(s2, {(0, 0): big}, {(0, 0): span})
    (band,) = re.findall(r'<div class="fws-seg fws-clobbered fws-band"[^>]*>(.*?)</div>', html)
    assert band == ""
    assert 'fws-band" data-start="1536" data-end="1792" title="retained &#x27;kv&#x27;' in html


def test_views_past_the_first_hundred_are_one_range_named_by_count_and_dtypes():
    from functional_ws.display._picture import MAX_DRAWN_VIEWS

    specs = [((300,), U8)] * (MAX_DRAWN_VIEWS + 50) + [((7,), F32)]
    s, layout = fws.acquire(fws.initial_state(), (0, 0), *specs)
    (p,) = slot_pictures(s, {(0, 0): layout})
    assert len(p.views) == MAX_DRAWN_VIEWS
    (more,) = [g for g in p.segments if g.kind == "more"]
    assert (more.start, more.end) == (layout.offsets[MAX_DRAWN_VIEWS], layout.total)
    assert more.label == "51 more views" and "(uint8, float32)" in more.detail
    tiles = [g for g in p.segments if not g.over]  # still back to back, 0 to capacity
    assert all(a.end == b.start for a, b in itertools.pairwise(tiles))
    assert tiles[0].start == 0 and tiles[-1].end == s.capacity((0, 0))
    html = fws.render_html(s, {(0, 0): layout})
    assert html.count('class="fws-seg fws-view"') == MAX_DRAWN_VIEWS
    assert "51 more views" in html and "more views, not drawn one by one" in html
    placed = place(p, BAR_PX, MIN_VIEW_PX)  # the range gets a view's minimum width
    x0, x1 = placed.spans[p.segments.index(more)]
    assert x1 - x0 >= BAR_PX / (2 * (MAX_DRAWN_VIEWS + 1)) - 1e-9


def test_a_request_of_twenty_thousand_views_draws_in_kilobytes():
    s, layout = fws.acquire(fws.initial_state(), (0, 0), *[((1,), U8)] * 20_000)
    assert len(fws.render_html(s, {(0, 0): layout})) < 60_000  # it was 5 MB
    assert len(layout._repr_html_()) < 60_000
    assert str(layout).count("\n") == 20_000  # the text still lists every view


@pytest.mark.parametrize("clobbered", [False, True], ids=["intact", "clobbered"])
def test_a_small_retained_span_beside_much_scratch_is_drawn_visible(clobbered):
    """A 125 KiB tail beside 64 MiB of scratch was 1 px to scale, hidden by the bar's
    border (a clobbered band 0.01 px): each part of it gets a view's minimum width."""
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((64 << 20,), U8), ((32000,), F32))
    s, span, _ = fws.retain(s, (0, 0), "sampler", ((32000,), F32))
    layouts = {}
    if clobbered:  # a request reaching into all but the span's last bytes
        s, layouts[(0, 0)] = fws.acquire(s, (0, 0), ((s.capacity((0, 0)) - 1000,), U8))
    (p,) = slot_pictures(s, layouts, {(0, 0): span})
    placed = place(p, BAR_PX, MIN_VIEW_PX)
    kind = "clobbered" if clobbered else "retained"
    parts = [xs for g, xs in zip(p.segments, placed.spans, strict=True) if g.kind == kind]
    assert parts and len(parts) == (2 if clobbered else 1)  # clobbered: a tile and a band
    assert all(x1 - x0 >= MIN_VIEW_PX - 1e-9 for x0, x1 in parts)
    assert all(x0 >= 0 and x1 <= placed.width + 1e-9 for x0, x1 in parts)
    html = fws.render_html(s, layouts, {(0, 0): span})
    widths = re.findall(rf'class="fws-seg fws-{kind}[^"]*"[^>]*width:([\d.]+)px', html)
    assert widths and all(float(w) >= MIN_VIEW_PX for w in widths)


def test_html_of_many_slots_draws_sixteen_and_says_how_many_are_left_out():
    """2,000 ubatches drew 2,000 bars (1 MB); the plot and timeline stopped at 16."""
    from functional_ws.display._text import MAX_DRAWN

    s = fws.initial_state(num_ubatches=2000)
    for u in (5, 1999):
        s, _ = fws.acquire(s, (u, 0), ((4096,), U8))
    html = fws.render_html(s)
    slots = re.findall(r'class="fws-row" data-slot="\((\d+), 0\)"', html)
    assert len(slots) == MAX_DRAWN and {"5", "1999"} <= set(slots)  # those that hold bytes
    assert f"{2000 - MAX_DRAWN} more slots not drawn (all of them never held bytes)" in html
    assert len(html) < 20_000


def test_html_names_twenty_persistent_keys_of_a_slot_and_counts_the_rest():
    from functional_ws.display._html import SHOWN_KEYS

    s = fws.initial_state()
    for i in range(SHOWN_KEYS + 5):
        s, _ = fws.claim(s, (0, 0), f"key{i:03d}")
    html = fws.render_html(s)
    assert f"{SHOWN_KEYS + 5} persistent keys: " in html
    assert f"&#x27;key{SHOWN_KEYS - 1:03d}&#x27;, ... 5 more keys" in html
    assert f"key{SHOWN_KEYS:03d}" not in html


def test_a_slot_that_lost_its_buffer_is_not_captioned_as_never_having_had_one():
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((4096,), U8))
    grown, _ = fws.acquire(s, (0, 0), ((8192,), U8))
    emptied = fws.after_failed_growth(s, grown, {(0, 0): 0})  # the old size failed too
    assert emptied.capacity((0, 0)) == 0
    html = fws.render_html(emptied)
    assert "no buffer now, high water 4.00 KiB" in html and "no buffer yet" not in html
    assert "no buffer yet" in fws.render_html(fws.initial_state())
    many = fws.initial_state(num_ubatches=20)  # among slots left out of the picture, it
    many, _ = fws.acquire(many, (19, 0), ((4096,), U8))  # counts as one that held bytes
    grown, _ = fws.acquire(many, (19, 0), ((8192,), U8))
    lost = fws.after_failed_growth(many, grown, {(19, 0): 0})
    html = fws.render_html(lost)
    assert 'data-slot="(19, 0)"' in html and "never held bytes)" in html
    assert "4 more slots not drawn (all of them never held bytes)" in html
    pytest.importorskip("matplotlib")
    fig = fws.plot(lost)  # the plot picks its slots alike (it read capacity alone)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "slot (19, 0)" in labels
    assert "4 more slots not drawn (all of them never held bytes)" in fig.axes[0].get_title()


def test_a_numpy_scalar_type_dtype_is_named_as_its_dtype_in_every_display():
    """The core takes np.float32 for a dtype; the displays named it "<class
    'numpy.float32'>" and gave it a colour of its own, beside float32's."""
    state, layout = fws.acquire(fws.initial_state(), (0, 0), ((100,), np.float32))
    for shown in (str(layout), layout._repr_html_(), fws.render_html(state, {(0, 0): layout}, {})):
        assert "numpy.float32" not in shown and "float32" in shown
