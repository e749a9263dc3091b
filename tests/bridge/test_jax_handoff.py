"""to_jax / to_torch: zero-copy, bit-exact, refused instead of copied, never stale.

Every handoff test runs through both paths: the fast private one and the public fallback.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st
from test_jax_views import carve, fill_random, handoff_path, workspace_manager

import interop
from functional_ws.testing import spec_lists
from interop._bridge import _dlpack
from interop._bridge._handoff import SHARED_DTYPES, WIDE_DTYPES

PATHS = pytest.mark.parametrize("private", [True, False], ids=["private", "public"])
DTYPE_POOL = sorted(SHARED_DTYPES, key=str)


def _bytes(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _torch_bytes(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy()


def _check_handoff(view: torch.Tensor, private: bool) -> None:
    with handoff_path(private):
        array = interop.to_jax(view)
        back = interop.to_torch(array)
    assert array.shape == tuple(view.shape)
    assert array.unsafe_buffer_pointer() == view.data_ptr()
    assert np.array_equal(_bytes(np.asarray(array)), _torch_bytes(view))
    assert back.data_ptr() == view.data_ptr()
    assert back.dtype == view.dtype and back.shape == view.shape
    assert np.array_equal(_torch_bytes(back), _torch_bytes(view))


@given(specs=spec_lists(dtype_pool=DTYPE_POOL, max_size=4, max_side=24), seed=st.integers(0, 99))
def test_every_shared_dtype_is_zero_copy_bit_exact_and_round_trips(specs, seed):
    views = carve(specs)
    for private in (True, False):
        for i, view in enumerate(views):
            fill_random(view, seed + i)
            note(f"path={'private' if private else 'public'} view {i}: {view.dtype} {view.shape}")
            _check_handoff(view, private)


@PATHS
@pytest.mark.parametrize("dtype", DTYPE_POOL, ids=str)
def test_each_shared_dtype_once(private, dtype):
    (view,) = carve([((3, 5), dtype)])
    fill_random(view, seed=7)
    _check_handoff(view, private)


@PATHS
@pytest.mark.parametrize("dtype", DTYPE_POOL, ids=str)
def test_retained_views_hand_off_too(private, dtype):
    manager_cls = workspace_manager()
    if manager_cls is None:
        pytest.skip("the workspace manager (issue 3) does not exist")
    ws = manager_cls("cpu")
    ws.get_simultaneous(((3000,), torch.uint8))
    view, _ = ws.get_retained("kv", (4, 6), dtype)
    fill_random(view, seed=3)
    _check_handoff(view, private)


@PATHS
@pytest.mark.parametrize("make", [lambda t: t.T, lambda t: t.reshape(2, 4, 8).permute(2, 0, 1)])
def test_permuted_layouts_are_zero_copy(private, make):
    (base,) = carve([((8, 8), torch.float32)])
    base.copy_(torch.arange(64, dtype=torch.float32).reshape(8, 8))
    view = make(base)
    with handoff_path(private):
        array = interop.to_jax(view)
    assert array.unsafe_buffer_pointer() == view.data_ptr()
    assert np.array_equal(np.asarray(array), view.numpy())


def _aligned(n: int = 64) -> torch.Tensor:
    return carve([((n,), torch.float32)])[0].zero_()


Layout, Aligned, Device = (
    interop.errors.UnsupportedLayoutError,
    interop.errors.MisalignedViewError,
    interop.errors.DeviceNotVisibleError,
)
Conj, Neg, Grad, Dtype, X64 = (
    interop.errors.ConjugateBitError,
    interop.errors.NegativeBitError,
    interop.errors.GradientTrackedError,
    interop.errors.UnsupportedDtypeError,
    interop.errors.X64DisabledError,
)
# id, what is handed over, error, builtin base, fragment of the message
REFUSED = [
    ("step-slice", lambda: _aligned()[::2], Layout, ValueError, "dense strides"),
    ("column-slice", lambda: _aligned().reshape(8, 8)[:, :4], Layout, ValueError, "strides"),
    ("expand", lambda: _aligned(8).reshape(1, 8).expand(4, 8), Layout, ValueError, "strides"),
    ("sparse-coo", lambda: torch.eye(3).to_sparse(), Layout, ValueError, "sparse_coo"),
    ("sparse-csr", lambda: torch.eye(3).to_sparse_csr(), Layout, ValueError, "sparse_csr"),
    ("nested", lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), Layout,
     ValueError, "nested tensor"),
    ("misaligned-cpu", lambda: _aligned()[4:], Aligned, ValueError, "not aligned"),
    ("meta-device", lambda: torch.empty(4, device="meta"), Device, ValueError, "'meta'"),
    ("conjugate-bit", lambda: torch.ones(4, dtype=torch.complex64).conj(), Conj, ValueError,
     "conjugate bit"),
    ("negative-bit", lambda: torch.ones(4)._neg_view(), Neg, ValueError, "negative bit"),
    ("negative-bit-complex", lambda: torch.ones(4, dtype=torch.complex64).conj().imag, Neg,
     ValueError, "negative bit"),
    ("requires-grad", lambda: torch.ones(4, requires_grad=True), Grad, ValueError, "detach"),
    ("complex32", lambda: torch.ones(4, dtype=torch.complex32), Dtype, TypeError, "complex32"),
    ("int64-x64-off", lambda: torch.arange(4), X64, TypeError, "torch.int64"),
    ("float64-x64-off", lambda: torch.ones(4, dtype=torch.float64), X64, TypeError, "float64"),
]  # fmt: skip


@PATHS
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize(
    ("make", "error", "builtin", "fragment"),
    [r[1:] for r in REFUSED],
    ids=[r[0] for r in REFUSED],
)
def test_refused_instead_of_copied(private, make, error, builtin, fragment):
    value = make()
    with handoff_path(private), pytest.raises(error) as info:
        interop.to_jax(value)
    assert isinstance(info.value, builtin) and isinstance(info.value, BufferError)
    assert "to_jax" in str(info.value) and fragment in str(info.value), str(info.value)


def test_conjugate_and_negative_bits_are_told_apart():
    with pytest.raises(interop.errors.ConjugateBitError) as conj:
        interop.to_jax(torch.ones(4, dtype=torch.complex64).conj())
    with pytest.raises(interop.errors.NegativeBitError) as neg:
        interop.to_jax(torch.ones(4)._neg_view())
    assert "conjugate bit" in str(conj.value) and "negative bit" not in str(conj.value)
    assert "negative bit" in str(neg.value) and "conjugate bit" not in str(neg.value)
    assert (conj.value.reason, neg.value.reason) == ("conjugate", "negative")
    assert isinstance(conj.value, interop.errors.LazyViewError)
    assert isinstance(neg.value, interop.errors.LazyViewError)


def test_not_a_tensor_is_a_type_error():
    with pytest.raises(TypeError, match=r"expected a torch\.Tensor, got ndarray"):
        interop.to_jax(np.ones(4, np.float32))


def test_x64_refusal_says_how_to_enable_it():
    with pytest.raises(interop.errors.X64DisabledError, match=r"jax_enable_x64.*JAX_ENABLE_X64=1"):
        interop.to_jax(torch.tensor([2**40 + 5]))


@pytest.mark.skipif(not hasattr(jax, "enable_x64"), reason="no jax.enable_x64 context")
def test_x64_context_is_honoured():
    (view,) = carve([((1,), torch.int64)])
    view.fill_(2**40 + 5)
    with jax.enable_x64(True):
        assert interop.to_jax(view).tolist() == [2**40 + 5]
    with pytest.raises(interop.errors.X64DisabledError):
        interop.to_jax(view)


def test_64_bit_dtypes_are_exact_with_x64_on():
    code = textwrap.dedent(
        """
        import numpy as np, torch, interop
        from test_jax_views import carve, handoff_path
        values = {
            torch.int64: [2**40 + 5, -(2**62)], torch.uint64: [2**63 + 1, 7],
            torch.float64: [1e300, 2**-1074], torch.complex128: [1e300 + 1j, -1j],
        }
        for private in (True, False):
            for dtype, vals in values.items():
                (view,) = carve([((2,), dtype)])
                view.copy_(torch.tensor(vals, dtype=dtype))
                with handoff_path(private):
                    array = interop.to_jax(view)
                assert array.dtype == np.dtype(str(dtype).split(".")[1]), (dtype, array.dtype)
                assert array.unsafe_buffer_pointer() == view.data_ptr(), dtype
                assert np.asarray(array).tolist() == view.tolist(), (dtype, np.asarray(array))
        print("exact")
        """
    )
    env = {"JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu", "PYTHONPATH": "tests/bridge"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.stdout.strip() == "exact", out.stderr[-2000:]
    assert sorted(map(str, WIDE_DTYPES)) == [
        "torch.complex128", "torch.float64", "torch.int64", "torch.uint64"
    ]  # fmt: skip


@PATHS
def test_fresh_handoff_sees_torch_writes_even_after_a_host_read(private):
    (view,) = carve([((1000,), torch.float32)])
    view.fill_(1.0)
    total = jax.jit(jnp.sum)
    with handoff_path(private):
        first = interop.to_jax(view)
        assert np.asarray(first).sum() == 1000.0  # a host read: JAX may cache it (jax#19123)
        assert float(total(first)) == 1000.0
        view.fill_(7.0)  # torch writes the region
        second = interop.to_jax(view)
    assert np.asarray(second).sum() == 7000.0
    assert float(total(second)) == 7000.0
    assert second.unsafe_buffer_pointer() == first.unsafe_buffer_pointer()


@PATHS
def test_to_torch_waits_for_the_computation(private):
    slow = jax.jit(lambda x: jax.lax.fori_loop(0, 30, lambda i, acc: jnp.sin(acc) + x, x))
    x = jnp.linspace(0.0, 1.0, 200_000, dtype=jnp.float32)
    expected = np.asarray(slow(x))
    for _ in range(5):
        with handoff_path(private):
            tensor = interop.to_torch(slow(x))  # read at once, no block_until_ready
        assert np.array_equal(tensor.numpy(), expected)


@PATHS
def test_to_torch_is_zero_copy_and_writable(private):
    array = jnp.arange(8, dtype=jnp.int32)
    with handoff_path(private):
        tensor = interop.to_torch(array)
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()
    tensor[0] = 42  # aliasing: the "immutable" array sees it (documented)
    assert int(array[0]) == 42


def test_to_torch_refuses_what_it_cannot_alias():
    with pytest.raises(TypeError, match=r"concrete jax\.Array"):
        interop.to_torch(np.ones(3))
    with pytest.raises(TypeError, match="tracer"):
        jax.jit(interop.to_torch)(jnp.ones(3))


def test_sharded_array_is_refused():
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, interop
        from jax.sharding import NamedSharding, PartitionSpec
        mesh = jax.make_mesh((2,), ("x",))
        array = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, PartitionSpec("x")))
        try:
            interop.to_torch(array)
        except interop.errors.ShardedArrayError as err:
            assert isinstance(err, ValueError) and isinstance(err, BufferError)
            assert err.__cause__ is None and err.__context__ is None
            print("refused")
        """
    )
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.stdout.strip() == "refused", out.stderr[-2000:]


