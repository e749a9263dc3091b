"""What every GPU check section shares: the row type and the verdict words."""

from __future__ import annotations

#: ``(check, result, detail)``: one line of ``gpu_check.py``'s closing table.
Row = tuple[str, str, str]


def verdict(ok: bool) -> str:
    """``PASS`` or ``FAIL``."""
    return "PASS" if ok else "FAIL"
