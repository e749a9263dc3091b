"""torch_call's refusals: bad arguments, broken promises, changed inputs, errors inside fn."""

from __future__ import annotations

import gc
import traceback
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from support.torch_call import F32, bridge_tensor_locals, path, spec  # noqa: F401  (path: a fixture)

import interop
from interop import errors
from interop._bridge import _torch_callback


def identity(x):
    return x


class _Spec:
    """A promise with any shape at all (``jax.ShapeDtypeStruct`` refuses some itself)."""

    dtype = F32

    def __init__(self, shape):
        self.shape = shape


# ----- refused at once, by torch_call or at the call -----

AT_CONSTRUCTION = [
    ("fn-not-callable", lambda: interop.torch_call(3, spec((1,))),
     errors.FunctionNotCallableError, TypeError, "fn must be a callable"),
    ("vmap-method-unknown", lambda: interop.torch_call(identity, spec((1,)), vmap_method="loop"),
     errors.InvalidVmapMethodError, ValueError, "vmap_method must be one of"),
    ("spec-without-shape", lambda: interop.torch_call(identity, (spec((1,)), "abc")),
     errors.ResultSpecError, TypeError, r"'abc' at result\[1\]"),
    ("spec-dtype-torch-lacks", lambda: interop.torch_call(identity, spec((2,), jnp.int4)),
     errors.UnsupportedDtypeError, TypeError, "int4"),
    ("spec-dtype-prng-key",
     lambda: interop.torch_call(identity, spec((), jax.random.key(0).dtype)),
     errors.UnsupportedDtypeError, TypeError, r"result of identity has dtype key<fry>.*key_data"),
    ("spec-64-bit-x64-off", lambda: interop.torch_call(identity, spec((2,), np.int64)),
     errors.X64DisabledError, TypeError, "jax_enable_x64"),
    ("spec-bool-dim", lambda: interop.torch_call(identity, _Spec((True,))),
     errors.ResultSpecError, TypeError, "a dimension must be an int, got True"),
    ("spec-dim-past-2**63", lambda: interop.torch_call(identity, _Spec((2**63,))),
     errors.ResultSpecError, TypeError, "from 0 to 2\\*\\*63 - 1"),
    ("spec-negative-dim", lambda: interop.torch_call(identity, spec((-1,))),
     errors.ResultSpecError, TypeError, r"shape \(-1,\) at result: every dimension"),
]  # fmt: skip


@pytest.mark.parametrize(
    "make, error, builtin, match", [case[1:] for case in AT_CONSTRUCTION],
    ids=[case[0] for case in AT_CONSTRUCTION],
)  # fmt: skip
def test_bad_construction_is_refused_at_once(make, error, builtin, match):
    with pytest.raises(error, match=match) as caught:
        make()
    assert isinstance(caught.value, builtin)


AT_CALL = [
    ("string-leaf", lambda: interop.torch_call(identity, spec((1,)))("abc"),
     errors.ArgumentTypeError, TypeError, r"argument args\[0\] of identity is str"),
    ("numpy-int64-x64-off",
     lambda: interop.torch_call(identity, spec((1,)))(x=np.array([2**40 + 5])),
     errors.X64DisabledError, TypeError, r"argument kwargs\['x'\].*narrow"),
    ("input-dtype-torch-lacks",
     lambda: interop.torch_call(identity, spec((2,)))(jnp.zeros(2, jnp.int4)),
     errors.UnsupportedDtypeError, TypeError, r"argument args\[0\].*int4"),
    ("input-prng-key",
     lambda: interop.torch_call(identity, lambda k: k)(jax.random.key(0)),
     errors.UnsupportedDtypeError, TypeError,
     r"argument args\[0\] of identity has dtype key<fry>.*jax.random.key_data\(key\)"),
    ("input-prng-key-in-kwargs",
     lambda: interop.torch_call(identity, spec((2,)))(jnp.ones(2), k=jax.random.key(0)),
     errors.UnsupportedDtypeError, TypeError, r"argument kwargs\['k'\] of identity.*key<fry>"),
    ("callable-promise-returns-junk",
     lambda: interop.torch_call(identity, lambda x: [x, None, 3])(jnp.ones(1)),
     errors.ResultSpecError, TypeError, r"3 at result\[2\]"),
]  # fmt: skip


