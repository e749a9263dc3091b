"""One ``torch.distributed`` rank as vLLM runs it: a process with its own workspace manager.

Run as a script (``python tests/support/ranks.py RANK WORLD STORE REPORT``), it joins a gloo group
through a file store (no ports to pick), calls ``init_workspace_manager``, reserves the worst
case, locks, and then runs steps of different sizes with ``all_reduce`` and
``all_to_all_single`` in place on workspace views, writing what it saw to ``REPORT`` (JSON).
Imported, it gives the values each rank writes and what each rank must then read, so the
test checks the bytes against the same formulas; :func:`run_ranks` starts the processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

HIDDEN = 32
MAX_TOKENS = 64
#: Tokens per step: the worst case, then smaller steps (as chunked prefill and decode go).
STEPS = (64, 8, 33, 1)


def hidden_values(rank: int, step: int, tokens: int) -> list[float]:
    """What ``rank`` writes into its hidden-state view at ``step`` (small exact integers)."""
    return [float((rank + 1) * (i % 7) + step) for i in range(tokens * HIDDEN)]


def sent(rank: int, world: int, step: int, tokens: int) -> list[int]:
    """What ``rank`` sends: ``tokens`` values for each destination, naming sender and place."""
    return [
        1_000_000 * rank + 10_000 * dest + 100 * step + i
        for dest in range(world)
        for i in range(tokens)
    ]


def expected_hidden(world: int, step: int, tokens: int) -> list[float]:
    """What every rank reads after the ``all_reduce`` (sum) of everyone's hidden values."""
    columns = zip(*(hidden_values(r, step, tokens) for r in range(world)), strict=True)
    return [sum(column) for column in columns]


def expected_received(rank: int, world: int, step: int, tokens: int) -> list[int]:
    """What ``rank`` reads after the ``all_to_all_single``: each sender's chunk for it."""
    return [
        value
        for source in range(world)
        for value in sent(source, world, step, tokens)[rank * tokens : (rank + 1) * tokens]
    ]


def run_rank(rank: int, world: int, store: str) -> dict[str, Any]:
    """Join the group, warm up, lock and run :data:`STEPS`; what this rank saw."""
    import numpy as np
    import torch
    import torch.distributed as dist

    import interop

    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        interop.init_workspace_manager("cpu")  # vLLM: torch.device(f"cuda:{local_rank}")
        ws = interop.current_workspace_manager()

        def requests(tokens: int) -> tuple[Any, ...]:
            return (
                ((tokens, HIDDEN), torch.float32),
                ((world * tokens,), torch.int32),
                ((world * tokens,), torch.int32),
            )

        interop.reserve_workspace(*requests(MAX_TOKENS))
        interop.lock_workspace()
        (buffer,) = ws._current_workspaces
        assert buffer is not None
        start, capacity = buffer.data_ptr(), buffer.numel()
        steps = []
        for step, tokens in enumerate(STEPS):
            hidden, send, received = ws.get_simultaneous(*requests(tokens))
            hidden.view(-1).copy_(torch.tensor(hidden_values(rank, step, tokens)))
            dist.all_reduce(hidden)  # in place, on the workspace view
            send.copy_(torch.tensor(sent(rank, world, step, tokens), dtype=torch.int32))
            dist.all_to_all_single(received, send)  # into another view of the same buffer
            array = interop.to_jax(hidden)  # JAX in the same process reads the same bytes
            steps.append(
                {
                    "offsets": [v.data_ptr() - start for v in (hidden, send, received)],
                    "ends": [v.data_ptr() - start + v.nbytes for v in (hidden, send, received)],
                    "hidden": hidden.view(-1).tolist(),
                    "received": received.tolist(),
                    "jax_aliases": array.unsafe_buffer_pointer() == hidden.data_ptr(),
                    "jax_hidden": np.asarray(array).reshape(-1).tolist(),
                }
            )
        (after,) = ws._current_workspaces
        assert after is not None
        stats = ws.stats()
        return {
            "capacity": capacity,
            "same_buffer": after.data_ptr() == start and after.numel() == capacity,
            "locked": stats.locked,
            "growths": [s.growths for s in stats.slots],
            "steps": steps,
        }
    finally:
        interop.reset_workspace_manager()
        dist.destroy_process_group()


def run_ranks(
    world: int, folder: Path, timeout: float = 120.0, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Start ``world`` rank processes, wait for all (killing the rest as soon as one fails,
    or all at the deadline), and return each rank's report.

    Raises:
        AssertionError: a rank failed or timed out; the message holds every rank's output.
    """
    store, reports = folder / "store", [folder / f"rank{r}.json" for r in range(world)]
    logs = [folder / f"rank{r}.log" for r in range(world)]
    environ = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    processes = []
    for rank in range(world):
        with logs[rank].open("w") as log:  # a file, not a pipe: a full pipe would block
            command = [
                sys.executable,
                __file__,
                str(rank),
                str(world),
                str(store),
                str(reports[rank]),
            ]
            processes.append(
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environ)
            )
    deadline = time.monotonic() + timeout
    try:
        while True:
            codes = [p.poll() for p in processes]  # every one: any() would stop at the first
            if None not in codes or any(codes) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
    outputs = "\n".join(
        f"--- rank {rank} (exit {process.returncode}):\n{logs[rank].read_text()}"
        for rank, process in enumerate(processes)
    )
    assert all(p.returncode == 0 for p in processes), outputs
    return [json.loads(path.read_text()) for path in reports]


if __name__ == "__main__":
    rank_arg, world_arg, store_arg, report_arg = sys.argv[1:]
    if os.environ.get("RANKS_TEST_FAIL") == rank_arg:  # the runner's own test: die at once
        sys.exit(3)
    report = run_rank(int(rank_arg), int(world_arg), store_arg)
    Path(report_arg).write_text(json.dumps(report))
