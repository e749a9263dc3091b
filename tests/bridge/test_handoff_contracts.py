"""The handoff's contracts that bugs planted in interop/_bridge (to_jax/to_torch, DLPack,
the exit wait, JAX's memory settings, which inputs a gradient reaches) showed untested:
each test here fails with its planted bug and passes on the code.

It uses the view tests' helpers (``test_jax_views``), as test_handoff_conventions does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import enable_x64
from test_jax_views import carve, handoff_path

import interop
from interop._bridge import _dlpack

TESTS = Path(__file__).resolve().parent
PATHS = pytest.mark.parametrize("private", [True, False], ids=["private", "public"])
WIDE = ["int64", "uint64", "float64", "complex128"]


@PATHS
@pytest.mark.parametrize("name", WIDE)
def test_to_torch_hands_over_64_bit_arrays_with_x64_on(private, name):
    """x64 on: a 64-bit JAX array crosses to torch zero-copy, with its own dtype (the other
    direction is test_64_bit_dtypes_are_exact_with_x64_on)."""
    with enable_x64():
        dtype = getattr(jnp, name)
        big = 2**33 if jnp.issubdtype(dtype, jnp.integer) else 1e300  # no 32-bit value
        array = jnp.arange(3, dtype=dtype) + jnp.asarray(big, dtype)
        with handoff_path(private):
            tensor = interop.to_torch(array)
        assert tensor.dtype == getattr(torch, name)
        assert tensor.data_ptr() == array.unsafe_buffer_pointer()
        assert np.array_equal(tensor.numpy(), np.asarray(array))


def test_a_copied_import_is_refused_in_our_own_words(monkeypatch):
    """The public path's "returned a copy" refusal is raised as is: not wrapped again as if
    JAX had said it ("JAX said: to_jax: ...")."""
    real = jax.dlpack.from_dlpack
    monkeypatch.setattr(jax.dlpack, "from_dlpack", lambda t, copy=False: jnp.array(real(t)))
    with handoff_path(private=False), pytest.raises(interop.errors.ZeroCopyError) as info:
        interop.to_jax(carve([((8,), torch.float32)])[0])
    message = str(info.value)
    assert message.startswith("to_jax: jax.dlpack.from_dlpack returned a copy"), message
    assert "JAX said" not in message, message


def test_the_permuted_layout_probe_catches_a_row_major_misread(monkeypatch):
    """On a jax that reads a transpose's bytes as row-major (0.6.1 to 0.7.x) the probe must
    answer False; a probe that is itself row-major cannot tell."""

    def row_major_misread(tensor, target, stream):  # what those jax releases do
        dense = tensor.as_strided(tensor.shape, _dense(tensor.shape), tensor.storage_offset())
        return jnp.asarray(dense.numpy())

    target = _dlpack.target_for(torch.ones(1))
    monkeypatch.setattr(_dlpack, "_permuted_ok", {})
    monkeypatch.setattr(_dlpack, "import_tensor", row_major_misread)
    assert _dlpack.permuted_layouts_import_correctly(target) is False
    monkeypatch.setattr(_dlpack, "_permuted_ok", {})
    monkeypatch.setattr(_dlpack, "import_tensor", lambda t, *_: jnp.asarray(t.numpy()))
    assert _dlpack.permuted_layouts_import_correctly(target) is True


def _dense(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@PATHS
def test_a_single_device_array_with_a_named_sharding_is_handed_over(private):
    """A NamedSharding over a one-device mesh is one device's memory: not "sharded"."""
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((1,), ("x",))
    array = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, PartitionSpec("x")))
    assert type(array.sharding) is NamedSharding
    with handoff_path(private):
        tensor = interop.to_torch(array)
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()
    assert tensor.tolist() == list(range(8))


@PATHS
@pytest.mark.parametrize("shape", [(3, 0), (2, 0, 3), (0,), (0, 4)], ids=str)
def test_empty_arrays_get_the_strides_torch_gives_empty_tensors(private, shape):
    with handoff_path(private):
        tensor = interop.to_torch(jnp.zeros(shape, jnp.float32))
    assert tuple(tensor.shape) == shape
    assert tensor.stride() == torch.empty(shape).stride()


