"""Crash-safe file writing: a file appears complete under its final name, or not at all."""

import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from minimt.errors import MinimtError

TEMP_SUFFIX = ".tmp"


class WriteError(MinimtError, OSError):
    """A file not written (full disk, read-only folder): named, with why; its old version kept."""


@contextmanager
def atomic_write(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; if the block succeeds, fsync it and rename it onto `path`.
    A failure inside leaves the previous file untouched and no partial file under the final name
    (a kill -9 leaves a hidden .tmp file that `remove_temp_files` clears); an OSError while writing
    (ENOSPC: a full disk) is raised as a WriteError that names `path` and says why."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        with tmp.open("rb+") as file:
            os.fsync(file.fileno())
        os.replace(tmp, path)
        _fsync_directory(path.parent)  # makes the rename itself survive a power loss
    except OSError as error:
        ours = (tmp, path, *path.parents)  # the folders it may have to create included
        another_file = error.filename is not None and Path(error.filename) not in ours
        if isinstance(error, MinimtError) or another_file:
            raise  # e.g. a source file read inside the block: not this write's failure
        raise WriteError(f"could not write {path}: {why_not_written(error, path)}") from error
    finally:
        if tmp.exists():  # False too where the folder could not be made
            tmp.unlink()


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def why_not_written(error: OSError, path: Path) -> str:
    """The reason of a failed write; for a full disk (or a failure without an errno) with the
    free space of the filesystem that holds `path`."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT, None):
        folder = next(p for p in path.parents if p.exists())
        free_mb = shutil.disk_usage(folder).free / 2**20
        reason += f" ({free_mb:,.1f} MB free on the filesystem of {folder})"
    return reason


def remove_temp_files(folder: str | Path) -> list[Path]:
    """Delete the temp files that interrupted atomic writes left in `folder`; return them."""
    leftovers = list(Path(folder).glob(f".*{TEMP_SUFFIX}"))
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


def _fsync_directory(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
