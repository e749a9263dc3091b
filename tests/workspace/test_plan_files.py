"""Plan files are written atomically: a failed save leaves the previous plan and no debris.

``save_plan`` writes a new file beside the plan, flushes and fsyncs it, then ``os.replace``
puts it in place (issue 10, item 6: a write that failed midway used to truncate the previous
good plan). The failures are forced three ways: ``json.dump`` raising after writing part,
``fsync`` reporting a full disk, and a real short write under a file-size limit in a child
process.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
import torch
from support.helpers import reserved_manager
from support.seams import allocator_of

import functional_ws as fws
from interop import WorkspaceManager

_real_dump = json.dump


def _saved_good_plan(tmp_path) -> tuple[Path, bytes]:
    path = tmp_path / "plan.json"
    reserved_manager().save_plan(path)
    return path, path.read_bytes()


def _dump_part_then(error: BaseException):
    def dump(obj, fp, **kwargs):
        fp.write(json.dumps(obj, **kwargs)[:20])  # part of the plan reaches the file
        raise error

    return dump


def test_a_save_round_trips_and_leaves_only_the_plan(tmp_path):
    warm = reserved_manager(num_ubatches=2, nbytes=10_000)
    warm.lock()
    path = tmp_path / "plan.json"
    warm.save_plan(path)
    assert json.loads(path.read_text(encoding="utf-8")) == fws.to_dict(warm.state)
    fresh = WorkspaceManager("cpu", num_ubatches=2)
    fresh.load_plan(path)
    assert [s.capacity for s in fresh.stats().slots] == [s.capacity for s in warm.stats().slots]
    assert min(s.capacity for s in fresh.stats().slots) >= 10_000
    assert fresh.is_locked()
    assert os.listdir(tmp_path) == ["plan.json"]


def test_a_save_replaces_a_previous_plan(tmp_path):
    path, _ = _saved_good_plan(tmp_path)
    bigger = reserved_manager(nbytes=1 << 20)
    bigger.save_plan(path)
    assert json.loads(path.read_text(encoding="utf-8")) == fws.to_dict(bigger.state)
    assert os.listdir(tmp_path) == ["plan.json"]


@pytest.mark.parametrize(
    "error",
    [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()],
    ids=["disk-full", "interrupted"],
)
def test_a_write_failing_midway_keeps_the_previous_plan(tmp_path, monkeypatch, error):
    path, before = _saved_good_plan(tmp_path)
    monkeypatch.setattr(json, "dump", _dump_part_then(error))
    with pytest.raises(type(error)):
        reserved_manager(num_ubatches=3).save_plan(path)
    monkeypatch.setattr(json, "dump", _real_dump)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["plan.json"]


def test_a_full_disk_reported_at_fsync_keeps_the_previous_plan(tmp_path, monkeypatch):
    path, before = _saved_good_plan(tmp_path)

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left"):
        reserved_manager(num_ubatches=3).save_plan(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["plan.json"]


def test_a_real_short_write_keeps_the_previous_plan(tmp_path):
    """A file-size limit makes the kernel refuse the write partway (EFBIG), as a full disk."""
    pytest.importorskip("resource")
    script = textwrap.dedent(
        """
        import errno, os, resource, signal, sys
        from interop import WorkspaceManager
        path = sys.argv[1]
        WorkspaceManager("cpu").save_plan(path)
        big = WorkspaceManager("cpu", num_ubatches=64)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))
        try:
            big.save_plan(path)
        except OSError as err:
            print("refused", errno.errorcode[err.errno])
        """
    )
    path = tmp_path / "plan.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "EFBIG"]
    assert json.loads(path.read_text(encoding="utf-8"))["num_ubatches"] == 1
    assert os.listdir(tmp_path) == ["plan.json"]


def test_a_replaced_plan_keeps_its_permissions(tmp_path):
    path, _ = _saved_good_plan(tmp_path)
    os.chmod(path, 0o640)
    reserved_manager(nbytes=8192).save_plan(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_a_new_plan_gets_the_permissions_open_would_give(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    reserved_manager().save_plan(tmp_path / "plan.json")
    assert stat.S_IMODE(os.stat(tmp_path / "plan.json").st_mode) == 0o666 & ~mask


def test_a_link_to_a_plan_is_followed(tmp_path):
    path, _ = _saved_good_plan(tmp_path)
    link = tmp_path / "current.json"
    link.symlink_to("plan.json")
    grown = reserved_manager(nbytes=8192)
    grown.save_plan(link)
    assert link.is_symlink()
    assert json.loads(path.read_text(encoding="utf-8")) == fws.to_dict(grown.state)


def test_a_missing_folder_raises_and_writes_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        reserved_manager().save_plan(tmp_path / "absent" / "plan.json")
    assert os.listdir(tmp_path) == []


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    import socket

    server = socket.socket(socket.AF_UNIX)
    server.bind(os.fspath(path))
    return server


def _folder(path):
    path.mkdir()


@pytest.mark.parametrize(
    ("make", "kind", "test"),
    [(_fifo, "a FIFO", stat.S_ISFIFO), (_socket, "a socket", stat.S_ISSOCK),
     (_folder, "a folder", stat.S_ISDIR)],
    ids=["fifo", "socket", "folder"],
)  # fmt: skip
@pytest.mark.parametrize("through_link", [False, True], ids=["direct", "through-a-link"])
def test_only_a_regular_file_is_replaced(tmp_path, make, kind, test, through_link):
    special = tmp_path / "special"
    keep = make(special)
    path = tmp_path / "plan.json"
    if through_link:
        path.symlink_to(special)
    else:
        path = special
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(FileExistsError, match=kind) as info:
        reserved_manager().save_plan(path)
    assert repr(os.fspath(path)) in str(info.value) and "nothing was written" in str(info.value)
    assert test(os.stat(special).st_mode), "the special file is still what it was"
    assert sorted(os.listdir(tmp_path)) == before  # no partial file left beside it
    del keep


def test_the_null_device_is_never_replaced():
    # As root, replacing the path would swap the system's null device for a regular file.
    with pytest.raises(FileExistsError, match="a character device"):
        reserved_manager().save_plan("/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def _plan_of_a_slot_without_a_buffer(tmp_path, how: str) -> Path:
    """A plan saved while slot (0, 0), which served 1 KiB, holds no buffer: from inside a
    growth's ``alloc_context`` (its old buffer released, the new one not yet there), or
    after the documented failure that leaves the slot with no buffer."""
    path = tmp_path / "plan.json"
    armed, saved = [], []

    @contextlib.contextmanager
    def saving_context():
        if armed and not saved:
            saved.append(ws.state.capacity((0, 0)))
            ws.save_plan(path)
        yield

    ws = WorkspaceManager("cpu", alloc_context=saving_context)
    ws.get_simultaneous(((1024,), torch.uint8))
    if how == "growth-in-flight":
        armed.append(True)
        ws.get_simultaneous(((4096,), torch.uint8))
        assert saved == [0]  # the slot held no buffer while the plan was written
    else:

        def fail(*args, **kwargs):
            raise MemoryError("pretend the device is full")

        with mock.patch.object(allocator_of(ws), "allocate", fail), pytest.raises(MemoryError):
            ws.get_simultaneous(((4096,), torch.uint8))
        assert ws.state.capacity((0, 0)) == 0
        ws.save_plan(path)
    return path


@pytest.mark.parametrize("how", ["growth-in-flight", "failed-growth"])
def test_a_plan_saved_while_a_slot_has_no_buffer_loads(tmp_path, how):
    """Issue 29, item 9: such a plan has a high-water mark above its capacity, which
    ``load_plan`` refused; it loads, and reserves the largest request the slot served."""
    path = _plan_of_a_slot_without_a_buffer(tmp_path, how)
    slot = json.loads(path.read_text(encoding="utf-8"))["slots"][0]
    assert (slot["capacity"], slot["high_water"]) == (0, 1024)
    fresh = WorkspaceManager("cpu")
    fresh.load_plan(path)
    assert fresh.state.capacity((0, 0)) == 1024
    fresh.lock()
    (view,) = fresh.get_simultaneous(((1024,), torch.uint8))  # served under the lock
    assert view.numel() == 1024


def test_a_plan_in_a_folder_that_does_not_exist_names_the_path_given(tmp_path):
    """The new file is written beside the plan, but the error names the caller's path and
    says why (not the hidden ``.partial`` file's name), with the OS error's type."""
    path = tmp_path / "no_such_folder" / "plan.json"
    with pytest.raises(FileNotFoundError) as caught:
        WorkspaceManager("cpu").save_plan(path)
    message = str(caught.value)
    assert f"save_plan(path={str(path)!r})" in message and ".partial" not in message, message
    assert "folder" in message and caught.value.filename == str(path), message
    assert not tmp_path.joinpath("no_such_folder").exists()
