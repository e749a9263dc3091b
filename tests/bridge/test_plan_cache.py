"""Plans are cached by the function (and its static arguments), not by the wrapper: a
``jax_call`` made anew inside ``forward()`` traces nothing again; and result types are the
same with and without grad."""

from __future__ import annotations

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import interop
from interop._bridge import _custom_op, _functions


def _counting():
    traces: list[tuple[int, ...]] = []

    def layer(w, x):
        traces.append(x.shape)  # runs when JAX traces the function, not when it runs
        return jnp.tanh(x @ w)

    return layer, traces


@pytest.fixture
def compiles():
    """The XLA compilations JAX makes while a test runs (a list of event names)."""
    events: list[str] = []

    def listener(event: str, duration: float, **kwargs: object) -> None:
        if event.endswith("backend_compile_duration"):
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    yield events
    jax.monitoring.unregister_event_duration_listener(listener)


def test_rewrapping_a_jitted_function_compiles_nothing_again(compiles):
    layer, traces = _counting()
    jitted = jax.jit(layer)
    w = torch.randn(4, 3, requires_grad=True)
    interop.jax_call(jitted)(w, torch.randn(5, 4)).sum().backward()
    first = len(compiles)
    for _ in range(3):  # a model whose forward() wraps the layer on every step
        interop.jax_call(jitted)(w, torch.randn(5, 4)).sum().backward()
    assert len(compiles) == first and traces == [(5, 4)]


def test_rejitting_the_same_function_every_step_compiles_nothing_again(compiles):
    """What ``interop.jax_call(jax.jit(f))`` in forward() does: a new jit object each step,
    as JAX itself caches by the function."""
    layer, traces = _counting()
    w = torch.randn(4, 3, requires_grad=True)
    interop.jax_call(jax.jit(layer))(w, torch.randn(5, 4)).sum().backward()
    first = len(compiles)
    for _ in range(3):
        interop.jax_call(jax.jit(layer))(w, torch.randn(5, 4)).sum().backward()
    assert len(compiles) == first and traces == [(5, 4)]
    with torch.no_grad():
        for _ in range(2):
            interop.jax_call(jax.jit(layer))(w, torch.randn(5, 4))
    assert traces == [(5, 4)]  # JAX's own jit shares the trace: it traced the same function


def test_jit_options_are_part_of_the_key():
    def scale(x, n):
        return x * n

    x = torch.ones(2, requires_grad=True)
    static = interop.jax_call(jax.jit(scale, static_argnums=1))(x, 3.0)
    traced = interop.jax_call(jax.jit(scale))(x, torch.tensor(4.0))
    assert static.tolist() == [3.0, 3.0] and traced.tolist() == [4.0, 4.0]


def test_static_arguments_are_part_of_the_key():
    call = jax.jit(lambda v, n: v * n)
    v = torch.ones(2, requires_grad=True)
    got = [interop.jax_call(call)(v, n).tolist() for n in (2.0, 3.0, 2.0)]
    assert got == [[2.0, 2.0], [3.0, 3.0], [2.0, 2.0]]


@pytest.mark.parametrize("wrap", [lambda f: f, jax.jit], ids=["eager", "jit"])
def test_static_arguments_equal_but_not_alike_get_their_own_plans(wrap):
    """1, 1.0 and True are equal, and so are 0.0 and -0.0; a function may tell them apart,
    and a differentiated call must answer as the undifferentiated one does."""
    index = interop.jax_call(lambda x, i: x[i])
    x = torch.arange(6.0).reshape(2, 3)
    leaf = x.clone().requires_grad_()
    assert index(leaf, 1).shape == (3,)
    assert index(leaf, True).shape == index(x, True).shape == (1, 2, 3)

    sign = interop.jax_call(wrap(lambda x, s: x * jnp.copysign(1.0, s)))
    y = torch.ones(3, requires_grad=True)
    assert sign(y, 0.0).tolist() == [1.0, 1.0, 1.0]
    assert sign(y, -0.0).tolist() == [-1.0, -1.0, -1.0]

    scale = interop.jax_call(lambda x, n, s: (x * s, n * s))
    n = torch.tensor([3], dtype=torch.int32)
    assert scale(y, n, 1)[1].dtype == torch.int32
    assert scale(y, n, 1.0)[1].dtype == torch.float32


