"""``torch_call`` over several devices: XLA runs ``fn`` once per device, at once, on threads
of its own. A workspace of one slot serves those calls one at a time (they shared its only
slot's bytes and overwrote each other's scratch), and an eager call with a sharded input
raises ``fn``'s error as itself (it returned before ``fn`` had run).

The end-to-end checks run in a child process with four host devices
(``--xla_force_host_platform_device_count``, read once when JAX starts).
"""

from __future__ import annotations

import contextvars
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import interop
from interop._context import slot_unknown

F32 = torch.float32


def _in_unknown_slot(ws, started, release, got, ask=True):
    """A block as XLA's thread runs one: the slot unknown; ask for scratch, then wait."""
    with slot_unknown("a test's XLA thread"):
        if ask:
            (view,) = ws.get_simultaneous(((64,), F32))
            got.append(view.data_ptr())
        started.set()
        release.wait(10)


def test_two_blocks_of_unknown_slot_share_a_one_slot_workspace_one_at_a_time():
    ws = interop.WorkspaceManager("cpu")
    first_in, second_in = threading.Event(), threading.Event()
    release_first, release_second = threading.Event(), threading.Event()
    got: list[int] = []
    first = threading.Thread(target=_in_unknown_slot, args=(ws, first_in, release_first, got))
    second = threading.Thread(target=_in_unknown_slot, args=(ws, second_in, release_second, got))
    first.start()
    assert first_in.wait(10)
    second.start()
    assert not second_in.wait(0.3)  # it waits for the only slot
    release_first.set()
    assert second_in.wait(10)  # served once the first block ended
    release_second.set()
    first.join(10)
    second.join(10)
    assert len(got) == 2 and got[0] == got[1]  # the same bytes, never at once


def test_a_block_that_asks_for_no_scratch_waits_for_nothing():
    ws = interop.WorkspaceManager("cpu")
    first_in, second_in = threading.Event(), threading.Event()
    release = threading.Event()
    got: list[int] = []
    first = threading.Thread(target=_in_unknown_slot, args=(ws, first_in, release, got))
    first.start()
    assert first_in.wait(10)
    second = threading.Thread(
        target=_in_unknown_slot, args=(ws, second_in, threading.Event(), got, False)
    )
    second.start()
    assert second_in.wait(10)  # ran while the first holds the slot
    release.set()
    first.join(10)
    second.join(10)


def test_a_block_asking_twice_holds_once_and_releases_at_its_end():
    ws = interop.WorkspaceManager("cpu")
    with slot_unknown("a test's XLA thread"):
        ws.get_simultaneous(((64,), F32))
        ws.get_simultaneous(((128,), F32))  # the same block: no wait for itself
    with slot_unknown("a test's XLA thread"):  # released: served at once
        ws.get_simultaneous(((64,), F32))


def test_a_copy_of_the_blocks_context_shares_its_hold_and_is_refused_after_it():
    """A thread the block starts with a copy of its context asks through the block's own
    hold (no wait for itself); asking through a copy after the block ended took the lock
    for good (every later block hung): refused instead."""
    ws = interop.WorkspaceManager("cpu")
    with slot_unknown("a test's XLA thread"):
        ws.get_simultaneous(((64,), F32))
        copied = contextvars.copy_context()
        helper = threading.Thread(target=copied.run, args=(ws.get_simultaneous, ((32,), F32)))
        helper.start()
        helper.join(10)
        assert not helper.is_alive()
    with pytest.raises(interop.errors.SlotUnknownError, match="after the function returned"):
        copied.run(ws.get_simultaneous, ((16,), F32))
    served = threading.Event()

    def later_block() -> None:
        with slot_unknown("a test's XLA thread"):
            ws.get_simultaneous(((16,), F32))
        served.set()

    threading.Thread(target=later_block, daemon=True).start()
    assert served.wait(10)