def test_numpy_aliases_cpu_views_and_handed_arrays():
    (view,) = carve([((4, 4), torch.int16)])
    view.copy_(torch.arange(16, dtype=torch.int16).reshape(4, 4))
    from_torch = np.from_dlpack(view)
    from_jax = np.from_dlpack(interop.to_jax(view))
    for array in (from_torch, from_jax):
        assert array.__array_interface__["data"][0] == view.data_ptr()
        assert np.array_equal(array, view.numpy())
    view[0, 0] = -1
    assert from_torch[0, 0] == -1 and from_jax[0, 0] == -1


def test_private_path_is_used_on_this_jax():
    from interop._bridge import _dlpack

    assert _dlpack.PRIVATE_PATH_AVAILABLE, "jaxlib changed: the fast handoff path is off"
    assert _dlpack.use_private_path


def test_the_permuted_layout_probe_tells_the_truth_about_this_jax():
    """jax 0.6.1 to 0.7.x import a transpose with wrong values: the probe must say so."""
    (base,) = carve([((4, 8), torch.float32)])
    base.copy_(torch.arange(32, dtype=torch.float32).reshape(4, 8))
    target = _dlpack.target_for(base)
    raw = jax.dlpack.from_dlpack(base.T, copy=False)
    assert _dlpack.permuted_layouts_import_correctly(target) == np.array_equal(
        np.asarray(raw), base.T.numpy()
    )