def test_distinct_closures_of_one_code_are_distinct_functions():
    v = torch.ones(2, requires_grad=True)
    results = [interop.jax_call(jax.jit(lambda x, k=k: x * k))(v).tolist() for k in (1.0, 2.0)]
    scales = [jnp.full(2, s) for s in (1.0, 2.0)]
    closures = [interop.jax_call(jax.jit(lambda x, s=s: x * s))(v).tolist() for s in scales]
    assert results == closures == [[1.0, 1.0], [2.0, 2.0]]


def test_a_dead_functions_number_never_goes_to_a_live_twins_key():
    """Three closures of one code over arrays of one shape share a fingerprint; the first
    dies unused. The third must not take the second's key (a compiled graph would then run
    the second's function)."""

    def make(w):
        return interop.jax_call(jax.jit(lambda x: x * w))

    x = torch.ones(3)
    first, second = make(jnp.full(3, 10.0)), make(jnp.full(3, 1.0))
    assert torch.compile(lambda x: second(x) + 0, backend="eager")(x).tolist() == [1.0] * 3
    del first
    gc.collect()
    third = make(jnp.full(3, 2.0))
    assert torch.compile(lambda x: third(x) + 0, backend="eager")(x).tolist() == [2.0] * 3
    assert torch.compile(lambda x: second(x) + 1, backend="eager")(x).tolist() == [2.0] * 3


class _Unreferenceable:
    """A callable no weak reference can hold (``__slots__`` without ``__weakref__``): its
    wrappers get a :class:`Function` of their own, numbered like any other."""

    __slots__ = ("w",)

    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return x * self.w


def _compiled(call, x):
    return torch.compile(lambda t: call(t) + 0, backend="eager")(x).tolist()


def test_a_compiled_functions_number_stays_its_own_after_its_wrapper_dies():
    x = torch.ones(3)
    first = interop.jax_call(_Unreferenceable(jnp.full(3, 10.0)))
    assert _compiled(first, x) == [10.0] * 3
    del first
    gc.collect()
    assert _compiled(interop.jax_call(_Unreferenceable(jnp.full(3, 2.0))), x) == [2.0] * 3


class _Slots:
    __slots__ = ("dtype", "width")

    def __init__(self, dtype, width):
        self.dtype, self.width = dtype, width


@pytest.mark.parametrize(
    "one, other",
    [
        (_Slots("float32", 2), _Slots("int32", 2)),
        (np.array([1, 0, 1]), np.array([1, 1, 0])),
    ],
    ids=["slots-object", "small-numpy-array"],
)
def test_what_can_decide_a_results_dtype_or_shape_is_in_the_fingerprint(one, other):
    """A warm compile cache trusts the op's key to mean the same results in every process:
    a config in ``__slots__``, or a small NumPy mask, can change them."""
    fingerprints = [_functions.describe(lambda x, c=config: (x, c)) for config in (one, other, one)]
    assert fingerprints[0] != fingerprints[1] and fingerprints[0] == fingerprints[2]


def test_functions_that_differ_only_in_a_constant_have_other_fingerprints():
    """``x * 2`` and ``x * 3`` share their code's bytes: its constants tell them apart
    (else only the order of first use would, which another process need not share)."""
    twice, thrice = (jax.jit(lambda x: x * 2), jax.jit(lambda x: x * 3))
    assert _functions.describe(twice) != _functions.describe(thrice)
    assert _functions.describe(twice) == _functions.describe(jax.jit(lambda x: x * 2))


def test_the_backward_key_names_which_inputs_are_differentiated_and_which_given():
    key = "f@0123#0/abc"
    keys = {
        _custom_op.backward_key(key, diff, given)
        for diff, given in [
            ((True, False), (True,)),
            ((False, True), (True,)),
            ((True, True), (True,)),
            ((True, False), (False,)),
        ]
    }
    assert len(keys) == 4 and all(k.startswith(key) for k in keys)


