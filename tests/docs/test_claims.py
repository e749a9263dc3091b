"""What the docs say about vLLM matches its releases: no release has ``reserve`` or
``try_get_simultaneous`` (PR #42551 proposed both and was closed without merging; vLLM
0.34.0, the newest, added ``get_retained`` only). Notebook 04 once said upstream "has since
added" them; the façade's docstrings called them "upstream vLLM's method"."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Phrases that say a vLLM release has the PR's methods, each once written here.
CLAIMS = [
    r"has since added",
    r"the way upstream vLLM now does",
    r"upstream has the method",
    r"is upstream's too",
    r"upstream vLLM's method",
    r"upstream's :meth:`reserve`",
    r"means what upstream vLLM's `reserve` means",
    r"Upstream has no lanes",
]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOURCES = sorted([*(ROOT / "interop").rglob("*.py"), *(ROOT / "functional_ws").rglob("*.py")])


def _notebook_text(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])


@pytest.mark.parametrize("path", NOTEBOOKS + SOURCES + [ROOT / "README.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))  # fmt: skip
def test_no_text_says_a_vllm_release_has_reserve_or_try_get_simultaneous(path):
    text = _notebook_text(path) if path.suffix == ".ipynb" else path.read_text()
    text = " ".join(text.split())  # a phrase may be wrapped over lines
    assert [c for c in CLAIMS if re.search(c, text)] == []


def test_notebook_04_says_where_reserve_and_try_get_simultaneous_come_from():
    text = " ".join(_notebook_text(ROOT / "notebooks" / "04_migrating_from_vllm.ipynb").split())
    assert (
        "PR #42551 proposed `WorkspaceManager.reserve(*shapes_and_dtypes)` and was closed" in text
    )
    assert "no vLLM release has a way to reserve" in text
    assert "`try_get_simultaneous` comes from the same unmerged PR" in text
