"""A plain ``pip install`` of the built wheel, without extras, into a fresh virtual environment.

The environment is offline and fast: it borrows the installed runtime dependencies (torch,
jax, numpy and what they need, never an extra) from this one through a ``.pth`` file of
symlinks, so Hypothesis and matplotlib are missing there as they are for a user who ran
``pip install functional-ws``. Everything is built and installed under pytest's temporary
directory; nothing is written into the repository.
"""

from __future__ import annotations

import dataclasses
import email
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "functional_ws", "interop")
EXTRAS_ONLY = ("hypothesis", "matplotlib")


@dataclasses.dataclass(frozen=True)
class Installed:
    """The fresh environment and what was built for it."""

    python: Path
    script: Path
    wheel: Path
    sdist: Path
    workdir: Path

    def run(self, *args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run a command in the environment, from a folder outside the repository."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["JAX_PLATFORMS"] = "cpu"
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _runtime_closure(requirements: list[str]) -> set[str]:
    """The distributions the requirements need here, recursively, following the extras a
    dependency asks of another (torch's CUDA build needs cuda-toolkit[cudart,...]), never
    functional-ws's own extras."""
    seen: set[tuple[str, str]] = set()
    names: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        try:
            name = importlib.metadata.distribution(req.name).metadata["Name"].lower()
        except importlib.metadata.PackageNotFoundError:
            continue  # not needed here after all, or pip's check below says so
        names.add(name)
        for wanted in {"", *req.extras}:
            if (name, wanted) not in seen:
                seen.add((name, wanted))
                requires = importlib.metadata.requires(name) or []
                todo.extend((Requirement(r), wanted) for r in requires)
    return names


def _expose(names: set[str], folder: Path) -> None:
    """Symlink each distribution's top-level files (its packages and metadata) into folder."""
    folder.mkdir()
    for name in names:
        dist = importlib.metadata.distribution(name)
        tops = {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__")}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("install")
    source = base / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    dist = base / "dist"
    isolation = Version(importlib.metadata.version("setuptools")) < Version("77")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, source]
        + ([] if isolation else ["--no-build-isolation", "--no-index"]),
        check=True,
        cwd=base,
    )
    (wheel,) = dist.glob("functional_ws-*.whl")
    subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
         "b.build_sdist(sys.argv[1])", dist],
        check=True, cwd=source, capture_output=True,
    )  # fmt: skip
    (sdist,) = dist.glob("functional_ws-*.tar.gz")

    env = base / "venv"
    venv.create(env, with_pip=False, symlinks=True)
    python = env / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("functional_ws-0.1.0.dist-info/METADATA").decode()
    runtime = _runtime_closure(email.message_from_string(metadata).get_all("Requires-Dist", []))
    assert not runtime & set(EXTRAS_ONLY), "a runtime dependency pulls in an extra"
    _expose(runtime, base / "runtime")
    Path(site, "runtime-dependencies.pth").write_text(f"{base / 'runtime'}\n")
    # --no-index: pip must find every declared dependency already there, or fail.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--quiet",
            "--no-index",
            wheel,
        ],
        check=True,
        cwd=base,
    )
    installed_here = {p.name for p in Path(site).iterdir()}
    assert installed_here == {
        "functional_ws", "interop", "functional_ws-0.1.0.dist-info", "runtime-dependencies.pth"
    }, "pip installed more than the wheel: a dependency was missing"  # fmt: skip
    workdir = base / "work"
    workdir.mkdir()
    return Installed(python, env / "bin" / "functional-ws", wheel, sdist, workdir)


def test_the_extras_are_really_missing(installed: Installed) -> None:
    code = "import importlib.util as u; print([u.find_spec(m) is None for m in %r])"
    out = installed.run(installed.python, "-c", code % (EXTRAS_ONLY,))
    assert out.stdout.strip() == "[True, True]", out.stderr


def test_both_packages_import_from_the_installed_wheel(installed: Installed) -> None:
    out = installed.run(
        installed.python, "-c", "import functional_ws, interop; print(interop.__file__)"
    )
    assert out.returncode == 0, out.stderr
    assert "site-packages" in out.stdout and str(ROOT) not in out.stdout


def test_the_wheel_holds_every_package_and_the_license(installed: Installed) -> None:
    packages = {
        str(p.parent.relative_to(ROOT)).replace(os.sep, "/")
        for top in ("functional_ws", "interop")
        for p in (ROOT / top).rglob("__init__.py")
    }
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read("functional_ws-0.1.0.dist-info/METADATA").decode()
    assert {f"{p}/__init__.py" for p in packages} <= names
    assert "functional_ws-0.1.0.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    with tarfile.open(installed.sdist) as sdist:
        assert "functional_ws-0.1.0/LICENSE" in sdist.getnames()


def test_help_names_the_console_script(installed: Installed) -> None:
    out = installed.run(installed.script, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: functional-ws [-h] [--device DEVICE] [--png PATH]\n")
    assert "\n  functional-ws --device cpu --png layout.png\n" in out.stdout


def test_demo_runs_to_the_end_without_matplotlib(installed: Installed) -> None:
    out = installed.run(installed.script, "--device", "cpu")
    assert out.returncode == 0, out.stderr
    assert "step 3: the sampler's tail survived the step: True" in out.stdout
    assert "\nlayout (one character = " in out.stdout
    assert "matplotlib is not installed (pip install 'functional-ws[plot]')" in out.stdout
    assert "allocation from '_demo.py:" in out.stdout  # the demo's line, not the interpreter's
    assert out.stderr == ""


def test_asking_for_a_png_without_matplotlib_fails_after_the_demo(installed: Installed) -> None:
    out = installed.run(installed.python, "-m", "interop", "--device", "cpu", "--png", "x.png")
    assert out.returncode == 1
    assert "shares the view's memory: True" in out.stdout
    assert "python -m interop: no picture written to x.png" in out.stderr
    assert "allocation from '_demo.py:" in out.stdout and "<frozen" not in out.stdout
    assert not (installed.workdir / "x.png").exists()


MISSING_EXTRAS = {
    "functional_ws.testing": ("import functional_ws.testing", "testing"),
    "interop.testing": ("import interop.testing", "testing"),
    "functional_ws.plot": ("import functional_ws as f; f.plot(f.initial_state())", "plot"),
}
# One interpreter tries each, printing the error's type and message per line.
_TRY_EACH = """
import sys
for code in sys.argv[1:]:
    try:
        exec(code)
    except Exception as err:
        print(type(err).__name__, str(err).replace(chr(10), " "))
    else:
        print("no error")
"""


@pytest.fixture(scope="module")
def missing_extra_errors(installed: Installed) -> dict[str, str]:
    codes = [code for code, _ in MISSING_EXTRAS.values()]
    out = installed.run(installed.python, "-c", _TRY_EACH, *codes)
    assert out.returncode == 0, out.stderr
    return dict(zip(MISSING_EXTRAS, out.stdout.splitlines(), strict=True))


@pytest.mark.parametrize("what", list(MISSING_EXTRAS))
def test_a_missing_extra_names_what_to_install(missing_extra_errors: dict[str, str], what: str):
    error = missing_extra_errors[what]
    extra = MISSING_EXTRAS[what][1]
    assert error.startswith("ImportError ") and f"pip install 'functional-ws[{extra}]'" in error
