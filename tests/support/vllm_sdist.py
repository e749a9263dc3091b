"""vLLM's own tests, taken from its release on PyPI at test time and run against ``interop``.

vLLM's code is never committed here: the release's sdist (which holds its ``tests/``) is
downloaded once, its sha256 checked, and kept in an ignored folder (``.venv/cache/`` unless
``FUNCTIONAL_WS_CACHE_DIR`` says otherwise); a test file is read out of it (without
extracting anything else), the workspace module's path is rewritten to ``interop`` and
nothing else, and the result runs under pytest in a fresh interpreter.

Without network: point ``FUNCTIONAL_WS_VLLM_SDIST`` at copies of the sdists (one path, or
several separated by ``os.pathsep``); each release takes the one with its sha256, and fails
if none has it. ``FUNCTIONAL_WS_OFFLINE=1`` turns a failed download into a skip; without
it, a failed download fails the test, because a compatibility suite that skips itself
quietly is a test that cannot fail.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from support.user_module import pytest_user_module

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Sdist:
    """A release's source archive on PyPI, and the files taken from it (by sha256)."""

    name: str
    url: str
    sha256: str
    members: dict[str, str]  # path inside the archive (below ``name/``) -> sha256


VLLM_0_33_0 = Sdist(
    name="vllm-0.33.0",
    url="https://files.pythonhosted.org/packages/f7/25/"
    "aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/vllm-0.33.0.tar.gz",
    sha256="f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
    members={
        "tests/v1/worker/test_workspace.py": (
            "f47f29c07234bfb363033738937df40790621e1845209a678a857809eae90327"
        ),
        "vllm/v1/worker/workspace.py": (
            "bcf9ea207279c38a476be4ca74137a9d3a973f1fd97d85639a383357f881eb06"
        ),
    },
)

#: 0.34.0 added ``get_retained`` and ``_VIEW_ALIGNMENT`` to the workspace module, and six
#: ``get_retained`` cases to its test file (the lane-count test lost a parametrisation).
VLLM_0_34_0 = Sdist(
    name="vllm-0.34.0",
    url="https://files.pythonhosted.org/packages/92/21/"
    "6e0b077dc4a0b28f5a8ce8bb352a38d7196650d681fd4faa87f8dc622eff/vllm-0.34.0.tar.gz",
    sha256="fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113",
    members={
        "tests/v1/worker/test_workspace.py": (
            "beefc2f7ede90b2e8f5830e370de478c6e691c33ff7205ca22399fd8bc7b1132"
        ),
        "vllm/v1/worker/workspace.py": (
            "ab0702dd0384370929362b954b30d64a44edb9521c498a7c0cb5eff46e22b197"
        ),
    },
)

#: The workspace module's path, in the spellings a test can import or patch it by.
_DOTTED = re.compile(r"\bvllm\.v1\.worker\.workspace\b")
_FROM_PACKAGE = re.compile(r"^(\s*)from vllm\.v1\.worker import workspace\b", re.M)


def rewrite_module_path(source: str) -> str:
    """``source`` with vLLM's workspace module replaced by ``interop``, and nothing else.

    ``import vllm.v1.worker.workspace as ws``, ``from vllm.v1.worker.workspace import f``
    and ``patch("vllm.v1.worker.workspace.name")`` name the module by its dotted path; ``from
    vllm.v1.worker import workspace`` becomes ``import interop as workspace``.

    Raises:
        ValueError: ``source`` never names the workspace module (the wrong file).
    """
    rewritten, dotted = _DOTTED.subn("interop", source)
    rewritten, packaged = _FROM_PACKAGE.subn(r"\1import interop as workspace", rewritten)
    if dotted + packaged == 0:
        raise ValueError("the source never names vllm.v1.worker.workspace")
    return rewritten


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cache_dir() -> Path:
    folder = Path(os.environ.get("FUNCTIONAL_WS_CACHE_DIR") or ROOT / ".venv" / "cache")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _checked(data: bytes, expected: str, what: str) -> bytes:
    if _sha256(data) != expected:
        pytest.fail(
            f"{what} has sha256 {_sha256(data)}, expected {expected}: a corrupt or "
            "different file. Delete it (or fix FUNCTIONAL_WS_VLLM_SDIST) and run again.",
            pytrace=False,
        )
    return data


