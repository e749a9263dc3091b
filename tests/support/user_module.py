"""Run a user's test module under pytest, the way a user would: in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def pytest_user_module(folder: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Write ``source`` (dedented) to ``folder/test_mine.py`` and run pytest on it there.

    A ``PytestCollectionWarning`` is an error: a kit class that pytest tries to collect as a
    test fails the run, as it would annoy the user. ``args`` go to pytest after the file.
    """
    (folder / "test_mine.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
         "error::pytest.PytestCollectionWarning", "test_mine.py", *args],
        cwd=folder, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