@pytest.mark.parametrize(
    "make, error, builtin, match", [case[1:] for case in AT_CALL],
    ids=[case[0] for case in AT_CALL],
)  # fmt: skip
def test_bad_calls_are_refused_naming_the_argument(make, error, builtin, match):
    with pytest.raises(error, match=match) as caught:
        make()
    assert isinstance(caught.value, builtin)


# ----- fn broke its promise: named, and no output written -----

PROMISE = (spec((2, 3)), spec((4,), jnp.int32))
BROKEN = [
    ("structure", lambda x: [x], errors.ResultStructureError,
     r"returned a builtins.list of structure PyTreeDef\(\[\*\]\), but result_shape_dtypes "
     r"promised PyTreeDef\(\(\*, \*\)\)"),
    ("return-type-in-a-list", lambda x: [x.max(0)], errors.ResultStructureError,
     r"returned a builtins.list of structure PyTreeDef\(\[\(\*, \*\)\]\)"),
    ("not-a-tensor", lambda x: (x, np.zeros(4, np.int32)), errors.ResultStructureError,
     r"ndarray at result\[1\], expected a torch.Tensor of shape \(4,\)"),
    ("shape", lambda x: (x.T, torch.zeros(4, dtype=torch.int32)), errors.ResultShapeError,
     r"shape \(3, 2\) at result\[0\], expected \(2, 3\)"),
    ("dtype-no-cast", lambda x: (x, torch.zeros(4, dtype=torch.int64)), errors.ResultDtypeError,
     r"dtype torch.int64 at result\[1\], expected torch.int32.*never cast"),
    ("device", lambda x: (x, torch.zeros(4, dtype=torch.int32, device="meta")),
     errors.ResultDeviceError, r"on meta at result\[1\], expected cpu"),
    ("sparse", lambda x: (x.to_sparse(), torch.zeros(4, dtype=torch.int32)),
     errors.ResultLayoutError, r"layout torch.sparse_coo at result\[0\], expected a dense"),
    ("sparse-second", lambda x: (x * 2, torch.zeros(4, dtype=torch.int32).to_sparse()),
     errors.ResultLayoutError, r"sparse_coo at result\[1\]"),
    ("mkldnn", lambda x: (x.to_mkldnn(), torch.zeros(4, dtype=torch.int32)),
     errors.ResultLayoutError, r"layout torch._mkldnn at result\[0\]"),
    ("nested", lambda x: (torch.nested.nested_tensor([x[0], x[1]]),
                          torch.zeros(4, dtype=torch.int32)),
     errors.ResultLayoutError, r"a nested tensor at result\[0\]"),
]  # fmt: skip


@pytest.mark.parametrize(
    "fn, error, match", [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN]
)
@pytest.mark.usefixtures("path")
def test_a_broken_promise_names_expected_and_got_and_writes_nothing(monkeypatch, fn, error, match):
    writes = []
    monkeypatch.setattr(_torch_callback, "_write", lambda *a: writes.append(a))
    call = interop.torch_call(fn, PROMISE)
    with pytest.raises(error, match=match):
        call(jnp.ones((2, 3), F32))
    with pytest.raises(jax.errors.JaxRuntimeError, match=error.__name__):  # inside jit
        jax.block_until_ready(jax.jit(call)(jnp.ones((2, 3), F32)))
    assert writes == []
    assert issubclass(error, errors.ResultMismatchError)


@pytest.mark.usefixtures("path")
def test_a_torch_return_type_is_the_tuple_it_is():
    """``t.max(0)``, ``t.sort()``, ``t.topk(k)`` return ``torch.return_types``: named tuples
    of tensors that JAX takes for one leaf; a tuple promise takes them as tuples."""
    promise = lambda t: (spec(t.shape[1:], t.dtype), spec(t.shape[1:], jnp.int32))  # noqa: E731
    fn = lambda t: (lambda r: type(r)((r.values, r.indices.int())))(t.max(0))  # noqa: E731
    call = interop.torch_call(fn, promise)
    x = jnp.asarray([[1.0, 5.0, 2.0], [4.0, 0.0, 3.0]], F32)
    for got in (call(x), jax.jit(call)(x)):
        np.testing.assert_array_equal(np.asarray(got[0]), [4.0, 5.0, 3.0])
        np.testing.assert_array_equal(np.asarray(got[1]), [1, 0, 1])


