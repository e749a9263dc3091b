"""The workspace over time: per slot capacity, high water, the retained span and growths."""

import re

import matplotlib
import numpy as np
import pytest

import functional_ws as fws
from functional_ws.display import plot_timeline, timeline_html
from functional_ws.display._timeline import timelines

matplotlib.use("Agg")
U8 = np.dtype("uint8")


def _states():
    s0 = fws.initial_state(num_ubatches=2)
    s1, _ = fws.acquire(s0, (0, 0), ((1000,), U8))
    s2, _, _ = fws.retain(s1, (0, 0), "kv", ((100,), U8))
    s3, _ = fws.acquire(s2, (1, 0), ((3000,), U8))
    s4, _ = fws.acquire(s3, (0, 0), ((2000,), U8))  # grows, drops the span
    return [s0, s1, s2, s3, s4]


def test_timelines_follow_capacity_high_water_retained_and_growths():
    t0, t1 = timelines(_states())
    assert t0.capacity == (0, 1024, 1024, 1024, 2048)
    assert t0.high_water == (0, 1024, 1024, 1024, 2048)
    assert t0.retained == (None, None, 768, 768, None)
    assert t0.growths == (1, 4) and t1.growths == (3,)
    assert timelines([]) == []


def test_timeline_html_draws_every_slot_and_marks_growths():
    html = timeline_html(_states(), ["start", "a", "b", "c", "d"])
    assert html.count("<polyline") == 4  # capacity and high water per slot
    assert len(re.findall(r"<circle ", html)) == 3  # the growths
    # the retained span, in two states: one band two calls wide (a run is drawn once)
    assert html.count('fill-opacity="0.35"') == 1 and 'width="184.8"' in html
    assert "<title>4: d: capacity 2.00 KiB (2,048 B)" in html
    assert max(map(ord, html)) <= 0xFFFF
    assert timeline_html([]) == "<i>no states recorded</i>"


def test_plot_timeline_has_a_strip_per_slot_in_bytes_not_left_on_pyplot():
    import matplotlib.pyplot as plt

    plt.close("all")
    fig = plot_timeline(_states(), ["start", "a", "b", "c", "d"])
    assert plt.get_fignums() == []
    assert [ax.get_ylabel() for ax in fig.axes] == ["slot (0, 0)", "slot (1, 0)"]
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "0 B" in labels and all(label.endswith("B") for label in labels if label)
    assert [t.get_text() for t in fig.axes[-1].get_xticklabels()] == ["start", "a", "b", "c", "d"]
    growth = [line for line in fig.axes[0].lines if line.get_marker() == "o"]
    assert [list(line.get_xdata()) for line in growth] == [[1.5, 4.5]]
    # the retained span, in two states: one band two calls wide (a run is drawn once; one
    # band per call took 30 s to draw for 16,000 calls)
    (band,) = fig.axes[0].collections
    xs = band.get_paths()[0].vertices[:, 0]
    assert (xs.min(), xs.max()) == (2, 4) and len(fig.axes[1].collections) == 0
    with pytest.raises(ValueError, match="at least one state"):
        plot_timeline([])


def test_plot_timeline_numbers_the_calls_when_their_names_do_not_fit():
    states = _states()
    fig = plot_timeline(states, ["get_simultaneous(((1000,), uint8), ((5,), int8))"] * 5)
    assert fig.axes[-1].get_xlabel() == "call (its index in the history)"


def test_past_the_hover_limit_a_run_is_named_by_the_call_that_started_it():
    s0 = fws.initial_state()
    s1, _ = fws.acquire(s0, (0, 0), ((10**6,), U8))
    html = timeline_html([s0, s1] + [s1] * 250, ["start", "grow"] + [f"c{i}" for i in range(250)])
    titles = re.findall(r"<title>([^<]*)</title>", html)
    assert titles[0].startswith("0: start: capacity 0 B")
    assert titles[1].startswith("1: grow (and the 250 calls to 251: no change here): capacity")


def _lost_buffer_state():
    """A slot whose growth failed twice: no buffer (capacity 0), high water 4 KiB."""
    s, _ = fws.acquire(fws.initial_state(), (0, 0), ((4096,), U8))
    grown, _ = fws.acquire(s, (0, 0), ((8192,), U8))
    lost = fws.after_failed_growth(s, grown, {(0, 0): 0})
    assert lost.capacity((0, 0)) == 0 and lost.slots[0].high_water == 4096
    return lost


def test_the_svg_scale_holds_a_high_water_mark_above_every_capacity():
    html = fws.display.timeline_html([_lost_buffer_state()] * 2)
    ys = [
        float(y)
        for points in re.findall(r'<polyline points="([^"]*)"', html)
        for y in re.findall(r",(-?[\d.]+)", points)
    ]
    assert ys and min(ys) >= 0, ys  # every line inside the picture
    assert ">4.00 KiB</text>" in html  # the scale's top: the high-water mark


def test_the_plots_scale_holds_a_high_water_mark_above_every_capacity():
    pytest.importorskip("matplotlib")
    (ax,) = fws.display.plot_timeline([_lost_buffer_state()] * 2).axes[:1]
    assert ax.get_ylim()[1] >= 4096


def test_a_slot_that_lost_its_buffer_is_drawn_before_slots_that_never_held_bytes():
    """A slot with a high-water mark held bytes (the state picture says so): among more
    slots than are drawn, it is drawn and counted as one that held bytes."""
    from functional_ws.display._text import MAX_DRAWN

    lanes = MAX_DRAWN + 4
    s, _ = fws.acquire(fws.initial_state(num_lanes=lanes), (0, lanes - 1), ((4096,), U8))
    grown, _ = fws.acquire(s, (0, lanes - 1), ((8192,), U8))
    lost = fws.after_failed_growth(s, grown, {(0, lanes - 1): 0})
    html = fws.display.timeline_html([lost, lost])
    assert f"slot {(0, lanes - 1)}" in html
    assert "4 more slots not drawn (all of them never held bytes)" in html
