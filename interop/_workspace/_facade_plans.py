"""The façade's reservations and plans: :meth:`WorkspaceManager.reserve`,
:meth:`~WorkspaceManager.reserve_many`, :meth:`~WorkspaceManager.save_plan` and
:meth:`~WorkspaceManager.load_plan`.

Part of the façade (``_facade.py`` composes it into :class:`interop.WorkspaceManager`): each
method normalises its arguments at the request boundary (``_requests.py``) and hands the
transition to the slow paths (``_serving.py``), which the engine runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Literal

import torch

from functional_ws import ViewSpec

from .._context import current_slot
from . import _plans
from ._engine import Engine
from ._requests import canonical, chosen_slots, reserve_requests, torch_specs
from ._serving import Server


class Reservations:
    """The reservation and plan methods of :class:`interop.WorkspaceManager`."""

    _engine: Engine
    _server: Server
    _num_ubatches: int

    def reserve(
        self,
        *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype],
        slots: Iterable[tuple[int, int]] | Literal["all"] | None = None,
    ) -> None:
        """Pre-allocate room for these views, taken together, in every ubatch slot
        (upstream vLLM's method).

        Sizes ONE simultaneous layout of all the pairs (each rounded up to 256 bytes, back
        to back, exactly as :meth:`get_simultaneous` lays them out) and grows each slot
        that is smaller. Idempotent; call it before :meth:`lock` so that the lock snapshots
        a workspace large enough on every ubatch, not only the one that happened to run.

        Which slots: by default every ubatch slot of the current lane (upstream has no
        lanes); ``slots="all"`` for every slot of every lane, or a list of
        ``(ubatch, lane)`` pairs. The growth policy applies as usual.

        Args:
            *shapes_and_dtypes: ``(shape, dtype)`` pairs, one :meth:`get_simultaneous`
                call's worth.
            slots: ``None`` (the current lane's ubatch slots), ``"all"`` or a list of slots.

        Raises:
            WorkspaceLockedError: (``AssertionError``) locked and a slot would have to grow.
            InvalidSpecError: (``ValueError``) a malformed pair or slot list.
            CapacityLimitError: (``RuntimeError``) more bytes than the device has.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu", num_ubatches=2)
            >>> ws.reserve(((1024,), torch.float16), ((10,), torch.int32))
            >>> [s.capacity for s in ws.stats().slots]
            [2304, 2304]
        """
        pairs = canonical(shapes_and_dtypes, "shapes_and_dtypes")
        self._reserve([torch_specs(pairs, "shapes_and_dtypes")], slots)

    def reserve_many(
        self,
        requests: Iterable[Iterable[tuple[tuple[int, ...], torch.dtype]]],
        *,
        slots: Iterable[tuple[int, int]] | Literal["all"] | None = None,
    ) -> None:
        """Reserve several requests at once: each slot grows to the largest of them.

        Args:
            requests: each a list of ``(shape, dtype)`` pairs, one :meth:`get_simultaneous`
                call (a one-pair list also covers a :meth:`get_retained` of that pair).
            slots: as for :meth:`reserve`.

        Raises:
            WorkspaceLockedError: (``AssertionError``) locked and a slot would have to grow.
            InvalidSpecError: (``ValueError``) a malformed request or slot list.

        Example:
            >>> import torch
            >>> from interop import WorkspaceManager
            >>> ws = WorkspaceManager("cpu", num_lanes=2)
            >>> ws.reserve_many([[((300,), torch.uint8)], [((10,), torch.float32)] * 3],
            ...                 slots="all")
            >>> [s.capacity for s in ws.stats().slots]
            [768, 768]
        """
        self._reserve(reserve_requests(requests), slots)

    def _reserve(self, requests: list[list[ViewSpec]], slots: Any) -> None:
        lane = 0
        if slots is None:  # the current lane's ubatch slots: the lane must exist
            lane = current_slot()[1]
            self._engine.state.index((0, lane))
        self._server.reserve(requests, chosen_slots(slots, lane, self._num_ubatches))

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the current sizes to ``path`` as JSON (:func:`functional_ws.to_dict`).

        The file is replaced atomically: a write that fails leaves the previous plan intact.
        Only a regular file is replaced (or nothing at ``path``). Load it at the next start
        with :meth:`load_plan` to reserve those sizes at once.

        Raises:
            FileExistsError: (``OSError``) ``path`` is a FIFO, a device node, a socket or a
                folder (also at the end of a link): nothing is written.
            OSError: the plan could not be written (the previous one is unchanged).
        """
        _plans.save_plan(self._engine.state, path)

    def load_plan(self, path: str | os.PathLike[str]) -> None:
        """Reserve the capacities a saved plan lists, and lock if the plan was locked.

        The whole plan is checked before anything grows, and a plan that needs a slot to
        grow above the device's memory is refused before anything is released.

        Args:
            path: a file written by :meth:`save_plan`.

        Raises:
            InvalidPlanError: (``ValueError``) the file is not a plan (naming the file and
                the field), or it was made for another number of ubatches or lanes or
                another alignment.
            WorkspaceLockedError: this manager is locked and would have to grow.

        Example:
            >>> import os, tempfile, torch
            >>> from interop import WorkspaceManager
            >>> warm = WorkspaceManager("cpu")
            >>> _ = warm.get_simultaneous(((1000,), torch.float32))
            >>> warm.lock()
            >>> path = os.path.join(tempfile.mkdtemp(), "plan.json")
            >>> warm.save_plan(path)
            >>> fresh = WorkspaceManager("cpu")
            >>> fresh.load_plan(path)
            >>> fresh.is_locked(), fresh.stats().slots[0].capacity
            (True, 4096)
        """
        self._server.apply_plan(_plans.load_plan(path), path)