@pytest.mark.parametrize(
    "got", [torch.float64, torch.float16, torch.int32], ids=["wider", "narrower", "integer"]
)
@pytest.mark.usefixtures("path")
def test_a_single_result_of_another_dtype_is_refused_not_cast(got):
    call = interop.torch_call(lambda x: x.to(got), spec((4,)))  # one result: the short check
    with pytest.raises(errors.ResultDtypeError, match=f"dtype {got} at result, expected"):
        call(jnp.ones(4, F32))


# ----- fn must leave its inputs alone -----

CHANGED = [
    ("write-in-place", lambda x: x.add_(1), errors.InputWrittenError,
     r"wrote into input args\[0\]"),
    ("write-through-a-view", lambda x: x[1:].fill_(7), errors.InputWrittenError, "in place"),
    ("resize", lambda x: x.resize_(2), errors.InputResizedError,
     r"resized input args\[0\].*shape \(4,\).*now shape \(2,\)"),
    ("set", lambda x: x.set_(torch.zeros(4)), errors.InputResizedError, "other memory"),
    ("as-strided", lambda x: x.as_strided_((2,), (2,)), errors.InputResizedError,
     r"now shape \(2,\)"),
]  # fmt: skip


@pytest.mark.parametrize(
    "fn, error, match", [case[1:] for case in CHANGED], ids=[case[0] for case in CHANGED]
)
@pytest.mark.usefixtures("path")
def test_changing_an_input_is_refused(fn, error, match):
    def changes(x):
        fn(x)
        return torch.zeros(4)

    with pytest.raises(error, match=match) as caught:
        interop.torch_call(changes, spec((4,)))(jnp.ones(4, F32))
    assert isinstance(caught.value, errors.InputModifiedError)
    assert isinstance(caught.value, RuntimeError)


# ----- exceptions inside fn -----


def _raises_deep(x):
    def user_frame_inside_fn():
        raise KeyError("no such expert")

    user_frame_inside_fn()


@pytest.mark.usefixtures("path")
def test_an_exception_inside_fn_is_raised_itself_with_fns_frames():
    call = interop.torch_call(_raises_deep, spec((2,)))
    with pytest.raises(KeyError, match="no such expert") as caught:
        call(jnp.ones(2, F32))
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert frames[-2:] == ["_raises_deep", "user_frame_inside_fn"]


def test_a_failure_after_a_successful_call_is_raised_itself_and_not_kept():
    """JAX reports a callback failure as a ValueError once the computation ran before (its
    warm path), which the wrapper let through: the original was neither raised nor taken
    back (kept with its frames, which hold fn's tensors over XLA's buffers)."""
    from interop._bridge import _torch_callback

    fails = []

    def sometimes(x):
        if fails:
            raise KeyError("no such expert")
        return x * 2

    call = interop.torch_call(sometimes, spec((2,)))
    call(jnp.ones(2, F32))  # warm
    fails.append(True)
    kept = len(_torch_callback._failures)
    for _ in range(2):
        with pytest.raises(KeyError, match="no such expert"):
            call(jnp.ones(2, F32))
    assert len(_torch_callback._failures) == kept


def _interrupted(_):
    raise KeyboardInterrupt  # as Ctrl-C arrives while fn runs


def _exits(_):
    raise SystemExit(3)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("fn, error", [(_interrupted, KeyboardInterrupt), (_exits, SystemExit)])
def test_ctrl_c_and_sys_exit_inside_fn_are_raised_as_they_are(fn, error):
    """Not JaxRuntimeError, which an `except Exception:` in a training loop would swallow."""
    call = interop.torch_call(fn, spec((2,)))
    with pytest.raises(error):
        call(jnp.ones(2, F32))
    again = interop.torch_call(lambda t: t * 2, spec((2,)))  # and the next call works
    assert again(jnp.ones(2, F32)).tolist() == [2.0, 2.0]


@pytest.mark.usefixtures("path")
def test_inside_jit_jax_reports_it_with_fns_frames_in_the_message():
    call = jax.jit(lambda x: interop.torch_call(_raises_deep, spec((2,)))(x) * 2)
    with pytest.raises(jax.errors.JaxRuntimeError) as caught:
        jax.block_until_ready(call(jnp.ones(2, F32)))
    text = str(caught.value)
    assert "_raises_deep (called through interop.torch_call) raised KeyError" in text
    assert f'File "{__file__}"' in text and "in user_frame_inside_fn" in text