def test_the_op_key_holds_jaxs_x64_setting():
    """A graph cached with x64 off reads float32 results; with it on they are float64: the
    two compilations must name different keys."""
    add = interop.jax_call(jax.jit(lambda x: x + 1))
    keys = []
    saved = jax.config.jax_enable_x64
    try:
        for x64 in (False, True):
            jax.config.update("jax_enable_x64", x64)
            torch._dynamo.reset()
            before = set(_custom_op._entries)
            torch.compile(lambda x: add(x), backend="eager")(torch.ones(2))
            keys.append({k for k in set(_custom_op._entries) - before if "|" in k})  # signed
    finally:
        jax.config.update("jax_enable_x64", saved)
        torch._dynamo.reset()
    assert len(keys[0]) == len(keys[1]) == 1 and keys[0] != keys[1]


def test_the_cache_does_not_keep_a_function_alive():
    def make():
        return jax.jit(lambda x: x * 2)

    jitted = make()
    ref = weakref.ref(jitted.__wrapped__)
    interop.jax_call(jitted)(torch.ones(2, requires_grad=True)).sum().backward()
    del jitted
    gc.collect()
    assert ref() is None


def test_jaxs_caches_keep_no_plan_of_a_dead_function():
    """JAX keeps the jitted forward's output pytrees (4,096 of them) after the function and
    its plans are gone: they must not hold the forward's residual description (the VJP's
    pytree and jaxprs), or a new jitted function every step grows by ~100 KiB a step."""
    from interop._bridge._vjp import ResidualInfo

    def infos() -> list[ResidualInfo]:
        gc.collect()
        return [o for o in gc.get_objects() if type(o) is ResidualInfo]

    before = {id(info): info for info in infos()}  # other tests' live plans (held here)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 2, requires_grad=True)
    for scale in range(1, 6):  # a new function each time, as a new lambda every step makes
        f = interop.jax_call(jax.jit(lambda a, b, scale=scale: jnp.tanh(a @ b) * scale))
        f(x, w).sum().backward()
    del f
    assert [info for info in infos() if id(info) not in before] == []


def test_a_jitted_function_run_under_disable_jit_keeps_nothing_per_call():
    """Under jax.disable_jit() the jitted forward runs as Python on every call: the plan
    must keep no call's residual description (nor a backward cached for it)."""
    from interop._bridge._vjp import ResidualInfo

    def infos() -> list[ResidualInfo]:
        gc.collect()
        return [o for o in gc.get_objects() if type(o) is ResidualInfo]

    before = {id(info): info for info in infos()}
    f = interop.jax_call(jax.jit(lambda a: jnp.sin(a) * 2))
    x = torch.randn(3, requires_grad=True)
    with jax.disable_jit():
        for _ in range(20):
            f(x).sum().backward()
    assert [info for info in infos() if id(info) not in before] == []
    f(x).sum().backward()  # and jitted again afterwards


_NUMPY = {
    "array": lambda x: np.ones(3, np.float32),
    "scalar": lambda x: np.float32(2.0),
    "mixed": lambda x: (x * 2, np.arange(3, dtype=np.int32)),
}


@pytest.mark.parametrize("name", list(_NUMPY))
def test_result_types_are_the_same_with_and_without_grad(name):
    call = interop.jax_call(_NUMPY[name])
    with_grad = call(torch.ones(3, requires_grad=True))
    without = call(torch.ones(3))
    with torch.no_grad():
        no_grad = call(torch.ones(3, requires_grad=True))
    leaves = [jax.tree_util.tree_leaves(r) for r in (with_grad, without, no_grad)]
    for got in leaves:
        assert [type(leaf) for leaf in got] == [torch.Tensor] * len(leaves[0])
        assert [leaf.dtype for leaf in got] == [leaf.dtype for leaf in leaves[0]]


