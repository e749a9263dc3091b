"""The README's code examples run as written."""

import re
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()


def _block_after(heading: str) -> str:
    section = README.split(heading, 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


@pytest.mark.parametrize("heading", ["## In 30 seconds", "## The pure core"])
def test_readme_example_runs(heading):
    code = _block_after(heading)
    if heading == "## The pure core":  # the example shows a refused call on purpose
        import functional_ws

        with pytest.raises(functional_ws.WorkspaceLockedError):
            exec(code, {})
    else:
        exec(code, {})