def _leaves_a_big_local(alive):
    def fn(x):
        big = torch.ones(1 << 16)  # fn's own allocation, held by its frame
        alive.append(weakref.ref(big))
        raise ValueError("boom")

    return fn


@pytest.mark.usefixtures("path")
def test_a_failure_under_jit_keeps_no_locals_of_fn_alive():
    """Nobody takes a failure under a caller's jit back: the kept exception must not hold
    fn's frame locals (its tensors over XLA's buffers, its allocations)."""
    alive: list[weakref.ref[torch.Tensor]] = []
    call = jax.jit(lambda x: interop.torch_call(_leaves_a_big_local(alive), spec((2,)))(x) + 1)
    for _ in range(3):
        with pytest.raises(jax.errors.JaxRuntimeError, match="boom"):
            jax.block_until_ready(call(jnp.ones(2, F32)))
    gc.collect()
    assert [ref() for ref in alive] == [None, None, None]


def _chains_a_big_local(alive, how):
    """``fn`` whose helper holds a tensor (and the input) when it raises; ``fn`` raises
    another error chained to it (``raise ... from``, or inside the ``except``)."""

    def helper(x):
        big = torch.ones(1 << 16)
        alive.extend([weakref.ref(big), weakref.ref(x)])
        raise KeyError("inner")

    def fn(x):
        try:
            helper(x)
        except KeyError as err:
            if how == "from":
                raise ValueError("boom") from err
            raise ValueError("boom")  # noqa: B904  (the implicit context is the case)
        return x

    return fn


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("how", ["from", "context"])
def test_a_chained_failure_under_jit_keeps_no_locals_of_the_chain_alive(how):
    """The errors a failure is chained to hold frames of fn's helpers too (tensors over
    XLA's buffers, fn's allocations): under a caller's jit they go as the failure's own."""
    alive: list[weakref.ref[torch.Tensor]] = []
    call = jax.jit(lambda x: interop.torch_call(_chains_a_big_local(alive, how), spec((2,)))(x))
    with pytest.raises(jax.errors.JaxRuntimeError, match="boom"):
        jax.block_until_ready(call(jnp.ones(2, F32)))
    gc.collect()
    assert len(alive) == 2 and [ref() for ref in alive] == [None, None]


@pytest.mark.usefixtures("path")
def test_a_kept_failure_reaches_no_tensor_over_xlas_buffers():
    """XLA reuses the callback's buffers once it returns: a failure kept under jit (or
    read in a debugger) must not lead to tensors over them through the bridge's frames."""
    call = jax.jit(lambda x: interop.torch_call(_raises_deep, spec((2,)))(x * 2) + 1)
    before = set(_torch_callback._failures)
    with pytest.raises(jax.errors.JaxRuntimeError):
        jax.block_until_ready(call(jnp.ones(2, F32)))
    (number,) = set(_torch_callback._failures) - before
    assert bridge_tensor_locals(_torch_callback._failures[number]) == []


class _FailsBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("no backward")


@pytest.mark.usefixtures("path")
def test_a_kept_backward_failure_reaches_no_tensor_over_xlas_buffers():
    call = interop.torch_call(_FailsBackward.apply, spec((2,)))
    step = jax.jit(jax.grad(lambda x: call(x * 2).sum()))
    before = set(_torch_callback._failures)
    with pytest.raises(jax.errors.JaxRuntimeError, match="no backward"):
        jax.block_until_ready(step(jnp.ones(2, F32)))
    (number,) = set(_torch_callback._failures) - before
    assert bridge_tensor_locals(_torch_callback._failures[number]) == []


@pytest.mark.usefixtures("path")
def test_an_eager_failure_keeps_fns_locals_for_a_debugger():
    alive: list[weakref.ref[torch.Tensor]] = []
    kept = set(_torch_callback._failures)
    with pytest.raises(ValueError, match="boom") as caught:
        interop.torch_call(_leaves_a_big_local(alive), spec((2,)))(jnp.ones(2, F32))
    tb = caught.value.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_name == "fn" and "big" in tb.tb_frame.f_locals
    assert alive[0]() is not None
    assert set(_torch_callback._failures) <= kept  # taken back