_CHILD = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, jax.numpy as jnp, numpy as np, torch, interop
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    interop.init_workspace_manager("cpu")  # one slot

    def doubled(x):  # scratch from the workspace, some work while other devices run
        (scratch,) = interop.current_workspace_manager().get_simultaneous(
            ((x.numel(),), x.dtype)
        )
        torch.mul(x.reshape(-1), 2, out=scratch)
        out = torch.empty_like(scratch)
        for _ in range(30):
            torch.add(scratch, 0, out=out)
        return out.reshape(x.shape).clone()

    layer = interop.torch_call(doubled, lambda x: x)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    x = jnp.arange(4 * 50_000, dtype=jnp.float32).reshape(4, 50_000)
    sharded = jax.device_put(x, NamedSharding(mesh, P("d")))
    mapped = jax.jit(jax.shard_map(layer, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    expected = np.asarray(x) * 2
    wrong = sum(not np.array_equal(np.asarray(mapped(sharded)), expected) for _ in range(5))
    print("shard_map wrong", wrong)
    wrong = sum(
        not np.array_equal(np.asarray(jax.pmap(layer)(x[:, None])).reshape(4, -1), expected)
        for _ in range(5)
    )
    print("pmap wrong", wrong)

    def doubled_in_scratch(x):  # the result is the scratch: read after fn returns
        (scratch,) = interop.current_workspace_manager().get_simultaneous(
            ((x.numel(),), x.dtype)
        )
        return torch.mul(x.reshape(-1), 2, out=scratch).reshape(x.shape)

    in_scratch = interop.torch_call(doubled_in_scratch, lambda x: x)
    big = jnp.arange(4 * 1_000_000, dtype=jnp.float32).reshape(4, 1_000_000)
    wrong = sum(
        not np.array_equal(np.asarray(jax.pmap(in_scratch)(big)), np.asarray(big) * 2)
        for _ in range(5)
    )
    print("scratch result wrong", wrong)

    print("eager result right", np.array_equal(np.asarray(layer(sharded)), expected))

    def bad(x):
        raise ValueError("boom from fn")

    failing = interop.torch_call(bad, lambda x: x, vmap_method="sequential")
    for name, transformed in [
        ("vmap", lambda: jax.vmap(failing)(sharded)),
        ("grad", lambda: jax.grad(lambda a: failing(a).sum())(sharded)),
    ]:
        try:  # an eager transform's result is a tracer: its value is waited for
            transformed()
            print(name + ": returned")
        except ValueError as err:
            print(name + ": raised", err)
    from interop._bridge import _torch_call

    one = Mesh(np.array(jax.devices()[:1]), ("d",))
    print("one device counts", _torch_call._several_devices(
        jax.device_put(x, NamedSharding(one, P("d")))
    ))
    try:  # last: nothing after it replaces the failed computation's tokens
        interop.torch_call(bad, lambda x: x)(sharded)
        print("eager: returned")
    except ValueError as err:
        print("eager: raised", err)
    """
)


def test_per_device_calls_over_four_devices(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "shard_map wrong 0" in lines and "pmap wrong 0" in lines, done.stdout
    assert "scratch result wrong 0" in lines, done.stdout
    assert "eager: raised boom from fn" in lines, done.stdout + done.stderr[-3000:]
    assert "eager result right True" in lines, done.stdout
    assert "vmap: raised boom from fn" in lines and "grad: raised boom from fn" in lines
    assert "one device counts False" in lines, done.stdout
    # The failure was the caller's once: JAX's exit handlers do not raise it again.
    assert "Exception ignored" not in done.stderr, done.stderr[-3000:]


_TOKENS_CHILD = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, jax.numpy as jnp, numpy as np, interop
    from jax._src import dispatch
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    def bad(x):
        raise ValueError("boom")

    layer = interop.torch_call(bad, lambda x: x)
    devices = jax.devices()
    first, second = Mesh(np.array(devices[:2]), ("d",)), Mesh(np.array(devices[2:]), ("d",))
    mine = jax.device_put(jnp.arange(4.0), NamedSharding(first, P("d")))
    eager = jax.device_put(jnp.arange(4.0), NamedSharding(second, P("d")))
    try:  # the caller's own jit: its failure is JAX's to report again, at exit too
        jax.block_until_ready(jax.jit(layer)(mine))
    except Exception:
        pass
    try:
        layer(eager)
    except ValueError:
        print("eager raised")
    print("tokens on", sorted(d.id for d in dispatch.runtime_tokens.output_runtime_tokens))
    """
)


def test_an_eager_failure_drops_its_own_devices_tokens_only(tmp_path):
    """The failed eager call's tokens (devices 2 and 3) go; those of the caller's own failed
    jit on devices 0 and 1 stay, for JAX to report as it does."""
    script = tmp_path / "child.py"
    script.write_text(_TOKENS_CHILD)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    lines = done.stdout.splitlines()
    assert "eager raised" in lines and "tokens on [0, 1]" in lines, (
        done.stdout + done.stderr[-2000:]
    )
