"""Execute notebooks the way the test suite does: a fresh kernel, cells in order, on the CPU.

``tests/docs/test_notebooks.py`` executes each notebook with :func:`execute`; ``make notebooks``
(``python tests/support/notebook_runner.py notebooks/*.ipynb``) executes them the same way and
writes their outputs back, without timings, so that a re-run changes nothing when the
notebooks are deterministic.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbclient
import nbformat

#: The kernel's environment: JAX on the CPU, matplotlib without a window.
ENVIRONMENT = {"JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}


def execute(path: Path, workdir: Path, *, record_timing: bool = True) -> nbformat.NotebookNode:
    """Run every cell of the notebook at ``path`` in a fresh kernel started in ``workdir``.

    Returns:
        The executed notebook (outputs filled in).

    Raises:
        nbclient.exceptions.CellExecutionError: a cell raised.
    """
    saved = {k: os.environ.get(k) for k in ENVIRONMENT}
    os.environ.update({k: os.environ.get(k, v) if k == "JAX_PLATFORMS" else v
                       for k, v in ENVIRONMENT.items()})  # fmt: skip
    try:
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            record_timing=record_timing,
            resources={"metadata": {"path": str(workdir)}},
        )
        client.execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def coalesce_streams(nb: nbformat.NotebookNode) -> None:
    """Join each cell's consecutive outputs to the same stream into one, as Jupyter shows
    them: how the kernel split a cell's prints into messages depends on timing."""
    for cell in nb.cells:
        joined: list[nbformat.NotebookNode] = []
        for output in cell.get("outputs", []):
            last = joined[-1] if joined else None
            if (
                last is not None
                and output.output_type == last.output_type == "stream"
                and output.name == last.name
            ):
                last.text += output.text
            else:
                joined.append(output)
        if cell.cell_type == "code":
            cell.outputs = joined


def main(paths: list[str]) -> None:
    """Execute each notebook and write its outputs back."""
    for name in paths:
        path = Path(name)
        with tempfile.TemporaryDirectory() as workdir:
            nb = execute(path, Path(workdir), record_timing=False)
        coalesce_streams(nb)
        nbformat.write(nb, path)
        print(f"executed {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