def test_a_jax_that_gets_permuted_layouts_wrong_is_refused(monkeypatch):
    (base,) = carve([((4, 8), torch.float32)])
    monkeypatch.setitem(_dlpack._permuted_ok, _dlpack.target_for(base), False)
    with pytest.raises(interop.errors.UnsupportedLayoutError, match="wrong values"):
        interop.to_jax(base.T)
    assert interop.to_jax(base).unsafe_buffer_pointer() == base.data_ptr()  # dense: fine


def test_only_permuted_layouts_meet_the_probe(monkeypatch):
    """A step slice on such a jax keeps its own refusal (and message)."""
    view = _aligned()
    monkeypatch.setitem(_dlpack._permuted_ok, _dlpack.target_for(view), False)
    with pytest.raises(interop.errors.UnsupportedLayoutError, match="dense strides"):
        interop.to_jax(view[::2])


def test_a_fake_tensor_is_refused_not_read_at_address_zero():
    """Under FakeTensorMode a tensor holds shapes only; JAX read garbage (to_jax) or the
    process died (jax_call)."""
    import jax
    from torch._subclasses.fake_tensor import FakeTensorMode

    double = interop.jax_call(jax.jit(lambda a: a * 2))
    with FakeTensorMode():
        fake = torch.ones(4)
        with pytest.raises(interop.errors.FakeTensorError, match="no bytes") as info:
            interop.to_jax(fake)
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, BufferError)
        with pytest.raises(interop.errors.FakeTensorError):
            double(fake)