@pytest.mark.usefixtures("path")
def test_failures_kept_for_the_eager_wrapper_are_bounded():
    call = jax.jit(interop.torch_call(_raises_deep, spec((2,))))
    for _ in range(_torch_callback.KEPT_FAILURES + 5):
        with pytest.raises(jax.errors.JaxRuntimeError):
            call(jnp.ones(2, F32))
    assert len(_torch_callback._failures) <= _torch_callback.KEPT_FAILURES


# ----- no JAX computation from inside fn -----


@pytest.mark.usefixtures("path")
def test_jax_call_inside_fn_is_refused():
    double = interop.jax_call(jax.jit(lambda a: a * 2))

    def fn(x):
        return double(x)

    with pytest.raises(errors.NestedCallError, match=r"jax_call\(<lambda>\): called inside"):
        interop.torch_call(fn, spec((3,)))(jnp.ones(3, F32))
    assert double(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]  # outside: works as ever


@pytest.mark.usefixtures("path")
def test_a_torch_call_inside_fn_is_refused():
    inner = interop.torch_call(identity, spec((3,)))

    def fn(x):
        return torch.as_tensor(np.asarray(inner(jnp.ones(3))))

    with pytest.raises(errors.NestedCallError, match=r"torch_call\(identity\)"):
        interop.torch_call(fn, spec((3,)))(jnp.ones(3, F32))


# ----- the caller's torch modes -----


@pytest.mark.usefixtures("path")
def test_under_inference_mode_calls_gradients_and_input_checks_work():
    """Under ``torch.inference_mode()`` torch makes inference tensors, which have no version
    counter: the inputs are ordinary tensors, and the backward records anyway (JAX asked)."""
    layer = interop.torch_call(lambda x: torch.sin(x) * 2, lambda x: x)
    x = jnp.linspace(-1, 1, 4, dtype=F32)
    with torch.inference_mode():
        np.testing.assert_allclose(layer(x), 2 * np.sin(np.asarray(x)), rtol=1e-6)
        np.testing.assert_allclose(jax.jit(layer)(x), 2 * np.sin(np.asarray(x)), rtol=1e-6)
        grad = jax.grad(lambda x: layer(x).sum())(x)
        with pytest.raises(errors.InputWrittenError):
            interop.torch_call(lambda x: x.mul_(1), lambda x: x)(jnp.ones(4, F32))
        assert torch.is_inference_mode_enabled()
    np.testing.assert_allclose(grad, 2 * np.cos(np.asarray(x)), rtol=1e-6)


