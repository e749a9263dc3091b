"""jax_call: torch in, torch out, zero-copy, and safe to reuse the inputs once it returns."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from support.races import TRIALS, slow_sum
from test_jax_views import carve

import interop


def _race(call, view: torch.Tensor, expected: float) -> int:
    """Trials in which overwriting the input right after the call changed the result."""
    wrong = 0
    for _ in range(TRIALS):
        view.fill_(1.0)
        result = call(view)
        view.fill_(3.0)  # the next get_simultaneous hands the region out again
        wrong += float(result) != expected
    return wrong


def test_reusing_the_inputs_right_after_the_call_never_changes_the_result():
    (view,) = carve([((1 << 18,), torch.float32)])
    view.fill_(1.0)
    expected = float(slow_sum(jnp.ones(1 << 18, jnp.float32)))
    assert _race(interop.jax_call(slow_sum), view, expected) == 0


def test_raw_from_dlpack_is_unsafe_here(record_property):
    """Documents the hazard jax_call removes; the count is reported, never asserted."""
    (view,) = carve([((1 << 18,), torch.float32)])
    view.fill_(1.0)
    expected = float(slow_sum(jnp.ones(1 << 18, jnp.float32)))
    wrong = _race(lambda v: slow_sum(jax.dlpack.from_dlpack(v)), view, expected)
    record_property("raw_from_dlpack_wrong_results", f"{wrong}/{TRIALS}")
    print(f"raw from_dlpack + reuse: {wrong}/{TRIALS} wrong results")


def test_pytrees_in_and_out_zero_copy():
    a, b = carve([((4,), torch.float32), ((2, 3), torch.int32)])
    a.copy_(torch.arange(4.0))
    b.copy_(torch.arange(6, dtype=torch.int32).reshape(2, 3))
    seen = {}

    def fn(pair, *, scale, label):
        x, rest = pair
        seen["ptrs"] = (x.unsafe_buffer_pointer(), rest["b"].unsafe_buffer_pointer())
        return {"sum": x.sum() * scale, "b": rest["b"], "label": label, "none": None}

    out = interop.jax_call(fn)((a, {"b": b}), scale=2.0, label="kept")
    assert seen["ptrs"] == (a.data_ptr(), b.data_ptr())
    assert isinstance(out["sum"], torch.Tensor) and float(out["sum"]) == 12.0
    assert out["b"].data_ptr() == b.data_ptr()  # an input returned as is still aliases it
    assert out["label"] == "kept" and out["none"] is None


def test_wraps_keeps_the_name_and_refuses_bad_inputs():
    def double(x):
        """Doubles."""
        return x * 2

    wrapped = interop.jax_call(double)
    assert wrapped.__name__ == "double" and wrapped.__doc__ == "Doubles."
    with pytest.raises(interop.errors.UnsupportedLayoutError):
        wrapped(torch.zeros(8)[::2])
    assert np.array_equal(wrapped(torch.ones(2, dtype=torch.int8)).numpy(), [2, 2])


@pytest.mark.parametrize("fn", [3, "jnp.sin", None, [jnp.sin]], ids=["int", "str", "none", "list"])
def test_a_non_callable_is_refused_at_wrap_time(fn):
    with pytest.raises(
        interop.errors.FunctionNotCallableError, match=r"fn must be a callable"
    ) as caught:
        interop.jax_call(fn)
    assert isinstance(caught.value, TypeError) and repr(fn) in str(caught.value)


def test_any_callable_is_accepted():
    class Scale:
        def __call__(self, x):
            return x * 3

    assert interop.jax_call(Scale())(torch.ones(2)).tolist() == [3.0, 3.0]


def test_torchscript_refuses_a_jax_call_wrapper_rather_than_compile_the_jax_source():
    # functools.wraps's __wrapped__ led torch.jit.script to the JAX function, whose source
    # it compiled as TorchScript: torch's sample std for JAX's population std, silently.
    @jax.jit
    def normalize(x):
        return (x - x.mean()) / x.std()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = interop.jax_call(normalize)

        def forward(self, x):
            return self.layer(x)

    model = Model()
    assert not hasattr(model.layer, "__wrapped__") and model.layer.__name__ == "normalize"
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.allclose(model(x), torch.tensor([-1.3416, -0.4472, 0.4472, 1.3416]), atol=1e-4)
    with pytest.raises(RuntimeError, match="failed to compile it to a TorchScript function"):
        torch.jit.script(model)


def test_a_wrapper_does_not_pickle_but_a_module_holding_one_deep_copies():
    import copy
    import io
    import pickle

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.layer = interop.jax_call(jax.jit(lambda w: w * 2))

        def forward(self):
            return self.layer(self.w)

    model = Model()
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(model.layer)
    twin = copy.deepcopy(model)
    assert twin().tolist() == model().tolist() == [2.0, 2.0, 2.0]
    assert twin.w is not model.w
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    assert "w" in torch.load(io.BytesIO(buffer.getvalue()))


_SYMBOLIC_LAYER = interop.jax_call(jax.jit(lambda x: jnp.sin(x) * 2))


def _symbolic_layer(x):
    return _SYMBOLIC_LAYER(x)


torch.fx.wrap("_symbolic_layer")  # the way the refusal names: a leaf of the traced graph


def test_fx_symbolic_trace_is_refused_naming_fx_wrap_and_compile():
    # The fx Proxy reached JAX, which answered with its "__jax_array__ ...
    # abstractification" ValueError.
    class Direct(torch.nn.Module):
        def forward(self, x):
            return _SYMBOLIC_LAYER(x) + 1

    class Wrapped(torch.nn.Module):
        def forward(self, x):
            return _symbolic_layer(x) + 1

    with pytest.raises(interop.errors.FxTraceError, match=r"symbolic_trace.*torch\.fx\.wrap"):
        torch.fx.symbolic_trace(Direct())
    traced = torch.fx.symbolic_trace(Wrapped())
    x = torch.tensor([0.5, 1.0])
    assert torch.allclose(traced(x), torch.sin(x) * 2 + 1)
