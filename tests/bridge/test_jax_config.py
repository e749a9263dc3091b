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
from interop._bridge._jax_config import NEW_MEM_FRACTION as NEW_FRACTION

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
    for name in (
        PREALLOCATE,
        MEM_FRACTION,
        NEW_FRACTION,
        "XLA_PYTHON_CLIENT_ALLOCATOR",
        "JAX_PLATFORMS",
    ):
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


#: Environments as a user writes them, each read by jaxlib itself below.
AS_JAXLIB_READS = [
    ("nothing", {}),
    ("off", {PREALLOCATE: "false"}),
    ("off-capitalised", {PREALLOCATE: "False"}),
    ("off-zero", {PREALLOCATE: "0"}),
    ("no-is-not-off", {PREALLOCATE: "no"}),
    ("upper-case-is-not-off", {PREALLOCATE: "FALSE"}),
    ("padded-is-not-off", {PREALLOCATE: " false"}),
    ("on", {PREALLOCATE: "true"}),
    ("old-fraction", {MEM_FRACTION: ".4"}),
    ("new-fraction", {NEW_FRACTION: ".2"}),
    ("new-fraction-preallocating", {PREALLOCATE: "true", NEW_FRACTION: ".3"}),
    ("new-fraction-off", {PREALLOCATE: "false", NEW_FRACTION: ".3"}),
]


def _jaxlib_gpu_options(env, monkeypatch):
    """What jaxlib's GPU client is started with in ``env`` (its own reading of it)."""
    xla_client = pytest.importorskip("jaxlib.xla_client")
    options = getattr(xla_client, "generate_pjrt_gpu_plugin_options", None)
    if options is None:
        pytest.skip("this jaxlib reads the environment elsewhere")
    for name in (PREALLOCATE, MEM_FRACTION, NEW_FRACTION, "XLA_PYTHON_CLIENT_ALLOCATOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return options()


@pytest.mark.parametrize(
    "env", [e[1] for e in AS_JAXLIB_READS], ids=[e[0] for e in AS_JAXLIB_READS]
)
def test_the_notice_reads_the_environment_as_jaxlib_does(env, monkeypatch):
    """Whether JAX preallocates, and how much, as jaxlib's GPU client options say: a value
    jaxlib reads as "on" ("no", "FALSE") gets the warning, the newer fraction counts."""
    options = _jaxlib_gpu_options(env, monkeypatch)
    preallocates = options.get("preallocate", True)
    fraction = options.get("memory_fraction", _jax_config.DEFAULT_FRACTION)
    notice = preallocation_notice(env, started=True, gpu_backend=True, gpu_plugin=True)
    assert notice == (f"has preallocated {fraction:.0%}" if preallocates else None)


def test_a_value_jax_reads_as_on_is_named_in_the_warning(fresh_warning, monkeypatch):
    monkeypatch.setenv(PREALLOCATE, "no")
    with pytest.warns(interop.errors.JaxPreallocationWarning) as record:
        assert warn_if_jax_preallocates("cuda:0") is True
    message = str(record[0].message)
    assert f"{PREALLOCATE}='no'" in message and "false, False or 0" in message, message


def test_both_fraction_names_mean_jax_will_not_start_its_gpu_client(monkeypatch):
    """jaxlib refuses to start with both names set (its own error says so): JAX takes
    nothing then, so there is no preallocation to warn about."""
    env = {MEM_FRACTION: ".5", NEW_FRACTION: ".5"}
    with pytest.raises(ValueError, match="specified together"):
        _jaxlib_gpu_options(env, monkeypatch)
    assert preallocation_notice(env, started=False, gpu_backend=False, gpu_plugin=True) is None


def test_configure_sets_the_fraction_name_the_environment_already_uses(monkeypatch):
    """With XLA_CLIENT_MEM_FRACTION set, setting the old name too would stop jaxlib from
    starting its GPU client: the name already in use is the one set."""
    monkeypatch.setattr(_jax_config, "jax_backend_started", lambda: False)
    monkeypatch.delenv(PREALLOCATE, raising=False)
    monkeypatch.delenv(MEM_FRACTION, raising=False)
    monkeypatch.setenv(NEW_FRACTION, ".3")
    settings = interop.configure_jax_for_sharing(mem_fraction=0.25)
    assert settings == {PREALLOCATE: "false", NEW_FRACTION: "0.25"}
    assert MEM_FRACTION not in _jax_config.os.environ
    options = _jaxlib_gpu_options(dict(_jax_config.os.environ), monkeypatch)  # no error
    assert options["memory_fraction"] == 0.25 and options["preallocate"] is False


@pytest.mark.parametrize("fraction", [True, False], ids=str)
def test_a_bool_is_not_a_fraction(fraction, monkeypatch):
    monkeypatch.delenv(PREALLOCATE, raising=False)
    with pytest.raises(interop.errors.JaxSettingError, match=f"mem_fraction={fraction}"):
        interop.configure_jax_for_sharing(mem_fraction=fraction)
    assert PREALLOCATE not in _jax_config.os.environ
