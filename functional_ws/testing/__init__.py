"""The invariant kit: Hypothesis strategies and a model-based state machine.

Like ``hypothesis.extra.numpy`` or ``zarr.testing``: use it to check this library, your own
wrapper around it, or (subclassing the ``do_*`` hooks) any workspace with the same rules.

Example:
    >>> from functional_ws.testing import WorkspaceMachine
    >>> TestWorkspace = WorkspaceMachine.TestCase  # collect this in a test module
"""

from ._model import WorkspaceModel as WorkspaceModel
from ._stateful import Transitions as Transitions
from ._stateful import WorkspaceMachine as WorkspaceMachine
from ._strategies import DEFAULT_DTYPES as DEFAULT_DTYPES
from ._strategies import dtypes as dtypes
from ._strategies import keys as keys
from ._strategies import shapes as shapes
from ._strategies import slots as slots
from ._strategies import spec_lists as spec_lists
from ._strategies import specs as specs

__all__ = [
    "DEFAULT_DTYPES",
    "Transitions",
    "WorkspaceMachine",
    "WorkspaceModel",
    "dtypes",
    "keys",
    "shapes",
    "slots",
    "spec_lists",
    "specs",
]
