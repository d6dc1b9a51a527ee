"""Crash-safe file writing: a file appears complete under its final name, or not at all."""

import errno
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from minimt.errors import MinimtError

TEMP_SUFFIX = ".tmp"
# Errors only writing gives: reading a file never fills a disk or meets a read-only filesystem.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


class WriteError(MinimtError, OSError):
    """A file not written (full disk, read-only folder): named, with why; its old version kept."""


@contextmanager
def atomic_write(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; if the block succeeds, fsync it and rename it onto `path`.
    A failure inside leaves the previous file untouched and no partial file under the final name
    (a kill -9 leaves a hidden .tmp file that `remove_temp_files` clears); an OSError while writing
    (ENOSPC: a full disk) or renaming is raised as a WriteError that names `path` and says why.
    An error that names only another file (a source read inside the block) is raised as it is."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
        except OSError as error:
            written = (tmp, path, *path.parents)  # the folders it may have to create included
            if isinstance(error, MinimtError) or not is_write_fault(error, written=written):
                raise
            raise write_error(path, error) from error
        try:
            _commit(tmp, path)
        except OSError as error:  # fsync or rename: this write's, whatever file it names
            raise write_error(path, error) from error
    finally:
        if tmp.exists():  # False too where the folder could not be made
            tmp.unlink()


def only_a_write_fails(error: OSError) -> bool:
    """Whether `error`'s errno is one that only a write gives: a full disk, a quota, a file too
    big, a read-only filesystem."""
    return error.errno in WRITE_ERRNOS


def is_write_fault(error: OSError, *, written: Sequence[Path]) -> bool:
    """Whether `error`, raised while writing the files `written`, is their write's failure.

    Yes for an errno that only a write gives (a full disk, a quota, a read-only filesystem)
    whatever file the error names: shutil.copyfile puts its source in `error.filename` even when
    the destination's disk is full. Else yes when it names one of `written`, or no file at all;
    an error that names only other files is theirs (a source that could not be read)."""
    if only_a_write_fails(error):
        return True
    named = [
        Path(os.fsdecode(name))
        for name in (error.filename, error.filename2)
        if isinstance(name, str | bytes | os.PathLike)
    ]
    return not named or any(name in written for name in named)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def why_not_written(error: OSError, path: Path) -> str:
    """The reason of a failed write; for a full disk (or a failure without an errno) with the
    free space of the filesystem that holds `path`, for a folder that is a file in the way
    with its name."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT, None):
        folder = next(p for p in path.parents if p.exists())
        free_mb = shutil.disk_usage(folder).free / 2**20
        reason += f" ({free_mb:,.1f} MB free on the filesystem of {folder})"
    if error.errno in (errno.EEXIST, errno.ENOTDIR):  # its folder could not be made
        if file := next((p for p in path.parents if p.is_file()), None):
            reason += f" ({file} is a file, not a folder)"
    return reason


def remove_temp_files(folder: str | Path) -> list[Path]:
    """Delete the temp files that interrupted atomic writes left in `folder`; return them."""
    leftovers = list(Path(folder).glob(f".*{TEMP_SUFFIX}"))
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


def write_error(path: Path, error: OSError) -> WriteError:
    """The WriteError of a failed write of `path`: `could not write PATH: why`."""
    return WriteError(f"could not write {path}: {why_not_written(error, path)}")


def _commit(tmp: Path, path: Path) -> None:
    """fsync `tmp` and rename it onto `path`, durably."""
    with tmp.open("rb+") as file:
        os.fsync(file.fileno())
    os.replace(tmp, path)
    _fsync_directory(path.parent)  # makes the rename itself survive a power loss


def _fsync_directory(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_write(path) as tmp:
        tmp.write_bytes(data)
