"""Plans on disk: a warm-up's sizes as JSON, reserved again at the next start."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat

import functional_ws as fws
from functional_ws import InvalidPlanError, WorkspaceState
from functional_ws._checks import unique_fields


def save_plan(state: WorkspaceState, path: str | os.PathLike[str]) -> None:
    """Write ``state``'s plan (:func:`functional_ws.to_dict`) to ``path`` as JSON, atomically.

    The JSON goes to a new file beside ``path`` (same folder, so the same file system),
    flushed and ``fsync``-ed, which ``os.replace`` then puts in place: ``path`` holds the
    previous plan or the new one, never a part. A write that fails (a full disk, an
    interrupt) leaves the previous plan as it was and removes the new file. A new plan
    gets the permissions ``open`` would give it; one that replaces a plan keeps its
    permissions; a symbolic link is followed (its target is replaced). Only a regular file
    is replaced: a FIFO, a device node, a socket or a folder at ``path`` is refused.

    Args:
        state: the state whose plan to write.
        path: where; its folder must exist and be writable (else the ``OSError`` names
            ``path`` and the folder).

    Raises:
        FileExistsError: (``OSError``) ``path`` is something other than a regular file
            (nothing is written).
        OSError: the plan could not be written (the previous one, if any, is unchanged).

    Example:
        >>> import json, os, pathlib, tempfile
        >>> import functional_ws as fws
        >>> path = pathlib.Path(tempfile.mkdtemp(), "plan.json")
        >>> save_plan(fws.initial_state(2, 1), path)
        >>> json.loads(path.read_text())["num_ubatches"], os.listdir(path.parent)
        (2, ['plan.json'])
    """
    target = os.path.realpath(path)
    _refuse_special_file(path, target)
    folder, name = os.path.split(target)
    partial = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
    except OSError as err:  # named by the caller's path: the new file's name is ours
        raise type(err)(
            err.errno,
            f"save_plan(path={os.fspath(path)!r}): no file can be created in its folder "
            f"{folder!r} ({err.strerror}; nothing was written)",
            os.fspath(path),
        ) from None
    try:
        with open(fd, "w", encoding="utf-8") as f:
            json.dump(fws.to_dict(state), f, indent=1)
            f.flush()
            with contextlib.suppress(FileNotFoundError):
                os.chmod(partial, stat.S_IMODE(os.stat(target).st_mode))  # keep a plan's mode
            os.fsync(f.fileno())
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _refuse_special_file(path: str | os.PathLike[str], target: str) -> None:
    """Refuse to replace anything at ``target`` (``path`` resolved) but a regular file."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((word for test, word in kinds if test(mode)), "not a regular file")
    where = "it" if os.fspath(path) == target else f"{target!r}, where it leads,"
    raise FileExistsError(
        errno.EEXIST,
        f"save_plan(path={os.fspath(path)!r}): {where} is {kind}; a plan is written only "
        "where nothing is or over a regular file (nothing was written)",
        target,
    )


class _HugeInt:
    """An integer of the plan file too long for Python to read (over its digit limit): kept
    as its size, so that the plan's check names the field that holds it."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"


def _plan_int(text: str) -> int | _HugeInt:
    """A JSON integer of a plan file (``json``'s ``parse_int``)."""
    try:
        return int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        return _HugeInt(len(text.lstrip("-")))


def load_plan(path: str | os.PathLike[str]) -> WorkspaceState:
    """The plan saved at ``path`` (:func:`functional_ws.from_dict` of its JSON).

    Raises:
        InvalidPlanError: (``ValueError``) naming the file: it cannot be read as UTF-8 JSON
            (empty, truncated, not UTF-8, nested too deeply), or its data is not a plan
            (the message then names the field, see :func:`functional_ws.from_dict`).
        OSError: the file cannot be opened.
    """
    where = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        data = json.loads(
            raw.decode("utf-8"),
            parse_int=_plan_int,
            object_pairs_hook=lambda pairs: unique_fields(pairs, InvalidPlanError),
        )
    except UnicodeDecodeError as err:
        raise InvalidPlanError(f"plan file {where!r} is not UTF-8 text ({err}).") from None
    except InvalidPlanError as err:  # a field written twice
        raise InvalidPlanError(f"plan file {where!r}: {err}") from None
    except json.JSONDecodeError as err:
        what = "empty" if not raw.strip() else f"not valid JSON ({err})"
        raise InvalidPlanError(f"plan file {where!r} is {what}.") from None
    except RecursionError:
        raise InvalidPlanError(f"plan file {where!r} is nested too deeply to be a plan.") from None
    try:
        return fws.from_dict(data)
    except InvalidPlanError as err:
        raise InvalidPlanError(f"plan file {where!r}: {err}") from None