@pytest.mark.usefixtures("path")
def test_parameters_fn_closes_over_warn_that_jax_drops_their_gradients():
    linear = torch.nn.Linear(3, 3)
    layer = interop.torch_call(lambda x: linear(x), lambda x: x)
    x = jnp.ones((2, 3), F32)
    with pytest.warns(errors.DroppedGradientWarning, match=r"result of .*<lambda> requires grad"):
        jax.grad(lambda x: layer(x).sum())(x)
    assert linear.weight.grad is None  # what the warning says
    # Under jit(grad), XLA drops the forward call (only the backward needs its inputs): the
    # backward's graph says it.
    jitted = interop.torch_call(lambda x: linear(x) * 2, lambda x: x)
    with pytest.warns(errors.DroppedGradientWarning, match=r"requires grad"):
        jax.jit(jax.grad(lambda x: jitted(x).sum()))(x)
    linear.requires_grad_(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(x)
        jax.grad(lambda x: layer(x).sum())(x)
        tanh = interop.torch_call(torch.tanh, lambda x: x)
        jax.jit(jax.grad(lambda x: tanh(x).sum()))(x)


@pytest.mark.usefixtures("path")
def test_restriding_an_input_in_place_keeping_its_shape_is_a_resize():
    """as_strided_ to the same shape and pointer but other strides: InputResizedError, not
    InputWrittenError."""

    def fn(x):
        x.as_strided_((2, 2), (1, 2))  # a transpose in place: same shape, same memory
        return torch.zeros(2, 2)

    with pytest.raises(errors.InputResizedError, match=r"resized input args\[0\]"):
        interop.torch_call(fn, spec((2, 2)))(jnp.ones((2, 2), F32))


@pytest.mark.usefixtures("path")
def test_a_restrided_inputs_refusal_shows_the_strides_that_changed():
    """``t_()`` keeps the shape and the memory: the message shows what changed."""

    def fn(x):
        x.t_()
        return torch.zeros(3, 3)

    with pytest.raises(errors.InputResizedError) as caught:
        interop.torch_call(fn, spec((3, 3)))(jnp.ones((3, 3), F32))
    message = str(caught.value)
    assert "strides (3, 1)" in message and "strides (1, 3)" in message, message


@pytest.mark.usefixtures("path")
def test_an_in_place_change_that_wrote_nothing_is_not_said_to_have_written_values():
    """``unsqueeze_`` then ``squeeze_`` moves the version counter and leaves the bytes: still
    refused (torch cannot tell), but the message does not claim the array holds written
    values."""

    def fn(x):
        x.unsqueeze_(0).squeeze_(0)
        return torch.zeros(4)

    with pytest.raises(errors.InputWrittenError) as caught:
        interop.torch_call(fn, spec((4,)))(jnp.ones(4, F32))
    message = str(caught.value)
    assert "may now hold" in message and "now holds the written values" not in message


@pytest.mark.usefixtures("path")
def test_fn_that_writes_into_an_input_then_raises_says_so_in_a_note():
    """The error ``fn`` raised is the caller's; a write into an input before it (which JAX's
    array shows) is added as a note, not lost."""

    def fn(x):
        x.clamp_(min=0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom") as caught:
        interop.torch_call(fn, spec((2,)))(jnp.array([-1.0, 2.0], F32))
    notes = getattr(caught.value, "__notes__", [])
    assert any("changed input args[0] in place" in note for note in notes), notes


@pytest.mark.usefixtures("path")
def test_fn_that_flags_an_input_as_requiring_grad_is_told_about_that_input():
    """The result requires grad through the input ``fn`` flagged, not through tensors that
    are not its inputs: the warning names the input."""

    def fn(x):
        x.requires_grad_()
        return x * 2

    with pytest.warns(errors.DroppedGradientWarning) as caught:
        interop.torch_call(fn, spec((2,)))(jnp.ones(2, F32))
    (message,) = [str(w.message) for w in caught]
    assert "input args[0]" in message and "not its inputs" not in message, message


@pytest.mark.usefixtures("path")
def test_writing_into_an_input_in_the_backward_is_refused():
    """The backward's own run of fn is checked for input writes (under jit(grad) it is fn's
    only run: XLA drops the forward whose result only the backward needs)."""

    def fn(x):
        if x.requires_grad:  # only in the backward: the forward's inputs do not require grad
            with torch.no_grad():
                x.mul_(1)
        return x * 2

    layer = interop.torch_call(fn, lambda x: x)
    with pytest.raises(jax.errors.JaxRuntimeError, match="InputWrittenError"):
        jax.block_until_ready(jax.jit(jax.grad(lambda x: layer(x).sum()))(jnp.ones(3, F32)))


@pytest.mark.usefixtures("path")
def test_a_numpy_float64_scalar_is_refused_while_x64_is_off():
    """A NumPy float64 scalar (np.generic, not ndarray) would be narrowed: X64DisabledError."""
    call = interop.torch_call(lambda x, s: x * s, lambda x, s: x)
    with pytest.raises(errors.X64DisabledError, match=r"argument args\[1\].*narrow"):
        call(jnp.ones(2, F32), np.float64(1e300))


@pytest.mark.usefixtures("path")
def test_a_promised_dimension_of_zero_is_accepted():
    """A size-0 dimension is a size: promised and returned, it is no ResultSpecError."""
    call = interop.torch_call(lambda x: x[:0] * 2, spec((0,)))
    assert call(jnp.ones(3, F32)).shape == (0,)


class _Spec:
    """A promise with any shape at all (``jax.ShapeDtypeStruct`` refuses some itself)."""

    dtype = F32

    def __init__(self, shape):
        self.shape = shape


def test_a_numpy_bool_dimension_is_refused_naming_it():
    """np.True_ as a dimension gets torch_call's own message, as Python's True does."""
    with pytest.raises(errors.ResultSpecError, match=r"a dimension must be an int, got np\.True_"):
        interop.torch_call(lambda x: x, _Spec((np.True_,)))
