"""The pure core's decisions for a manager built on :mod:`functional_ws`, call by call.

A manager like :class:`interop.WorkspaceManager` is a shell: every decision (where a view
lies, when a slot grows, whether a retained span is intact, what is refused) is the core's,
and the shell carries it out. :class:`CoreMirror` applies the core's transitions to the same
calls, starting from the manager's own initial state, so the machine can check each answer
and the state against what the core decided. The core itself is checked against a byte
model by :class:`functional_ws.testing.WorkspaceMachine`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import functional_ws as fws
from functional_ws import WorkspaceError, WorkspaceState


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the core decides for one call.

    Attributes:
        call: the call, as the machine's notes write it.
        state: the state after the call, or ``None`` when the core refuses it.
        answer: the rest of the transition's result: ``(layout,)``, ``(span, intact)``,
            ``(is_new,)``, ``(growth,)`` or ``()``.
        refusal: the error the core raises, or ``None``.
    """

    call: str
    state: WorkspaceState | None
    answer: tuple[Any, ...] = ()
    refusal: WorkspaceError | None = None

    @property
    def growth(self) -> fws.Growth:
        """The buffers the core grows for this call: a layout's, a span's or reserve's."""
        for item in self.answer:
            if isinstance(item, tuple):  # reserve answers with its growth itself
                return item
            growth = getattr(item, "growth", None)
            if growth is not None:
                return growth  # type: ignore[no-any-return]
        return ()


class CoreMirror:
    """The core's state for the calls made so far, and its plan for the next one.

    Args:
        initial: the manager's state before any call (its configuration comes with it).

    Example:
        >>> import interop, torch
        >>> ws = interop.WorkspaceManager("cpu")
        >>> mirror = CoreMirror(ws.state)
        >>> plan = mirror.plan("get_simultaneous", fws.acquire, (0, 0), ((3,), torch.int8))
        >>> plan.answer[0].offsets, plan.state.capacity((0, 0))
        ((0,), 256)
    """

    def __init__(self, initial: WorkspaceState) -> None:
        self.state = initial

    def plan(self, call: str, transition: Callable[..., Any], *args: Any) -> Plan:
        """Apply ``transition`` to the current state (nothing is committed yet)."""
        try:
            result = transition(self.state, *args)
        except WorkspaceError as err:
            return Plan(call, None, (), err)
        if isinstance(result, WorkspaceState):
            return Plan(call, result)
        state, *answer = result
        return Plan(call, state, tuple(answer))

    def commit(self, plan: Plan) -> None:
        """The manager carried ``plan`` out: its state is the core's next one."""
        assert plan.state is not None
        self.state = plan.state

    @staticmethod
    def check_refusal(plan: Plan, err: BaseException) -> None:
        """The manager refused the call: the core must refuse it too, with the same class."""
        assert plan.refusal is not None, (
            f"{plan.call} raised {type(err).__name__}: {err}; the core plans it without error"
        )
        assert type(err) is type(plan.refusal), (
            f"{plan.call} raised {type(err).__name__}; the core refuses it with "
            f"{type(plan.refusal).__name__}: {plan.refusal}"
        )

    @staticmethod
    def check_served(plan: Plan) -> None:
        """The manager served the call: the core must not refuse it."""
        assert plan.refusal is None, (
            f"{plan.call} succeeded, but the core refuses it: "
            f"{type(plan.refusal).__name__}: {plan.refusal}"
        )

    def check_state(self, actual: WorkspaceState) -> None:
        """The manager's state is the core's, field by field."""
        assert actual == self.state, (
            "the manager's state differs from the core's for the same calls (core -> "
            f"manager):\n{fws.diff(self.state, actual)}"
        )