def _archive(sdist: Sdist) -> bytes:
    """The sdist's bytes: from ``FUNCTIONAL_WS_VLLM_SDIST``, the cache, or PyPI."""
    given = os.environ.get("FUNCTIONAL_WS_VLLM_SDIST")
    if given:
        found = []
        for path in filter(None, given.split(os.pathsep)):
            data = Path(path).read_bytes()
            if _sha256(data) == sdist.sha256:
                return data
            found.append(f"{path} has {_sha256(data)}")
        pytest.fail(
            f"FUNCTIONAL_WS_VLLM_SDIST={given} holds no {sdist.name} sdist: expected sha256 "
            f"{sdist.sha256}, but {'; '.join(found) or 'it names no file'}. Add that "
            f"release's sdist ({sdist.url}), paths separated by {os.pathsep!r}.",
            pytrace=False,
        )
    cached = _cache_dir() / f"{sdist.name}.tar.gz"
    if cached.exists():
        return _checked(cached.read_bytes(), sdist.sha256, str(cached))
    try:
        with urllib.request.urlopen(sdist.url, timeout=60) as response:
            data = response.read()
    except OSError as err:
        advice = (
            f"could not download {sdist.url} ({err}). vLLM's own tests come from its "
            "release on PyPI; download that file and add its path to "
            "FUNCTIONAL_WS_VLLM_SDIST, or set FUNCTIONAL_WS_OFFLINE=1 to skip these tests."
        )
        if os.environ.get("FUNCTIONAL_WS_OFFLINE") == "1":
            pytest.skip(f"FUNCTIONAL_WS_OFFLINE=1: {advice}")
        pytest.fail(advice, pytrace=False)
    _write_atomically(cached, _checked(data, sdist.sha256, sdist.url))
    return data


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` so that a concurrent run sees the whole file or none of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    partial.write_bytes(data)
    partial.replace(path)


def sdist_member(sdist: Sdist, member: str) -> str:
    """The text of ``member`` (a path below the archive's top folder), sha256 checked.

    Cached beside the archive, so later runs read neither the archive nor the network.
    """
    expected = sdist.members[member]
    cached = _cache_dir() / sdist.name / member
    if cached.exists() and _sha256(cached.read_bytes()) == expected:
        return cached.read_text(encoding="utf-8")
    wanted = f"{sdist.name}/{member}"
    with tarfile.open(fileobj=io.BytesIO(_archive(sdist)), mode="r:gz") as tar:
        for info in tar:
            if info.name == wanted and info.isfile():
                handle = tar.extractfile(info)
                assert handle is not None
                data = _checked(handle.read(), expected, f"{wanted} in {sdist.url}")
                break
        else:
            pytest.fail(f"{wanted} is not in {sdist.url}", pytrace=False)
    _write_atomically(cached, data)
    return data.decode("utf-8")


#: Stand-ins for the two vLLM modules that ``test_workspace.py`` imports besides the
#: workspace: only its first test uses them, and that test is deselected (it checks vLLM's
#: config and worker, not the workspace). Calling them fails, so a test that needed them
#: could not pass by accident.
STAND_INS = '''\
"""Stand-ins for vLLM modules the upstream test file imports; none of them is vLLM."""

import sys
import types


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def _not_vllm(*args, **kwargs):
    raise NotImplementedError("a stand-in: this test needs vLLM itself and is deselected")


class VllmConfig:
    def __init__(self, *args, **kwargs):
        _not_vllm()


for _name in ("vllm", "vllm.v1", "vllm.v1.worker"):
    _module(_name, __path__=[])
_module("vllm.config", VllmConfig=VllmConfig)
_module("vllm.v1.worker.gpu_worker", _num_workspace_lanes=_not_vllm)
'''


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One upstream test's result: ``passed``, ``failed``, ``error`` or ``skipped``."""

    outcome: str
    detail: str


def run_upstream_tests(
    folder: Path, source: str, deselect: tuple[str, ...] = ()
) -> tuple[dict[str, Outcome], str]:
    """Run ``source`` (an upstream test module, rewritten) under pytest in ``folder``.

    Args:
        folder: an empty folder to run in.
        source: the test module's text.
        deselect: test function names to deselect (every parametrisation of each).

    Returns:
        Each collected test's outcome, by pytest's test name (``test_x[param]``), and
        pytest's output.
    """
    (folder / "conftest.py").write_text(STAND_INS)
    (folder / "pytest.ini").write_text("[pytest]\n")  # not our pyproject's settings
    report = folder / "report.xml"
    args = [f"--junitxml={report}"]
    for name in deselect:
        args += ["--deselect", f"test_mine.py::{name}"]
    done = pytest_user_module(folder, source, *args)
    output = done.stdout + done.stderr
    if not report.exists():
        pytest.fail(f"pytest wrote no report:\n{output}", pytrace=False)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                detail = (found.get("message") or "") + "\n" + (found.text or "")
        outcomes[case.get("name", "")] = Outcome(outcome, detail)
    return outcomes, output
