"""Upstream's words: every message a vLLM 0.33.0 or 0.34.0 caller can see, against ours.

Each row triggers one message (an exception, or a record of the workspace's logger) and
states vLLM 0.33.0's exact text for it (``vllm/v1/worker/workspace.py``; 0.34.0 changed
none and added none: its ``get_retained`` raises the growth check's), with the builtin
type or the log level upstream uses. Ours must be of that type or level, and its text must
be upstream's, whole, with anything we add after it as a new sentence: log filters and
``pytest.raises(match=...)`` written against vLLM keep matching. ``<caller>`` stands for the
``file:line:function`` of the row's request, as upstream names it. The logger's name differs
(``interop`` against ``vllm.v1.worker.workspace``), as the module's does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

import interop

U8, I32, I64 = torch.uint8, torch.int32, torch.int64
MB = 1024 * 1024
HERE = Path(__file__).name
Manager = interop.WorkspaceManager


@dataclasses.dataclass(frozen=True)
class Said:
    """What a row's trigger produced: an exception's class and text, or a log record's
    level and message; ``caller`` is the request's ``file:line:function``."""

    kind: type[BaseException] | int
    text: str
    caller: str


def _caller(request: Callable[..., object]) -> str:
    code = request.__code__  # a one-line lambda: its first line is the line of the request
    return f"{HERE}:{code.co_firstlineno}:{code.co_name}"


def raises(request: Callable[[], object]) -> Callable[[pytest.LogCaptureFixture], Said]:
    def trigger(caplog: pytest.LogCaptureFixture) -> Said:
        with pytest.raises(Exception) as info:  # the row says which type
            request()
        return Said(type(info.value), str(info.value), _caller(request))

    return trigger


def logs(request: Callable[[], object]) -> Callable[[pytest.LogCaptureFixture], Said]:
    """The last record of the ``interop`` logger during ``request``."""

    def trigger(caplog: pytest.LogCaptureFixture) -> Said:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="interop"):
            request()
        records = [r for r in caplog.records if r.name == "interop"]
        assert records, "nothing was logged"
        return Said(records[-1].levelno, records[-1].getMessage(), _caller(request))

    return trigger


def locked(*requests: tuple[tuple[int, ...], torch.dtype], lanes: int = 1) -> Manager:
    """A manager that served ``requests`` (scratch), claimed the persistent ``locks``
    tensor, and was locked."""
    ws = Manager("cpu", num_lanes=lanes)
    if requests:
        ws.get_simultaneous(*requests)
    ws.get_persistent("locks", (8,), I32)
    ws.lock()
    return ws


