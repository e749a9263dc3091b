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
