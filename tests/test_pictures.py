"""The pictures say what the state says: segments, HTML, matplotlib, diffs."""

import itertools

import matplotlib
import numpy as np
import pytest

import functional_ws as fws
from functional_ws.display import COLOURS, dtype_colour, slot_pictures

matplotlib.use("Agg")
F16, I32, U8 = np.dtype("float16"), np.dtype("int32"), np.dtype("uint8")


def _scene():
    s = fws.initial_state(num_ubatches=2)
    s, layout = fws.acquire(s, (0, 0), ((100,), F16), ((3,), I32))  # 200 B + pad, 12 B + pad
    s, _ = fws.reserve(s, [((2048,), U8)], slots=[(0, 0)])
    s, span, _ = fws.retain(s, (0, 0), "kv", ((300,), U8))
    return s, layout, span


def test_segments_cover_views_padding_free_and_tail():
    s, layout, span = _scene()
    (p0, p1) = slot_pictures(s, {(0, 0): layout}, {(0, 0): span})
    kinds = [(g.kind, g.start, g.end) for g in p0.segments]
    assert kinds == [
        ("view", 0, 200), ("padding", 200, 256), ("view", 256, 268), ("padding", 268, 512),
        ("free", 512, 1536), ("free", 1836, 2048), ("retained", 1536, 1836),
    ]  # fmt: skip
    assert p0.capacity == 2048 and p1.segments == ()
    assert p0.segments[0].colour == slot_pictures(s, {(0, 0): layout})[0].segments[0].colour


def test_clobbered_tail_is_marked():
    s, _, span = _scene()
    s2, big = fws.acquire(s, (0, 0), ((1600,), U8))  # reaches into the span
    (p0, _) = slot_pictures(s2, {(0, 0): big}, {(0, 0): span})
    assert p0.segments[-1].kind == "clobbered" and "clobbered" in p0.segments[-1].label
    covered = sorted((g.start, g.end) for g in p0.segments if g.kind != "clobbered")
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(covered))  # views, padding, free
    assert not any(g.kind == "free" and g.start < 1836 and g.end > 1536 for g in p0.segments)


def test_common_dtypes_have_distinct_colours():
    from functional_ws.display._picture import KNOWN_DTYPES

    assert len(set(KNOWN_DTYPES.values())) == len(KNOWN_DTYPES)
    assert dtype_colour("torch.float16") == dtype_colour(np.dtype("float16"))
    assert dtype_colour("torch.int32") != dtype_colour("torch.float16")


def test_html_shows_header_views_and_states():
    s, layout, span = _scene()
    html = fws.render_html(fws.lock(s), {(0, 0): layout}, {(0, 0): span})
    assert "locked" in html and "growth <code>slot</code>" in html
    assert "float16[100] @0" in html and "int32[3] @256" in html
    assert "retained &#x27;kv&#x27; (intact)" in html
    assert html.count('class="fws-row"') == 2
    assert "2.00 KiB" in html  # capacity of slot (0, 0)
    assert s._repr_html_() == fws.render_html(s)


def test_plot_draws_one_bar_per_slot_to_scale():
    s, layout, span = _scene()
    fig = fws.plot(s, {(0, 0): layout}, {(0, 0): span})
    ax = fig.axes[0]
    outlines = [p for p in ax.patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert sorted(p.get_width() for p in outlines) == [0, 2048]  # capacities, to scale
    widths = {round(p.get_x()): p.get_width() for p in ax.patches if p.get_width()}
    assert widths[0] in (200, 2048) and widths[1536] == 300  # a view and the retained tail
    assert "unlocked" in ax.get_title()


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


def test_views_never_look_like_the_tail_free_space_or_padding():
    from functional_ws.display._picture import DTYPE_PALETTE, KNOWN_DTYPES

    views = set(DTYPE_PALETTE) | set(KNOWN_DTYPES.values())
    for view in views:
        for kind, fixed in COLOURS.items():
            distance = sum((a - b) ** 2 for a, b in zip(_lab(view), _lab(fixed), strict=True))
            assert distance**0.5 > 25, (view, kind, fixed)  # clearly different hues
    fixed = list(COLOURS.values())
    for a, b in itertools.combinations(fixed, 2):
        assert sum((x - y) ** 2 for x, y in zip(_lab(a), _lab(b), strict=True)) ** 0.5 > 25


def test_png_legend_names_every_mark():
    s, layout, span = _scene()
    fig = fws.plot(s, {(0, 0): layout}, {(0, 0): span})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"padding", "free", "retained", "clobbered"} <= set(labels)
    assert "view: float16" in labels and "view: int32" in labels
    assert any(label.startswith("high water") for label in labels)
    assert any(label.startswith("capacity") for label in labels)


def test_renderers_take_explicit_inputs():
    s, _layout, _span = _scene()
    with pytest.raises(TypeError, match=r"ws\.plot\(\).*pass ws.state, ws.last_layouts"):
        fws.render_html(object())
    with pytest.raises(TypeError, match="WorkspaceState"):
        fws.plot({"state": s})