def in_lane(lane: int, request: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with interop.use_workspace_lane(lane):
            return request()

    return run


def entered(lane: int) -> None:
    with interop.use_workspace_lane(lane):
        pass


def locks_in_another_lane() -> torch.Tensor:
    ws = locked(lanes=2)  # claimed in lane 0
    with interop.use_workspace_lane(1):
        return ws.get_persistent("locks", (8,), I32)


def reinit() -> None:
    interop.init_workspace_manager("cpu")
    interop.init_workspace_manager("cpu")


NOT_INITIALIZED = (
    "WorkspaceManager not initialized. Call init_workspace_manager() with a device before "
    "using workspace functions."
)


class Row(NamedTuple):
    trigger: Callable[[pytest.LogCaptureFixture], Said]
    kind: type[BaseException] | int  # upstream's exception type, or its log level
    upstream: str  # upstream's exact text
    marks: Any = ()


ROWS = {
    "not-initialized": Row(
        raises(lambda: interop.current_workspace_manager()), AssertionError, NOT_INITIALIZED
    ),
    "not-initialized-via-lock_workspace": Row(
        raises(lambda: interop.lock_workspace()), AssertionError, NOT_INITIALIZED
    ),
    "num_lanes-at-least-one": Row(
        raises(lambda: Manager("cpu", num_lanes=0)),
        ValueError,
        "num_lanes must be at least one, got 0.",
    ),
    "lane-negative": Row(
        raises(lambda: entered(-1)), ValueError, "Workspace lane must be non-negative, got -1."
    ),
    "lane-not-configured": Row(
        raises(in_lane(1, lambda: Manager("cpu").get_simultaneous(((1,), U8)))),
        RuntimeError,
        "Workspace lane 1 is not configured; manager has 1 lane(s).",
    ),
    "lane-not-configured-persistent": Row(
        raises(in_lane(3, lambda: Manager("cpu", num_lanes=2).get_persistent_resource(1, int))),
        RuntimeError,
        "Workspace lane 3 is not configured; manager has 2 lane(s).",
    ),
    "persistent-locked": Row(
        raises(lambda: locked().get_persistent_resource("new", object)),
        AssertionError,
        "Workspace is locked but 'new' was not allocated during warmup for the current ubatch "
        "and lane.",
    ),
    "persistent-locked-tensor": Row(
        raises(lambda: locked().get_persistent("new", (8,), I32)),
        AssertionError,
        "Workspace is locked but (<class 'torch.Tensor'>, 'new') was not allocated during "
        "warmup for the current ubatch and lane.",
    ),
    "persistent-locked-other-lane": Row(
        raises(locks_in_another_lane),
        AssertionError,
        "Workspace is locked but (<class 'torch.Tensor'>, 'locks') was not allocated during "
        "warmup for the current ubatch and lane.",
    ),
    "persistent-mismatch-shape": Row(
        raises(lambda: locked().get_persistent("locks", (16,), I32)),
        ValueError,
        "Persistent workspace 'locks' has shape=torch.Size([8]), dtype=torch.int32; requested "
        "shape=(16,), dtype=torch.int32.",
    ),
    "persistent-mismatch-dtype": Row(
        raises(lambda: locked().get_persistent("locks", (8,), I64)),
        ValueError,
        "Persistent workspace 'locks' has shape=torch.Size([8]), dtype=torch.int32; requested "
        "shape=(8,), dtype=torch.int64.",
    ),
    "locked-growth-get_simultaneous": Row(
        raises(lambda: locked(((MB,), U8)).get_simultaneous(((2 * MB,), U8))),
        AssertionError,
        "Workspace is locked but allocation from '<caller>' requires 2.00 MB, current size is "
        "1.00 MB. Workspace growth is not allowed after locking.",
    ),
    "locked-growth-get_retained": Row(
        raises(lambda: locked(((MB,), U8)).get_retained("kv", (3 * MB,), U8)),
        AssertionError,
        "Workspace is locked but allocation from '<caller>' requires 3.00 MB, current size is "
        "1.00 MB. Workspace growth is not allowed after locking.",
    ),
    "lock-debug-log": Row(
        logs(lambda: locked(((MB,), U8))),
        logging.INFO,
        "[WORKSPACE DEBUG] Workspace locked. Current sizes: [1.0]",
    ),
    "unlock-debug-log": Row(
        logs(lambda: locked(((MB,), U8)).unlock()),
        logging.INFO,
        "[WORKSPACE DEBUG] Workspace unlocked. Current sizes: [1.0]",
    ),
    "resize-debug-log": Row(
        logs(lambda: Manager("cpu").get_simultaneous(((MB,), U8))),
        logging.INFO,
        "[WORKSPACE DEBUG] Resized workspace from '<caller>': 0.00 MB -> 1.00 MB (ubatch 0, "
        "lane 0)",
    ),
    "reinit-warning": Row(
        logs(reinit),
        logging.WARNING,
        "WorkspaceManager already initialized on device cpu, reinitializing on device cpu",
    ),
}


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    """No manager, and the debug log on as a vLLM user turns it on."""
    monkeypatch.setenv("VLLM_DEBUG_WORKSPACE", "1")
    monkeypatch.delenv("FUNCTIONAL_WS_DEBUG", raising=False)
    interop.reset_workspace_manager()
    yield
    interop.reset_workspace_manager()


@pytest.mark.parametrize(
    ("trigger", "kind", "upstream"),
    [pytest.param(*row[:3], marks=row.marks) for row in ROWS.values()],
    ids=ROWS,
)
def test_ours_says_upstreams_words_first(trigger, kind, upstream, caplog):
    said = trigger(caplog)
    if isinstance(kind, int):
        assert said.kind == kind, logging.getLevelName(said.kind)
    else:
        assert issubclass(said.kind, kind), said.kind
    expected = upstream.replace("<caller>", said.caller)
    assert said.text == expected or said.text.startswith(expected + " "), (
        f"\nupstream: {expected}\nours:     {said.text}"
    )


def test_a_ubatch_past_the_slots_is_still_an_index_error():
    """Upstream has no message of its own here (a list index fails: "list index out of
    range"); ours says what is wrong, and is still an ``IndexError``."""
    ws = Manager("cpu", num_ubatches=2)
    with interop.use_workspace_ubatch(2), pytest.raises(IndexError, match="ubatch 2"):
        ws.get_simultaneous(((1,), U8))
