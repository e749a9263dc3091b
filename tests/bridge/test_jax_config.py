"""JAX's GPU memory settings: configure before the backend starts, warn once when it hogs."""

from __future__ import annotations

import linecache
import subprocess
import sys
import textwrap
import warnings

import jax
import pytest

import interop
from interop._bridge import _jax_config
from interop._bridge._jax_config import (
    MEM_FRACTION,
    PREALLOCATE,
    preallocation_notice,
    warn_if_jax_preallocates,
)

WILL = "will preallocate, at its first operation, 75%"
NOTICES = [
    ("default-before-start", {}, (False, False, True), WILL),
    ("default-started", {}, (True, True, True), "has preallocated 75%"),
    ("fraction", {MEM_FRACTION: ".9"}, (True, True, True), "has preallocated 90%"),
    ("bad-fraction-means-default", {MEM_FRACTION: "x"}, (True, True, True), "has preallocated 75%"),
    ("preallocate-false", {PREALLOCATE: "false"}, (True, True, True), None),
    ("preallocate-0", {PREALLOCATE: "0"}, (False, False, True), None),
    ("platform-allocator", {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, (True, True, True), None),
    ("jax-cpu-only", {"JAX_PLATFORMS": "cpu"}, (False, False, True), None),
    ("jax-platforms-cuda", {"JAX_PLATFORMS": "cuda,cpu"}, (False, False, True), WILL),
    ("started-without-gpu", {}, (True, False, True), None),
    ("no-gpu-plugin", {}, (False, False, False), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "state", "expected"), [n[1:] for n in NOTICES], ids=[n[0] for n in NOTICES]
)
def test_preallocation_notice(env, state, expected):
    started, gpu_backend, gpu_plugin = state
    notice = preallocation_notice(
        env, started=started, gpu_backend=gpu_backend, gpu_plugin=gpu_plugin
    )
    assert notice == expected


@pytest.fixture
def fresh_warning(monkeypatch):
    """A process where JAX has not started and a GPU plugin is installed, not yet warned."""
    monkeypatch.setattr(_jax_config, "_warned", False)
    monkeypatch.setattr(_jax_config, "jax_backend_started", lambda: False)
    monkeypatch.setattr(_jax_config, "_gpu_plugin_installed", lambda: True)
    for name in (PREALLOCATE, MEM_FRACTION, "XLA_PYTHON_CLIENT_ALLOCATOR", "JAX_PLATFORMS"):
        monkeypatch.delenv(name, raising=False)


def test_warns_once_per_process_with_the_fix(fresh_warning):
    with pytest.warns(
        interop.errors.JaxPreallocationWarning, match=r"configure_jax_for_sharing.*=false"
    ):
        assert warn_if_jax_preallocates("cuda:0") is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_jax_preallocates("cuda:0") is False


def test_warning_points_at_the_callers_caller(fresh_warning):
    def constructor():
        warn_if_jax_preallocates("cuda", stacklevel=3)

    with pytest.warns(interop.errors.JaxPreallocationWarning) as record:
        constructor()  # the user's line
    assert record[0].filename == __file__
    assert "the user's line" in linecache.getline(__file__, record[0].lineno)


def test_no_warning_for_cpu_or_when_preallocation_is_off(fresh_warning, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_jax_preallocates("cpu") is False
        monkeypatch.setenv(PREALLOCATE, "false")
        assert warn_if_jax_preallocates("cuda") is False


BAD_SETTINGS = [
    ("fraction-zero", {"mem_fraction": 0}),
    ("fraction-above-one", {"mem_fraction": 1.5}),
    ("fraction-not-a-number", {"mem_fraction": "0.5"}),
    ("preallocate-without-fraction", {"preallocate": True}),
]


@pytest.mark.parametrize("kwargs", [b[1] for b in BAD_SETTINGS], ids=[b[0] for b in BAD_SETTINGS])
def test_bad_settings_are_refused_and_change_nothing(kwargs, monkeypatch):
    monkeypatch.delenv(PREALLOCATE, raising=False)
    with pytest.raises(interop.errors.JaxSettingError) as info:
        interop.configure_jax_for_sharing(**kwargs)
    assert isinstance(info.value, ValueError)
    assert PREALLOCATE not in _jax_config.os.environ


def test_too_late_in_this_process_is_a_clear_error(monkeypatch):
    jax.devices()  # JAX's backend is running
    monkeypatch.setenv(PREALLOCATE, "true")
    with pytest.raises(interop.errors.JaxAlreadyStartedError, match="already started") as info:
        interop.configure_jax_for_sharing()
    assert isinstance(info.value, RuntimeError)
    assert _jax_config.os.environ[PREALLOCATE] == "true"


def test_configure_before_jax_starts_then_too_late():
    code = textwrap.dedent(
        """
        import os, interop
        assert not interop._bridge._jax_config.jax_backend_started()
        print(interop.configure_jax_for_sharing(mem_fraction=0.25))
        env = os.environ
        print(env["XLA_PYTHON_CLIENT_PREALLOCATE"], env["XLA_PYTHON_CLIENT_MEM_FRACTION"])
        import jax; jax.devices()
        print(interop.configure_jax_for_sharing(mem_fraction=0.25))  # same settings: harmless
        try:
            interop.configure_jax_for_sharing(preallocate=True, mem_fraction=0.5)
        except interop.errors.JaxAlreadyStartedError as err:
            print("refused:", "before the first JAX operation" in str(err))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"JAX_PLATFORMS": "cpu"},
        timeout=120,
    )
    settings = (
        "{'XLA_PYTHON_CLIENT_PREALLOCATE': 'false', 'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.25'}"
    )
    assert out.stdout.splitlines() == [settings, "false 0.25", settings, "refused: True"], (
        out.stderr[-2000:]
    )