def test_a_dead_functions_entry_left_by_a_ctrl_c_never_serves_a_new_function():
    # A Ctrl-C in the finalizer that forgets a dead function left its entry in the table;
    # a new function at the same address (CPython reuses it) got the old one's plans: its
    # gradient was the old code's (cos x for a cube), silently.
    import gc
    import sys

    from interop._bridge import _functions

    def interrupt_in_forget(frame, event, arg):
        if event == "call" and frame.f_code is _functions._forget.__code__:
            raise KeyboardInterrupt

    def make(kind):
        return (lambda v: jnp.sin(v).sum()) if kind == "sin" else (lambda v: (v**3).sum())

    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    f = make("sin")
    address = id(f)
    interop.jax_call(jax.jit(f))(x).backward()
    x.grad = None
    dropped = []
    hook, sys.unraisablehook = sys.unraisablehook, dropped.append
    sys.setprofile(interrupt_in_forget)
    try:
        del f
        gc.collect()  # the finalizer runs and is interrupted (Python reports and drops it)
    finally:
        sys.setprofile(None)
        sys.unraisablehook = hook
    assert [type(u.exc_value) for u in dropped] == [KeyboardInterrupt]
    kept = []
    for _ in range(100_000):  # a new, different function at the freed address
        g = make("cube")
        if id(g) == address:
            break
        kept.append(g)
    assert id(g) == address, "CPython did not reuse the address: nothing to test"
    interop.jax_call(jax.jit(g))(x).backward()
    assert x.grad.tolist() == [3.0, 12.0, 27.0]  # 3 x**2


def test_a_full_plan_table_tolerates_another_thread_evicting_the_same_plan():
    # Two threads past MAX_PLANS evicted one key: the second's del raised KeyError.
    from interop._bridge import _autograd, _functions

    class EvictedMeanwhile(dict):
        def __iter__(self):  # the oldest key, which another thread has just evicted
            return iter([("gone",)])

    layer = interop.jax_call(jax.jit(lambda x, s: x * s))
    function = _functions.function_for(_first_jitted(layer))
    function.plans = EvictedMeanwhile({("k", i): None for i in range(_autograd.MAX_PLANS)})
    x = torch.ones(2, requires_grad=True)
    layer(x, 3.0).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def _first_jitted(layer):
    """The jitted function a jax_call wrapper calls."""
    return next(c.cell_contents for c in layer.__closure__ if hasattr(c.cell_contents, "lower"))


class _Scaled(torch.nn.Module):
    """A module whose JAX layer is a jitted bound method reading attributes of ``self``
    (a scale, ``self.training``), wrapped anew in every ``forward()``."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))
        self.scale = 1.0

    def layer(self, w, x):
        return x * w * self.scale * (0.5 if self.training else 1.0)

    def forward(self, x):
        return interop.jax_call(jax.jit(self.layer))(self.w, x)


def test_a_method_rejitted_every_step_reads_its_objects_attributes_as_jax_does():
    """``jax.jit(self.layer)`` made anew traces anew in JAX (a new bound method), so it
    sees what ``self`` holds now; so does its ``jax_call``, forward and gradient, with the
    last step's output alive (the usual loop) and under ``no_grad`` too."""
    model, x = _Scaled(), torch.full((3,), 2.0)
    y = None
    for scale in (1.0, 2.0, 3.0):
        model.scale, model.w.grad = scale, None
        y = model(x)  # (the last step's y is alive while this forward runs)
        y.sum().backward()
        expected = 2.0 * scale * 0.5
        assert y.tolist() == [expected] * 3 and model.w.grad.tolist() == [expected] * 3
        pure = jax.jit(model.layer)(jnp.ones(3), jnp.full(3, 2.0))
        assert pure.tolist() == [expected] * 3
    model.scale = 5.0
    with torch.no_grad():
        assert model(x).tolist() == [5.0] * 3  # y of the last step still alive
    model.eval()
    assert model(x).tolist() == [10.0] * 3
    del y


def test_a_method_jitted_once_and_kept_keeps_its_trace_as_jax_does(compiles):
    """A kept ``jax.jit(self.layer)`` is one function: traced once per shape, in JAX and
    in its ``jax_call`` alike (what it read of ``self`` then is what it uses)."""
    model = _Scaled()
    kept = jax.jit(model.layer)
    layer = interop.jax_call(kept)
    x = torch.ones(3)
    layer(model.w, x).sum().backward()
    before = len(compiles)
    for _ in range(3):
        interop.jax_call(kept)(model.w, x).sum().backward()
    assert len(compiles) == before
