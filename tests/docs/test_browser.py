"""The displays, rendered by a real browser and measured in the page.

A page of displays (managers of every shape in ``_scenes.py``, their bare states, their
statistics, a recorded history, a layout, a span, a diff) is loaded in headless Chromium
(Debian's ``chromium``; ``.ci/run`` installs it). A script in the page measures what a
reader sees: every slot's bar to scale with the widest of its display, every view element
at least 2 px wide (or its share of half a bar too short for that) and not covered by its
neighbour, a colour key for every dtype drawn in each display, no label wider than its
range, no glyph outside the Basic Multilingual Plane. The screenshot is kept in
``out/browser/`` to look at. Without Chromium the test is skipped, except under CI (``CI``
set), where it fails.
"""

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from support.scenes import managers, recorded_history

import functional_ws as fws

OUT = Path(__file__).resolve().parents[2] / "out" / "browser"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
]  # fmt: skip
MEASURE = """
<pre id="fws-result"></pre>
<script>
(function () {
  const r = {views: 0, narrow: [], covered: [], missing: [], cut: [], astral: [], dtypes: [],
             bars: 0, scale: []};
  const inner = bar => {  // the bar's drawn length, inside its border
    const style = getComputedStyle(bar);
    return bar.getBoundingClientRect().width - parseFloat(style.borderLeftWidth)
      - parseFloat(style.borderRightWidth);
  };
  for (const block of document.querySelectorAll('.fws')) {
    const keys = new Set([...block.querySelectorAll('.fws-key[data-dtype]')]
      .map(k => k.dataset.dtype));
    const bars = [...block.querySelectorAll('.fws-bar')].map(bar => ({
      bar: bar, capacity: Number(bar.dataset.capacity), width: inner(bar)}));
    const widest = bars.reduce((a, b) => (b.capacity > a.capacity ? b : a), bars[0]);
    for (const item of bars) {
      r.bars += 1;
      const expected = widest.capacity ? widest.width * item.capacity / widest.capacity : 0;
      if (!(Math.abs(item.width - expected) <= 0.5))
        r.scale.push(item.capacity + ' B drawn ' + item.width.toFixed(2) + ' px, not '
          + expected.toFixed(2));
    }
    for (const bar of block.querySelectorAll('.fws-bar')) {
      const views = [...bar.querySelectorAll(':scope > .fws-view')].map(v => ({
        v: v, box: v.getBoundingClientRect()})).sort((a, b) => a.box.left - b.box.left);
      const least = Math.min(2, inner(bar) / (2 * views.length)) - 1 / 32;  // layout units
      views.forEach((item, i) => {
        r.views += 1;
        if (item.box.width < least) r.narrow.push(item.v.title + ' ' + item.box.width);
        if (i > 0 && item.box.left < views[i - 1].box.right - 0.5) r.covered.push(item.v.title);
        if (!keys.has(item.v.dataset.dtype)) r.missing.push(item.v.dataset.dtype);
        if (!r.dtypes.includes(item.v.dataset.dtype)) r.dtypes.push(item.v.dataset.dtype);
      });
    }
  }
  for (const label of document.querySelectorAll('.fws-label')) {
    const own = label.getBoundingClientRect(), room = label.parentElement.getBoundingClientRect();
    if (own.right > room.right + 0.5 || label.scrollWidth > label.clientWidth + 0.5)
      r.cut.push(label.textContent);
  }
  for (const ch of document.documentElement.outerHTML + document.body.innerText)
    if (ch.codePointAt(0) > 0xFFFF) r.astral.push(ch.codePointAt(0).toString(16));
  document.getElementById('fws-result').textContent = JSON.stringify(r);
})();
</script>
"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's package")
        pytest.skip("needs chromium (apt-get install -y chromium)")
    return found


def _run(page: Path, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [_chromium(), *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
    return done.stdout


def measure(body: str, page: Path) -> dict:
    """Load ``body`` (and the measuring script) in Chromium; what the script found."""
    page.write_text(f'<!doctype html><html><head><meta charset="utf-8"></head><body>{body}'
                    f"{MEASURE}</body></html>", encoding="utf-8")  # fmt: skip
    dom = _run(page, "--window-size=1280,2000", "--dump-dom")
    found = re.search(r'<pre id="fws-result">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), f"the page's script did not run:\n{dom[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def _displays() -> str:
    parts = []
    for name, ws in managers().items():
        parts += [f"<h3>{html.escape(name)}</h3>", ws._repr_html_(), ws.state._repr_html_(),
                  ws.stats()._repr_html_()]  # fmt: skip
    ws, history = recorded_history()
    parts += ["<h3>a recorded warm-up</h3>", history._repr_html_(), ws._repr_html_()]
    state, layout = fws.acquire(
        fws.initial_state(), (0, 0), ((3, 4), np.dtype("float32")), ((7,), np.dtype("int8"))
    )
    state, span, _ = fws.retain(state, (0, 0), "kv", ((64,), np.dtype("uint8")))
    parts += [layout._repr_html_(), span._repr_html_(), fws.diff(fws.initial_state(), state)
              ._repr_html_()]  # fmt: skip
    return "".join(parts)


def test_every_view_is_visible_keyed_and_the_page_stays_in_the_bmp():
    OUT.mkdir(parents=True, exist_ok=True)
    page = OUT / "displays.html"
    found = measure(_displays(), page)
    assert found["views"] >= 60  # the scenes draw that many views
    assert found["bars"] >= 30 and found["scale"] == [], f"bars not to scale: {found['scale']}"
    assert found["narrow"] == [], f"views narrower than 2 px: {found['narrow']}"
    assert found["covered"] == [], f"views covered by their neighbours: {found['covered']}"
    assert found["missing"] == [], f"dtypes drawn without a key: {found['missing']}"
    assert found["cut"] == [], f"labels wider than their range: {found['cut']}"
    assert found["astral"] == [], f"glyphs outside the BMP: {found['astral']}"
    assert {"float32", "bfloat16", "int32", "uint8", "float8_e4m3fn"} <= set(found["dtypes"])
    shot = OUT / "displays.png"
    _run(page, "--window-size=1280,4200", f"--screenshot={shot}")
    assert shot.stat().st_size > 20_000


def test_the_measurement_finds_what_it_looks_for(tmp_path):
    """A page with a 1 px view, a view without a key, a cut label, an emoji and a bar
    longer than a larger slot's fails."""
    bad = (
        '<div class="fws"><div class="fws-bar" data-capacity="8704" style="width:81px"></div>'
        '<div class="fws-bar" data-capacity="6144" style="width:105px"></div>'
        '<div class="fws-bar" data-capacity="1024" style="position:relative;width:300px">'
        '<div class="fws-view fws-seg" data-dtype="int32" title="thin" '
        'style="position:absolute;left:0;width:1px">x</div>'
        '<div class="fws-view fws-seg" data-dtype="float32" title="wide" '
        'style="position:absolute;left:0.2px;width:40px;overflow:hidden">'
        '<span class="fws-label" style="display:inline-block">clobbered-label-text</span></div>'
        '</div><span class="fws-key" data-dtype="int32"></span>\U0001f512</div>'
    )
    found = measure(bad, tmp_path / "bad.html")
    assert found["narrow"] == ["thin 1"] and found["covered"] == ["wide"]
    assert found["missing"] == ["float32"] and found["cut"] == ["clobbered-label-text"]
    assert set(found["astral"]) == {"1f512"}
    assert found["scale"] == [
        "6144 B drawn 105.00 px, not 57.18",
        "1024 B drawn 300.00 px, not 9.53",
    ]
