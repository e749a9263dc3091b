"""The invariant kit for any workspace manager with the original vLLM ``WorkspaceManager`` API.

Like :mod:`functional_ws.testing` for the pure core, but torch-aware and for a real manager:
yours, vLLM's, or :class:`interop.WorkspaceManager`. :func:`check_workspace` runs a Hypothesis
state machine (:class:`WorkspaceAPIMachine`) that checks, with real bytes, the property
families in :data:`PROPERTIES`; select some with ``properties=``. :func:`no_accelerator_cache`
lets a verbatim copy of vLLM's class grow on CPU-only torch, and :func:`register_profiles`
registers the ``ci`` and ``dev`` Hypothesis profiles the kit is tuned for. Needs Hypothesis
(``pip install 'functional-ws[testing]'``).

Example:
    >>> from interop.testing import PROPERTIES
    >>> PROPERTIES[:3]
    ('shapes', 'containment', 'disjoint')
"""

try:
    import hypothesis  # noqa: F401  (the kit is built on it; an optional dependency)
except ImportError as err:
    raise ImportError(
        "interop.testing needs Hypothesis, which is not installed: "
        "pip install 'functional-ws[testing]'",
        name="hypothesis",
    ) from err

from functional_ws import _public
from functional_ws.testing import register_profiles as register_profiles

from ._accelerator import no_accelerator_cache as no_accelerator_cache
from ._check import check_workspace as check_workspace
from ._check import make_machine as make_machine
from ._config import MachineConfig as MachineConfig
from ._config import WorkspaceAPI as WorkspaceAPI
from ._machine import WorkspaceAPIMachine as WorkspaceAPIMachine
from ._properties import DESCRIPTIONS as DESCRIPTIONS
from ._properties import PROPERTIES as PROPERTIES
from ._reference import ReferenceWorkspaceManager as ReferenceWorkspaceManager

__all__ = [
    "DESCRIPTIONS",
    "PROPERTIES",
    "MachineConfig",
    "ReferenceWorkspaceManager",
    "WorkspaceAPI",
    "WorkspaceAPIMachine",
    "check_workspace",
    "make_machine",
    "no_accelerator_cache",
    "register_profiles",
]

_public.publish(__name__, globals(), __all__)
