"""Training through ``jax_call`` as torch trains: activation checkpointing (both
implementations), gradient accumulation, and DistributedDataParallel over gloo, each
against the same model written in torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import torch
from torch.nn.functional import mse_loss
from torch.utils.checkpoint import checkpoint

import interop

jax_mixer = interop.jax_call(jax.jit(lambda w, h: jnp.tanh(h @ w)))


def torch_mixer(w, h):
    return torch.tanh(h @ w)


class Model(torch.nn.Module):
    """A torch model whose middle layer is ``mixer`` (a jax_call, or the same in torch)."""

    def __init__(self, mixer, checkpointed: bool | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first, self.last = torch.nn.Linear(6, 8), torch.nn.Linear(8, 1)
        self.w = torch.nn.Parameter(torch.randn(8, 8) / 3)
        self.mixer = mixer
        self.checkpointed = checkpointed  # None: no checkpoint; else use_reentrant

    def forward(self, x):
        h = self.first(x)
        if self.checkpointed is None:
            return self.last(self.mixer(self.w, h))
        return self.last(checkpoint(self.mixer, self.w, h, use_reentrant=self.checkpointed))


def data(n: int = 12):
    generator = torch.Generator().manual_seed(n)
    return torch.randn(n, 6, generator=generator), torch.randn(n, 1, generator=generator)


def _grads(model):
    return [p.grad.clone() for p in model.parameters()]


def _assert_close(got, want):
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, atol=1e-6), (g, w)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_activation_checkpointing(reentrant):
    x, y = data()
    grads = []
    for mixer in (jax_mixer, torch_mixer):
        model = Model(mixer, checkpointed=reentrant)
        mse_loss(model(x.clone().requires_grad_(reentrant)), y).backward()
        grads.append(_grads(model))
    _assert_close(*grads)


def test_gradient_accumulation_over_micro_batches():
    x, y = data(12)
    model = Model(jax_mixer)
    for part in range(3):
        rows = slice(4 * part, 4 * part + 4)
        (mse_loss(model(x[rows]), y[rows]) / 3).backward()
    reference = Model(torch_mixer)
    mse_loss(reference(x), y).backward()
    _assert_close(_grads(model), _grads(reference))


RANK = textwrap.dedent(
    """
    import json, sys
    import torch, torch.distributed as dist
    sys.path.insert(0, sys.argv[4])
    from test_training import Model, data, jax_mixer

    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(Model(jax_mixer))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data(12)
    rows = slice(6 * rank, 6 * rank + 6)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        optimizer.step()
    print("PARAMS", json.dumps([p.detach().flatten().tolist() for p in model.parameters()]))
    dist.destroy_process_group()
    """
)


def test_distributed_data_parallel_over_gloo(tmp_path):
    """Two ranks, half the batch each: DDP averages the gradients, so three steps give
    the parameters one process gets on the whole batch (mean loss) in torch alone."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    here = str(Path(__file__).resolve().parent)
    store = str(tmp_path / "store")
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), "2", store, here],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=600) for rank in ranks]
    for rank, (_, err) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, err[-3000:]
    trained = [
        json.loads(next(line for line in out.splitlines() if line.startswith("PARAMS "))[7:])
        for out, _ in outputs
    ]
    reference = Model(torch_mixer)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = data(12)
    for _ in range(3):
        optimizer.zero_grad()
        mse_loss(reference(x), y).backward()
        optimizer.step()
    want = [p.detach().flatten() for p in reference.parameters()]
    for params in trained:
        _assert_close([torch.tensor(p) for p in params], want)