def test_the_device_export_survives_deleting_the_array():
    """Where there is no host view (a GPU; CPU without NumPy's DLPack 1.x export) the tensor
    comes from addressable_data(0): deleting the array must neither abort the process
    (XLA: "Non-zero type 1 hold on destruction") nor free the tensor's bytes."""
    code = textwrap.dedent(
        """
        import jax.numpy as jnp, torch, interop
        from interop._bridge import _dlpack
        _dlpack.HOST_EXPORT = False  # the path GPUs take
        for private in (True, False):
            with _dlpack.forced_path(private):
                array = jnp.arange(1 << 16, dtype=jnp.int32) * 3
                tensor = interop.to_torch(array)
            assert tensor.data_ptr() == array.unsafe_buffer_pointer()
            array.delete()
            kept = [jnp.full((1 << 16,), 7, jnp.int32) + i for i in range(24)]
            assert torch.equal(tensor, torch.arange(1 << 16, dtype=torch.int32) * 3), private
            del tensor, kept
        print("ok")
        """
    )
    env = {"JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{TESTS.parents[1]}"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0 and out.stdout == "ok\n", (out.returncode, out.stderr[-3000:])


@pytest.mark.parametrize("fraction", [1, 1.0, 0.001], ids=str)
def test_the_ends_of_the_fraction_range_are_accepted(fraction, monkeypatch):
    """``mem_fraction`` is documented in (0, 1]: the whole GPU (1) is a valid choice."""
    from interop._bridge import _jax_config
    from interop._bridge._jax_config import MEM_FRACTION, PREALLOCATE

    monkeypatch.setattr(_jax_config, "jax_backend_started", lambda: False)
    monkeypatch.delenv(PREALLOCATE, raising=False)
    monkeypatch.delenv(MEM_FRACTION, raising=False)
    settings = interop.configure_jax_for_sharing(preallocate=True, mem_fraction=fraction)
    assert settings == {PREALLOCATE: "true", MEM_FRACTION: f"{float(fraction):g}"}
    assert _jax_config.os.environ[MEM_FRACTION] == f"{float(fraction):g}"


def test_too_late_even_when_only_some_settings_are_in_force(monkeypatch):
    """JAX started with PREALLOCATE=false but no fraction: asking for a fraction now cannot
    take effect, so it is refused, not reported as done."""
    from interop._bridge import _jax_config
    from interop._bridge._jax_config import MEM_FRACTION, PREALLOCATE

    jax.devices()  # JAX's backend is running
    monkeypatch.setenv(PREALLOCATE, "false")
    monkeypatch.delenv(MEM_FRACTION, raising=False)
    with pytest.raises(interop.errors.JaxAlreadyStartedError, match="already started"):
        interop.configure_jax_for_sharing(mem_fraction=0.5)
    assert MEM_FRACTION not in _jax_config.os.environ


@pytest.mark.parametrize("dtype", ["complex64", "float32", "bfloat16"])
def test_complex_and_low_precision_inputs_carry_gradients(dtype):
    """Every inexact dtype carries a gradient (complex included: JAX differentiates it),
    so reached() must not answer False (torch's None) for a complex input that is used."""
    from interop._bridge._reach import reached

    spec = jax.ShapeDtypeStruct((3,), getattr(jnp, dtype))
    assert reached(lambda a, b: [a * b], [spec, spec], [True]) == (True, True)
    assert reached(lambda a, b: [a * 2], [spec, spec], [True]) == (True, False)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn"])
def test_a_host_view_jaxlib_says_it_copied_is_not_handed_out(name, monkeypatch):
    """For bfloat16 and float8, jaxlib's host view reports whether it copied (a non-default
    layout): such a copy must not become the tensor; the buffer itself is aliased."""
    from interop import _private

    real = _private.host_view
    monkeypatch.setattr(_private, "host_view", lambda a: (np.array(real(a)[0], copy=True), True))
    array = jnp.arange(8, dtype=getattr(jnp, name))
    with handoff_path(private=True):
        tensor = interop.to_torch(array)
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()  # the buffer, not the copy
    assert tensor.dtype == getattr(torch, name)


#: jaxlib's words (xla/python/dlpack.cc) for a DLPack dtype it cannot import: reached from
#: to_jax where torch has a dtype this jax lacks (float8_e8m0fnu on older jax, say).
JAXLIB_DTYPE_REFUSALS = [
    "Invalid or unsupported DLPack float8_e8m0fnu width: 8 bits",
    "Invalid or unsupported DLPack float width: 128 bits",
    "Unknown or invalid DLPack type code 9",
]


@pytest.mark.parametrize("said", JAXLIB_DTYPE_REFUSALS)
def test_jaxlibs_dtype_refusals_become_dtype_errors(said):
    err = _dlpack._translate(RuntimeError(said), torch.zeros(4, dtype=torch.uint8))
    assert isinstance(err, interop.errors.UnsupportedDtypeError), repr(err)
    assert isinstance(err, TypeError) and said in str(err)


@PATHS
def test_a_non_leaf_tensor_that_requires_grad_is_refused_as_such(private):
    """An intermediate result of autograd (not a leaf) is refused for its gradient, not as
    a lazy view it is not."""
    leaf = torch.ones(4, requires_grad=True)
    with handoff_path(private), pytest.raises(interop.errors.GradientTrackedError) as info:
        interop.to_jax(leaf * 2)
    assert not isinstance(info.value, interop.errors.LazyViewError)
    assert "requires grad" in str(info.value)


@PATHS
def test_an_empty_tensor_subclass_is_not_mistaken_for_a_fake_one(private):
    """An empty tensor has no address (data_ptr() == 0) whatever its class: an empty
    nn.Parameter is handed over like an empty tensor, not refused as a fake tensor."""
    param = torch.nn.Parameter(torch.empty(0, 3), requires_grad=False)
    with handoff_path(private):
        array = interop.to_jax(param)
    assert array.shape == (0, 3) and array.dtype == jnp.float32


@pytest.mark.parametrize("value", ["platform", "PLATFORM", "Platform"])
def test_the_platform_allocator_is_recognised_as_jax_reads_it(value):
    """jaxlib lowercases XLA_PYTHON_CLIENT_ALLOCATOR (xla_client.py): any case of
    "platform" means JAX allocates on demand, so there is nothing to warn about."""
    from interop._bridge._jax_config import ALLOCATOR, preallocation_notice

    env = {ALLOCATOR: value}
    assert preallocation_notice(env, started=True, gpu_backend=True, gpu_plugin=True) is None
