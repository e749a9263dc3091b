"""Errors of the torch <-> JAX handoff: one class per failure kind.

Each subclasses the builtin that JAX's own ``from_dlpack(copy=False)`` (or torch's
``__dlpack__``) raises for the same failure, so ``except ValueError`` / ``except TypeError``
keeps working, and all are :class:`functional_ws.WorkspaceError`.
"""

from __future__ import annotations

from functional_ws import WorkspaceError


class HandoffError(WorkspaceError):
    """Base class of the JAX interop errors (``to_jax``, ``to_torch``, ``jax_call``, settings)."""


class ZeroCopyError(HandoffError, ValueError):
    """The handoff would need a copy; it is refused instead of copying silently.

    Attributes:
        reason: a short machine-readable reason (``"layout"``, ``"alignment"``,
            ``"device"``, ``"conjugate"``, ``"sharded"``).
    """

    reason = "copy"


class UnsupportedLayoutError(ZeroCopyError):
    """The tensor's strides are not a permutation of a dense layout (step slice, expand...)."""

    reason = "layout"


class MisalignedViewError(ZeroCopyError):
    """JAX cannot alias the pointer (on CPU it needs 64-byte alignment)."""

    reason = "alignment"


class DeviceNotVisibleError(ZeroCopyError):
    """The tensor lives on a device that this process's JAX has no backend for."""

    reason = "device"


class LazyViewError(ZeroCopyError):
    """The tensor has torch's conjugate or negative bit set: its bytes are not its values."""

    reason = "conjugate"


class ShardedArrayError(ZeroCopyError):
    """The JAX array spans several devices; one torch tensor cannot alias it."""

    reason = "sharded"


class GradientTrackedError(HandoffError, ValueError):
    """The tensor requires grad; JAX would see its data but autograd would not see JAX."""


class X64DisabledError(HandoffError, TypeError):
    """A 64-bit tensor while JAX's x64 mode is off: JAX would narrow it to 32 bits."""


class UnsupportedDtypeError(HandoffError, TypeError):
    """The dtype has no DLPack or JAX equivalent (``complex32``, quantized types...)."""


class JaxSettingError(HandoffError, ValueError):
    """An argument of ``configure_jax_for_sharing`` is out of range or inconsistent."""


class JaxAlreadyStartedError(HandoffError, RuntimeError):
    """JAX's backend is already running, so its memory settings can no longer change."""


class JaxPreallocationWarning(UserWarning):
    """JAX has taken (or will take at its first operation) most of the GPU's memory."""
