"""interop: the imperative shell of functional-ws (torch façade, JAX handoff).

It holds a :class:`functional_ws.WorkspaceState` and the device buffers, carries out the
growth the pure core plans, and hands out typed views.
"""

from ._jax import jax_call as jax_call
from ._jax import to_jax as to_jax
from ._jax import to_torch as to_torch
from ._jax_config import configure_jax_for_sharing as configure_jax_for_sharing
from ._jax_config import warn_if_jax_preallocates as warn_if_jax_preallocates
from ._jax_errors import DeviceNotVisibleError as DeviceNotVisibleError
from ._jax_errors import GradientTrackedError as GradientTrackedError
from ._jax_errors import HandoffError as HandoffError
from ._jax_errors import JaxAlreadyStartedError as JaxAlreadyStartedError
from ._jax_errors import JaxPreallocationWarning as JaxPreallocationWarning
from ._jax_errors import JaxSettingError as JaxSettingError
from ._jax_errors import LazyViewError as LazyViewError
from ._jax_errors import MisalignedViewError as MisalignedViewError
from ._jax_errors import ShardedArrayError as ShardedArrayError
from ._jax_errors import UnsupportedDtypeError as UnsupportedDtypeError
from ._jax_errors import UnsupportedLayoutError as UnsupportedLayoutError
from ._jax_errors import X64DisabledError as X64DisabledError
from ._jax_errors import ZeroCopyError as ZeroCopyError

__all__ = [
    "DeviceNotVisibleError",
    "GradientTrackedError",
    "HandoffError",
    "JaxAlreadyStartedError",
    "JaxPreallocationWarning",
    "JaxSettingError",
    "LazyViewError",
    "MisalignedViewError",
    "ShardedArrayError",
    "UnsupportedDtypeError",
    "UnsupportedLayoutError",
    "X64DisabledError",
    "ZeroCopyError",
    "configure_jax_for_sharing",
    "jax_call",
    "to_jax",
    "to_torch",
    "warn_if_jax_preallocates",
]