def test_a_wrapper_subclass_with_real_data_is_not_called_a_fake_tensor():
    """A wrapper subclass (its data in an inner tensor: a logging tensor, say) has no
    bytes of its own either; the refusal says so, and names no FakeTensorMode."""
    from torch.testing._internal.logging_tensor import LoggingTensor

    wrapped = LoggingTensor(torch.ones(4))
    with pytest.raises(interop.errors.FakeTensorError, match="no bytes") as info:
        interop.to_jax(wrapped)
    message = str(info.value)
    assert "LoggingTensor" in message and "wrapper subclass" in message, message
    assert "FakeTensorMode" not in message, message


def test_a_tensor_inside_a_torch_func_transform_is_refused_naming_jax_call():
    # vmap's and jvp's wrappers raised torch's raw "Cannot access data pointer of Tensor
    # that doesn't have storage"; a forward-AD dual tensor lost its tangent without a word.
    import torch.autograd.forward_ad as fwAD

    def handed(t):
        interop.to_jax(t)
        return t

    with pytest.raises(interop.errors.TransformedTensorError, match=r"jax_call") as info:
        torch.func.vmap(handed)(torch.ones(2, 4))
    assert isinstance(info.value, BufferError) and isinstance(info.value, ValueError)
    with pytest.raises(interop.errors.GradientTrackedError, match=r"forward-mode tangent"):
        torch.func.jvp(handed, (torch.ones(4),), (torch.ones(4),))
    with fwAD.dual_level():
        dual = fwAD.make_dual(torch.zeros(4), torch.ones(4))
        with pytest.raises(interop.errors.GradientTrackedError, match=r"unpack_dual"):
            interop.to_jax(dual)
        primal = fwAD.unpack_dual(dual).primal  # what the message offers: no tangent
        assert interop.to_jax(primal).tolist() == [0.0] * 4
        assert interop.to_jax(torch.ones(2)).tolist() == [1.0, 1.0]  # a plain tensor
