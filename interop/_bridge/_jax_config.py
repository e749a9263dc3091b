"""JAX's GPU memory settings for a process where torch and JAX share one GPU.

By default JAX preallocates most of a GPU (75%) at its first operation; a workspace that
both frameworks share is pointless if JAX has already taken the card. JAX reads its
allocator settings from the environment when its backend starts, so they must be set
before that: :func:`configure_jax_for_sharing` does it (and refuses when it is too late),
:func:`warn_if_jax_preallocates` tells the user once per process. Nothing here starts
JAX's backend or even imports JAX.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Mapping

import torch

from .. import _private
from .._errors import JaxAlreadyStartedError, JaxPreallocationWarning, JaxSettingError
from .._locks import renew_after_fork

PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
MEM_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"
#: The fraction's newer name (XLA's since 2024, read before the old one; jaxlib refuses to
#: start its GPU client when both are set).
NEW_MEM_FRACTION = "XLA_CLIENT_MEM_FRACTION"
#: The only values of PREALLOCATE that jaxlib reads as "off" (``xla_client``'s GPU
#: options): ``no``, ``FALSE`` or `` false`` leave preallocation on.
PREALLOCATE_OFF = ("false", "False", "0")
ALLOCATOR = "XLA_PYTHON_CLIENT_ALLOCATOR"
#: What JAX takes when nothing is set (JAX's GPU memory documentation).
DEFAULT_FRACTION = 0.75
_GPU_PLATFORMS = ("cuda", "rocm", "gpu")
_GPU_PLUGINS = (
    "jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13",
    "jax_rocm60_plugin", "jax_rocm7_plugin", "jax_plugins.xla_rocm60", "jax_plugins.xla_rocm7",
)  # fmt: skip

_warned = False
_warned_lock = threading.Lock()
renew_after_fork(sys.modules[__name__], "_warned_lock")  # a fork while a thread holds one


def configure_jax_for_sharing(
    *, preallocate: bool = False, mem_fraction: float | None = None
) -> dict[str, str]:
    """Set JAX's GPU allocator so it leaves the GPU to torch; call before JAX's first op.

    Sets ``XLA_PYTHON_CLIENT_PREALLOCATE`` (and ``XLA_PYTHON_CLIENT_MEM_FRACTION`` when
    given; ``XLA_CLIENT_MEM_FRACTION`` instead where the environment already has that
    newer name, since jaxlib refuses both) in ``os.environ``, which JAX reads when its
    backend starts. With ``preallocate=False`` (the default) JAX allocates as it goes;
    ``mem_fraction`` then caps its pool. With ``preallocate=True`` JAX takes exactly
    ``mem_fraction`` of the GPU up front.

    Args:
        preallocate: whether JAX may preallocate (then ``mem_fraction`` is required).
        mem_fraction: the share of GPU memory JAX may use, in ``(0, 1]``.

    Returns:
        The environment variables set, as a dict.

    Raises:
        JaxSettingError: (a ``ValueError``) ``mem_fraction`` outside ``(0, 1]``, or
            ``preallocate=True`` without it.
        JaxAlreadyStartedError: (a ``RuntimeError``) JAX's backend has already started with
            other settings: set them before the first JAX operation (``jax.devices()``,
            any ``jnp`` call), or in the environment before Python starts.

    Example:
        >>> import interop
        >>> interop.configure_jax_for_sharing()  # doctest: +SKIP
        {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false'}
    """
    settings = _settings(preallocate, mem_fraction)
    if jax_backend_started():
        if all(os.environ.get(name) == value for name, value in settings.items()):
            return settings  # already in force: calling twice is harmless
        raise JaxAlreadyStartedError(
            "configure_jax_for_sharing: JAX's backend has already started, so its GPU "
            f"memory settings can no longer change (wanted {settings}). Call it before the "
            "first JAX operation (jax.devices(), any jnp call, to_jax), or export "
            + " ".join(f"{k}={v}" for k, v in settings.items())
            + " before starting Python."
        )
    os.environ.update(settings)
    return settings


def _settings(preallocate: bool, mem_fraction: float | None) -> dict[str, str]:
    if mem_fraction is not None and not (
        isinstance(mem_fraction, (int, float))
        and not isinstance(mem_fraction, bool)
        and 0 < mem_fraction <= 1
    ):
        raise JaxSettingError(
            f"configure_jax_for_sharing: mem_fraction={mem_fraction!r} must be a number in "
            "(0, 1], the share of GPU memory JAX may use (e.g. 0.25)."
        )
    if preallocate and mem_fraction is None:
        raise JaxSettingError(
            "configure_jax_for_sharing: preallocate=True needs mem_fraction= (the share of "
            f"the GPU JAX takes up front); without it JAX takes {DEFAULT_FRACTION:.0%}."
        )
    settings = {PREALLOCATE: "true" if preallocate else "false"}
    if mem_fraction is not None:
        name = NEW_MEM_FRACTION if os.environ.get(NEW_MEM_FRACTION) else MEM_FRACTION
        settings[name] = f"{float(mem_fraction):g}"
    return settings


def jax_backend_started() -> bool:
    """Whether JAX's backend has started in this process (never starts it)."""
    if "jax" not in sys.modules:
        return False
    return _private.jax_backends_started()


def _jax_gpu_backend_started() -> bool:
    return any(name in _GPU_PLATFORMS for name in _private.jax_started_platforms())


def _gpu_plugin_installed() -> bool:
    for name in _GPU_PLUGINS:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ImportError:  # the parent package (jax_plugins) is absent
            continue
    return False


def preallocation_notice(
    environ: Mapping[str, str], *, started: bool, gpu_backend: bool, gpu_plugin: bool
) -> str | None:
    """What JAX has taken or will take of the GPU, or ``None`` when it leaves it alone.

    A pure function of the environment and JAX's state, so every case can be tested. The
    environment is read as jaxlib reads it when it starts its GPU client: preallocation
    is off only for ``false``, ``False`` or ``0``; ``XLA_CLIENT_MEM_FRACTION`` before
    ``XLA_PYTHON_CLIENT_MEM_FRACTION``; both set, JAX refuses to start it (and takes
    nothing).

    Args:
        environ: the process environment.
        started: whether JAX's backend has started.
        gpu_backend: whether a GPU backend is among the started ones.
        gpu_plugin: whether a JAX GPU plugin is installed (for a backend not started yet).

    Returns:
        A phrase such as ``"has preallocated 75%"``, or ``None``.

    Example:
        >>> preallocation_notice({}, started=False, gpu_backend=False, gpu_plugin=True)
        'will preallocate, at its first operation, 75%'
        >>> env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        >>> preallocation_notice(env, started=True, gpu_backend=True, gpu_plugin=True) is None
        True
    """
    if environ.get(ALLOCATOR, "").lower() == "platform":
        return None
    if environ.get(PREALLOCATE) in PREALLOCATE_OFF:
        return None
    newer, older = environ.get(NEW_MEM_FRACTION), environ.get(MEM_FRACTION)
    if newer and older and not started:  # jaxlib's own error will say so
        return None
    platforms = environ.get("JAX_PLATFORMS", "").lower()
    if platforms and not any(p in platforms for p in _GPU_PLATFORMS):
        return None
    if (started and not gpu_backend) or (not started and not gpu_plugin):
        return None
    try:
        fraction = float(newer or older or DEFAULT_FRACTION)
    except ValueError:
        fraction = DEFAULT_FRACTION
    verb = "has preallocated" if started else "will preallocate, at its first operation,"
    return f"{verb} {fraction:.0%}"


def warn_if_jax_preallocates(device: torch.device | str, *, stacklevel: int = 2) -> bool:
    """Warn once per process when JAX takes most of the GPU a workspace lives on.

    Meant for the workspace manager's constructor on CUDA devices; cheap, never starts JAX.

    Args:
        device: the workspace's device; only CUDA devices can warn.
        stacklevel: as for ``warnings.warn``, counted from the caller of this function
            (a constructor calling it passes 3 to point at its own caller).

    Returns:
        Whether this call warned (``False`` for later calls, other devices, or when JAX
        leaves the GPU alone).

    Example:
        >>> warn_if_jax_preallocates("cpu")
        False
    """
    global _warned
    if _warned or torch.device(device).type != "cuda":
        return False
    started = jax_backend_started()
    notice = preallocation_notice(
        os.environ,
        started=started,
        gpu_backend=started and _jax_gpu_backend_started(),
        gpu_plugin=not started and _gpu_plugin_installed(),
    )
    if notice is None:
        return False
    said = os.environ.get(PREALLOCATE)
    misread = (
        ""
        if said is None or said.strip().lower() not in ("false", "0", "no", "off")
        else f" ({PREALLOCATE}={said!r} is not off: JAX reads only false, False or 0 as off)"
    )
    with _warned_lock:
        if _warned:
            return False
        _warned = True
    warnings.warn(
        JaxPreallocationWarning(
            f"functional_ws: the workspace lives on {device}, and JAX {notice} of this GPU's "
            f"memory{misread}, which torch and the workspace then cannot use. Call "
            "interop.configure_jax_for_sharing() before JAX's first operation, or set "
            f"{PREALLOCATE}=false (or {MEM_FRACTION}=.25) in the environment before "
            "starting Python."
        ),
        stacklevel=stacklevel,
    )
    return True
