"""The displays inside a real Jupyter kernel: what each cell's last line shows, and how often.

A figure made with pyplot as a cell's last line used to show twice (once as the result,
once when the inline backend flushed pyplot's figures); here every figure shows exactly
once, with the inline backend and with Agg, and each value displays as HTML with readable
text beside it.
"""

import nbclient
import nbformat
import pytest

SETUP = """
import torch
import functional_ws as fws
from interop import WorkspaceManager, use_workspace_ubatch
ws = WorkspaceManager("cpu", num_ubatches=2)
with ws.recording() as history:
    before = ws.state
    ws.get_simultaneous(((2**19,), torch.float32), ((3,), torch.int32), ((5,), torch.uint8))
    ws.get_retained("kv", (64,), torch.float32)
    with use_workspace_ubatch(1):
        ws.get_simultaneous(((100,), torch.bfloat16))
layout = ws.last_layouts[(0, 0)]
"""
CELLS = {
    "manager plot": "ws.plot()",
    "core plot": "fws.plot(ws.state, ws.last_layouts, ws.last_spans)",
    "history plot": "history.plot()",
    "plot with a semicolon": "ws.plot();",
    "manager": "ws",
    "state": "ws.state",
    "stats": "ws.stats()",
    "history": "history",
    "diff": "fws.diff(before, ws.state)",
    "layout": "layout",
    "span": "ws.last_spans[(0, 0)]",
}


def _run(backend: str) -> dict[str, list]:
    cells = [nbformat.v4.new_code_cell(SETUP)]
    if backend == "inline":
        cells.insert(0, nbformat.v4.new_code_cell("%matplotlib inline"))
    cells += [nbformat.v4.new_code_cell(code) for code in CELLS.values()]
    nb = nbformat.v4.new_notebook(cells=cells)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    return dict(zip(CELLS, [c.outputs for c in nb.cells[-len(CELLS) :]], strict=True))


@pytest.fixture(scope="module", params=["inline", "Agg"])
def outputs(request, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("JAX_PLATFORMS", "cpu")
    if request.param == "Agg":
        mp.setenv("MPLBACKEND", "Agg")  # as tests/docs/test_notebooks.py runs the notebooks
    else:
        mp.delenv("MPLBACKEND", raising=False)
    mp.chdir(tmp_path_factory.mktemp("kernel"))
    try:
        yield _run(request.param)
    finally:
        mp.undo()


def _images(outputs) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.parametrize("cell", ["manager plot", "core plot", "history plot"])
def test_a_figure_as_the_last_line_shows_exactly_once(outputs, cell):
    assert _images(outputs[cell]) == 1, outputs[cell]


def test_a_figure_after_a_semicolon_shows_nothing(outputs):
    assert _images(outputs["plot with a semicolon"]) == 0  # not left on pyplot to flush


@pytest.mark.parametrize(
    ("cell", "html", "text"),
    [
        ("manager", "<b>WorkspaceManager on cpu</b>", "WorkspaceManager(device=cpu, 2 ubatches"),
        ("state", "<b>WorkspaceState</b>", "WorkspaceState: 2 ubatches x 1 lane"),
        ("stats", "<b>WorkspaceStats</b>", "WorkspaceStats: unlocked, capacity"),
        ("history", "<svg", "  0  start in slot (0, 0)"),
        ("diff", "<th>where</th>", "slot (0, 0): capacity 0 B → 2.00 MiB"),
        ("layout", "<b>Layout</b>", "Layout of slot (0, 0): 3 views"),
        ("span", "<b>Span</b>", "Span 'kv' of slot (0, 0): float32[64]"),
    ],
)
def test_values_display_as_html_with_readable_text(outputs, cell, html, text):
    (result,) = outputs[cell]
    assert html in result["data"]["text/html"]
    assert result["data"]["text/plain"].startswith(text), result["data"]["text/plain"]
    assert len(result["data"]["text/plain"]) < 2000  # no wall of raw repr
