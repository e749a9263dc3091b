"""The framework-private hooks: each does its job where its gate holds, nothing otherwise."""

from __future__ import annotations

import subprocess
import sys
import types

import interop._private as private


def test_importing_interop_skips_jax_in_dynamo_without_importing_dynamo():
    code = (
        "import sys, jax, interop\n"
        "print('torch._dynamo' in sys.modules)\n"
        "from torch._dynamo import trace_rules\n"
        "print(trace_rules.check_file(jax.numpy.__file__).skipped)\n"
        "print(trace_rules.check_file(interop.__file__).skipped)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert done.stdout.split() == ["False", "True", "False"]


def test_the_rule_is_added_at_once_where_dynamo_is_imported():
    import jax
    from torch._dynamo import trace_rules

    assert private.dynamo_skips_jax() is True
    assert trace_rules.check_file(jax.__file__).skipped


def test_without_the_private_function_nothing_changes():
    assert private._add_skips(types.ModuleType("trace_rules_without_add")) is False


def test_the_import_hook_runs_once_after_the_module(tmp_path, monkeypatch):
    (tmp_path / "hooked_module_for_test.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = private._AfterImport("hooked_module_for_test", lambda m: seen.append(m.VALUE))
    sys.meta_path.insert(0, hook)
    try:
        import hooked_module_for_test  # noqa: F401
    finally:
        sys.modules.pop("hooked_module_for_test", None)
    assert seen == [1] and hook not in sys.meta_path


def test_the_import_hook_leaves_a_shared_loader_alone(tmp_path, monkeypatch):
    """pytest's assertion rewriter is one loader for many modules (``*_test.py`` ones)."""
    for name in ("first_hooked_test", "second_hooked_test"):
        (tmp_path / f"{name}.py").write_text(f"NAME = {name!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    sys.meta_path.insert(0, private._AfterImport("first_hooked_test", lambda m: seen.append(m)))
    try:
        import first_hooked_test
        import second_hooked_test
    finally:
        for name in ("first_hooked_test", "second_hooked_test"):
            sys.modules.pop(name, None)
    assert [m.NAME for m in seen] == ["first_hooked_test"]
    assert second_hooked_test.NAME == "second_hooked_test"
    assert isinstance(first_hooked_test.__spec__.loader, private._ThenLoader)
    assert not isinstance(second_hooked_test.__spec__.loader, private._ThenLoader)


def test_a_constant_result_is_computed_while_tracing_only():
    import torch

    calls = []

    @private.constant_result
    def offset(n):
        calls.append(n)
        return n * 10

    compiled = torch.compile(lambda x: x + offset(3), backend="eager", fullgraph=True)
    assert [compiled(torch.zeros(1)).item() for _ in range(3)] == [30.0] * 3
    assert calls == [3]
    torch._dynamo.reset()


def test_a_function_run_eagerly_is_marked_and_its_frames_skipped(monkeypatch):
    def scratch():
        return 1

    assert private.dynamo_runs_eagerly(scratch, "the reason") is True
    assert (scratch._torchdynamo_disable, scratch._torchdynamo_disable_msg) == (True, "the reason")


def test_without_frame_strategies_a_function_is_only_marked(monkeypatch):
    def refuse(code, strategy):
        raise AssertionError("no strategy should be set")

    monkeypatch.setattr(private, "_SKIP_RECURSIVELY", None)
    monkeypatch.setattr(private, "_set_strategy", refuse)

    def scratch():
        return 1

    assert private.dynamo_runs_eagerly(scratch, "why") is False
    assert scratch._torchdynamo_disable_msg == "why"


def test_the_interpreter_files_are_importlibs_bootstrap(monkeypatch):
    import importlib._bootstrap
    import importlib._bootstrap_external
    import os

    expected = {
        os.path.abspath(m.__file__)
        for m in (importlib._bootstrap, importlib._bootstrap_external)
        if getattr(m, "__file__", None)
    }
    assert set(private.interpreter_files()) == expected
    monkeypatch.setattr(private, "_BOOTSTRAP_MODULES", ("no_such_bootstrap_module",))
    assert private.interpreter_files() == ()


def test_jaxlib_dlpack_is_found_where_the_extension_is_recent_enough(monkeypatch):
    import jax.numpy as jnp

    found = private.jaxlib_dlpack()
    assert found is not None and type(jnp.zeros(1)) is found.array_impl
    monkeypatch.setattr(private, "JAXLIB_EXTENSION_AT_LEAST", 10**9)
    assert private.jaxlib_dlpack() is None


def test_torch_capsules_are_the_c_functions_or_the_public_ones(monkeypatch):
    import torch

    assert private.torch_capsules() == (torch._C._to_dlpack, torch._C._from_dlpack)
    monkeypatch.delattr(torch._C, "_to_dlpack")
    to_capsule, from_capsule = private.torch_capsules()
    assert (to_capsule, from_capsule) == (
        torch.utils.dlpack.to_dlpack,
        torch.utils.dlpack.from_dlpack,
    )
    source = torch.arange(4)
    assert from_capsule(to_capsule(source)).data_ptr() == source.data_ptr()


def test_the_host_view_says_whether_it_copied_and_falls_back_to_asarray():
    import jax.numpy as jnp
    import numpy as np

    array = jnp.arange(3, dtype=jnp.bfloat16)
    host, copied = private.host_view(array)
    assert (host.tolist(), copied) == ([0, 1, 2], False)
    plain = np.arange(3)  # no jaxlib method: NumPy's own conversion, "copied" unknown
    host, copied = private.host_view(plain)
    assert host is plain and copied is None


def test_the_sharding_device_is_its_one_device_either_way():
    import jax.numpy as jnp

    array = jnp.zeros(2)
    device = next(iter(array.devices()))
    assert private.sharding_device(array.sharding) == device
    assert private.sharding_device(types.SimpleNamespace(device_set={device})) == device


def test_x64_mode_is_read_as_in_force_or_from_the_config(monkeypatch):
    import jax

    assert private.x64_enabled() is bool(jax.config.read("jax_enable_x64"))
    with jax.enable_x64(True):
        assert private.x64_enabled() is True
    monkeypatch.setattr(private, "_x64_state", False)  # the private state is missing
    assert private.x64_enabled() is bool(jax.config.read("jax_enable_x64"))


def test_started_backends_are_seen_and_unknown_means_none(monkeypatch):
    import jax

    jax.devices()
    assert private.jax_backends_started() is True
    assert "cpu" in private.jax_started_platforms()
    monkeypatch.setattr(private, "_xla_bridge", lambda: types.SimpleNamespace())
    assert private.jax_backends_started() is False
    assert private.jax_started_platforms() == ()


def test_storage_owners_count_views_and_unknown_counts_watch_the_buffer(monkeypatch):
    import torch

    buffer = torch.empty(16)
    assert not private.held_elsewhere(buffer)  # the buffer and the storage asked for
    view = buffer[4:]
    assert private.held_elsewhere(buffer)
    del view
    assert not private.held_elsewhere(buffer)
    block = torch.empty(64, dtype=torch.uint8)
    sliced = block[16:48]  # an aligned buffer sliced from its block: the block is its own
    del block
    assert not private.held_elsewhere(sliced)
    kept = sliced[:8]
    assert private.held_elsewhere(sliced)
    del kept
    monkeypatch.setattr(private, "_use_count", None)
    assert private.held_elsewhere(buffer)  # unknown: watched
    monkeypatch.undo()
    assert private.held_elsewhere(types.SimpleNamespace())  # no _base: unknown, watched


def test_a_weak_storage_reference_is_released_once_whatever_was_constructed(monkeypatch):
    released = []
    private.release_weak_storage(types.SimpleNamespace(cdata=7, _free_weak_ref=released.append))
    assert released == [7]
    private.release_weak_storage(types.SimpleNamespace())  # never constructed: nothing held
    assert released == [7]

    class Renamed:  # torch renamed _free_weak_ref: its own finaliser knows the new name
        def __del__(self):
            released.append(self.cdata)

    monkeypatch.setattr(private, "StorageWeakRef", Renamed)
    private.release_weak_storage(types.SimpleNamespace(cdata=8))
    assert released == [7, 8]


def test_a_half_built_retired_reference_is_finalised_quietly(monkeypatch):
    from interop._workspace._retired import StorageRef

    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    ref = StorageRef.__new__(StorageRef)  # as Dynamo's polyfill makes one
    del ref
    assert ignored == []


def test_a_weak_storage_reference_gives_the_live_storage_or_none(monkeypatch):
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    tensor = torch.zeros(4)
    ref = StorageWeakRef(tensor.untyped_storage())
    assert private.storage_from_weak(ref).data_ptr() == tensor.data_ptr()
    del tensor
    assert private.storage_from_weak(ref) is None
    tensor = torch.zeros(4)
    ref = StorageWeakRef(tensor.untyped_storage())
    monkeypatch.setattr(private, "torch", types.SimpleNamespace(UntypedStorage=object))
    assert private.storage_from_weak(ref) is None


def test_transforms_are_seen_while_torch_func_runs():
    import torch

    seen = []
    torch.func.vmap(lambda x: seen.append(private.transforms_active()) or x)(torch.ones(2, 1))
    assert seen == [True] and private.transforms_active() is False


def test_without_the_forward_ad_level_every_tensor_is_asked(monkeypatch):
    import torch

    monkeypatch.delattr(torch.autograd.forward_ad, "_current_level")
    assert private.dual_level_active() is True


def test_jit_options_without_the_private_field_are_unknown():
    import jax

    jitted = jax.jit(lambda x: x)
    assert private.jit_options(types.SimpleNamespace(_jit_info=object())) is None
    assert private.jit_options(jitted) == private.jit_options(jax.jit(jitted.__wrapped__))
    assert hash(private.jit_options(jax.jit(jitted.__wrapped__, donate_argnums=0)))


def test_the_legacy_vmap_level_is_found_and_round_trips():
    import torch

    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 1

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            level = private.legacy_vmap_level([None, grad])
            plain = private.legacy_unbatched(grad, level)
            seen.append(tuple(plain.shape))
            return private.legacy_batched(plain * 3, level)

    x = torch.ones(3, requires_grad=True)
    cotangents = torch.arange(6.0).reshape(2, 3)
    (got,) = torch.autograd.grad(Probe.apply(x), x, cotangents, is_grads_batched=True)
    assert seen == [(2, 3)] and torch.equal(got, cotangents * 3)
    assert private.legacy_vmap_level([cotangents]) is None
