"""The invariant kit: Hypothesis strategies and a model-based state machine for the core.

Like ``hypothesis.extra.numpy`` or ``zarr.testing``: use it to check this library's pure
transitions or your own functions in their place (``Transitions(acquire=my_acquire)``).
Managers with real memory are checked by :mod:`interop.testing`. Needs Hypothesis
(``pip install 'functional-ws[testing]'``).

Example:
    >>> from hypothesis.stateful import run_state_machine_as_test
    >>> from functional_ws.testing import WorkspaceMachine
    >>> TestWorkspace = WorkspaceMachine.TestCase  # collect this in a test module, or:
    >>> def test_ubatches():
    ...     run_state_machine_as_test(lambda: WorkspaceMachine(growth="ubatches"))
"""

try:
    import hypothesis  # noqa: F401  (the kit is built on it; an optional dependency)
except ImportError as err:
    raise ImportError(
        "functional_ws.testing needs Hypothesis, which is not installed: "
        "pip install 'functional-ws[testing]'",
        name="hypothesis",
    ) from err

from .. import _public
from ._model import WorkspaceModel as WorkspaceModel
from ._profiles import register_profiles as register_profiles
from ._search import Counterexample as Counterexample
from ._search import find_shortfall as find_shortfall
from ._stateful import Transitions as Transitions
from ._stateful import WorkspaceMachine as WorkspaceMachine
from ._strategies import DEFAULT_DTYPES as DEFAULT_DTYPES
from ._strategies import dtypes as dtypes
from ._strategies import keys as keys
from ._strategies import shapes as shapes
from ._strategies import slots as slots
from ._strategies import spec_lists as spec_lists
from ._strategies import specs as specs
from ._strategies import states as states
from ._strategies import traces as traces

__all__ = [
    "DEFAULT_DTYPES",
    "Counterexample",
    "Transitions",
    "WorkspaceMachine",
    "WorkspaceModel",
    "dtypes",
    "find_shortfall",
    "keys",
    "register_profiles",
    "shapes",
    "slots",
    "spec_lists",
    "specs",
    "states",
    "traces",
]

_public.publish(__name__, globals(), __all__)
