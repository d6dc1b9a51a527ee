"""One writer per run directory, and folders that only their maker uses: advisory OS locks
(flock), which the kernel releases when their process ends, however it ends.

    with writing(run_dir):   # train, resume, evaluate.py, average_checkpoints.py, hparams.py
        ...                  # a second command gets RunInUse naming the first
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from minimt.atomic import write_error
from minimt.errors import MinimtError, NotFound

LOCK_FILE = "run.lock"
_held: dict[Path, int] = {}  # the run directories this process writes into: times entered


class RunInUse(MinimtError):
    """Another command is writing into the run directory."""


@contextmanager
def writing(run_dir: str | Path) -> Iterator[None]:
    """Hold `run_dir`'s lock (run_dir/run.lock, naming this command and its pid) while the block
    writes into it; the file is removed when the block ends. A process may enter it again (train
    inside scripts/train.py); another process gets RunInUse at once, never a wait."""
    key = Path(run_dir).resolve()
    if not key.is_dir():
        raise NotFound(f"no run directory at {run_dir}")
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    fd = _acquire(key / LOCK_FILE)
    _held[key] = 1
    try:
        yield
    finally:
        del _held[key]
        _release(key / LOCK_FILE, fd)


def _acquire(path: Path) -> int:
    """An open descriptor of `path` holding its lock, this command written into it."""
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunInUse(
                f"{path.parent} is in use by {holder}: one command writes into a run at a time; "
                "wait for it to end, or stop it (a training saves a checkpoint on Ctrl-C), then "
                "run this command again"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):  # else its holder removed it as we opened it: open the new one
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_this_command()).encode())
    except OSError as error:
        _release(path, fd)
        raise write_error(path, error) from error
    except BaseException:
        _release(path, fd)
        raise
    return fd


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise write_error(path, error) from error


def _release(path: Path, fd: int) -> None:
    """Remove the lock file (while still holding it, so no one takes a removed file), unlock."""
    if _same_file(fd, path):
        path.unlink(missing_ok=True)
    os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _this_command() -> dict:
    command = shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "python"
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {"command": command, "pid": os.getpid(), "since": since}


def _holder(fd: int) -> str:
    """The command written into a lock file, in words."""
    try:
        holder = json.loads(os.pread(fd, 1 << 16, 0))
        return f'"{holder["command"]}" (pid {holder["pid"]}, since {holder["since"]})'
    except (OSError, ValueError, TypeError, KeyError):  # being written, or not minimt's
        return "another command"


@contextmanager
def private_folder(parent: Path) -> Iterator[Path]:
    """A new temporary folder in `parent` (tmpXXXXXXXX), locked while the block runs and removed
    after it; the folders there that no living process holds (left by a kill) are removed
    first. Makers and cleaners take turns on `parent`'s own lock, so a folder is never removed
    between its making and its locking."""
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent):
        for stale in parent.glob("tmp*"):
            if stale.is_dir():
                _remove_unless_held(stale)
        folder = Path(tempfile.mkdtemp(dir=parent))
        fd = os.open(folder, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def _remove_unless_held(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except FileNotFoundError:  # its maker removed it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    else:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        os.close(fd)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock (waiting for it: its holders hold it for a moment)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
