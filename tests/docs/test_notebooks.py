"""The notebooks are documentation that runs: execute each one (cells in order, fresh kernel).

A notebook's GPU cells skip themselves without CUDA. Each is meant to finish in under 60 s
on an idle 2-core CPU; that is measured (``pytest --durations``), not asserted, since a
timed assertion would be flaky on a loaded machine. ``make notebooks`` executes them the
same way (``tests/support/notebook_runner.py``) and writes their outputs back.
"""

from pathlib import Path

import pytest
from support.notebook_runner import execute

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nb = execute(path, tmp_path)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 1
