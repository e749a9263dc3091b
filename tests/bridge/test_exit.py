"""At exit, XLA's threads finish releasing the tensors JAX imported before Python finalizes.

Without the wait (``interop/_bridge/_exit.py``), a release that is under way when the
interpreter finalizes aborts the process ("terminate called without an active
exception"): CI saw it once, after the last line of a ``jax_call`` script had run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import interop
from interop._bridge import _exit

ROOT = Path(__file__).resolve().parents[2]

#: A tensor JAX imports whose release (on XLA's thread, after the computation) is slow and
#: lets go of the GIL; the script ends while it is under way.
SLOW_RELEASE = """
import sys, threading, time
import jax, jax.numpy as jnp, numpy as np, torch
import interop

releasing = threading.Event()

class SlowToFree:
    def __init__(self):
        raw = np.ones(64 * 64 + 16, np.float32)
        skip = (-raw.ctypes.data % 64) // 4  # JAX aliases 64-byte aligned memory only
        self.host = raw[skip : skip + 64 * 64]
        self.__array_interface__ = self.host.__array_interface__

    def __del__(self):
        releasing.set()
        time.sleep(0.3)
        print("released", flush=True)

@jax.jit
def long(v):  # long enough to run on XLA's thread (newer XLA runs small ones inline)
    m = v.reshape(64, 64)
    big = jnp.tile(m, (4, 4))
    for _ in range(8):
        big = jnp.tanh(big @ big)
    return big.sum() + m.sum()

tensor = torch.from_dlpack(np.asarray(SlowToFree()))
out = long(interop.to_jax(tensor))
del tensor  # the execution, still running, is now the tensor's last owner
out.block_until_ready()
assert releasing.wait(60), "XLA never released the tensor"
print("exiting", flush=True)
"""


def test_the_exit_waits_for_a_release_under_way():
    env = {"JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", SLOW_RELEASE], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0 and out.stdout == "exiting\nreleased\n", (
        out.returncode,
        out.stdout,
        out.stderr[-2000:],
    )


def test_the_first_handoff_registers_the_wait():
    interop.to_jax(torch.zeros(4))
    assert _exit._registered


def test_python_threads_are_not_foreign():
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    try:
        assert _exit.foreign_thread_states() == 0
        assert _exit.wait_for_foreign_releases(deadline_s=0.5) == 0
    finally:
        done.set()
        thread.join()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pthread_create via ctypes")
@pytest.mark.parametrize("asks", [False, True], ids=["", "asking-for-its-python-thread"])
def test_the_wait_lasts_while_a_foreign_thread_is_in_python(asks):
    """A thread Python did not start (as XLA's are) runs Python code through a ctypes
    callback, which makes its thread state; the wait ends only once it is done. A release
    that logs or warns calls threading.current_thread(), which lists the thread as a
    _DummyThread: it is still one Python did not start."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
    inside, finished = threading.Event(), []

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def release(_: object) -> None:
        if asks:
            threading.current_thread()  # registers a _DummyThread for this thread
        inside.set()
        time.sleep(0.2)  # lets go of the GIL, as a jax.Array's destructor does
        finished.append(True)
        return None

    handle = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(handle), None, release, None) == 0
    try:
        assert inside.wait(10)
        assert _exit.foreign_thread_states() == 1
        assert _exit.wait_for_foreign_releases(deadline_s=10) == 0
        assert finished == [True]
    finally:
        libc.pthread_join(handle, None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pthread_create via ctypes")
def test_the_wait_gives_up_at_its_deadline():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
    inside, leave = threading.Event(), threading.Event()

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def stay(_: object) -> None:
        inside.set()
        leave.wait(30)
        return None

    handle = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(handle), None, stay, None) == 0
    try:
        assert inside.wait(10)
        assert _exit.wait_for_foreign_releases(deadline_s=0.05) == 1
    finally:
        leave.set()
        libc.pthread_join(handle, None)
